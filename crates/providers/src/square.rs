//! Square: `x-square-hmacsha256-signature: <base64>`, the HMAC-SHA256 of the notification URL
//! followed by the raw body, keyed with the subscription's signature key. No timestamp is signed,
//! so no tolerance applies.
//!
//! The notification URL is part of the signed bytes: it is configured per source
//! ([`SquareScheme::signed_url`](crate::SquareScheme)), exactly as Square's Developer Console
//! shows it, since the gateway cannot know the public URL a proxy in front of it was reached at.
//!
//! The event id is the body's `event_id`, which Square keeps on retry. The legacy
//! `x-square-signature` header (HMAC-SHA1 of the same bytes, sent for subscriptions made before
//! 2021) is not read: only the SHA-256 signature is checked, as Square's SDKs do.

use http::{HeaderMap, HeaderName};

use crate::error::{ConfigError, VerifyError};
use crate::keyed::{Keyed, require_match};
use crate::util::{base64_decode, base64_encode, header, malformed};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("x-square-hmacsha256-signature");
/// Where the event id is in the body.
pub(crate) const EVENT_ID_POINTER: &str = "/event_id";

/// The `x-square-hmacsha256-signature` value Square would send for `body` posted to
/// `notification_url`.
///
/// For tests and load generation.
pub fn sign(secret: &[u8], notification_url: &str, body: &[u8]) -> String {
    sign_with(&Keyed::sha256(secret), notification_url, body)
}

pub(crate) fn sign_with(key: &Keyed, url: &str, body: &[u8]) -> String {
    base64_encode(&key.over(&[url.as_bytes(), body]).finalize())
}

pub(crate) fn check(
    keys: &[Keyed],
    url: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), VerifyError> {
    let value = header(headers, &SIGNATURE_HEADER)?;
    let signature = base64_decode(value.trim())
        .ok_or_else(|| malformed(&SIGNATURE_HEADER, "signature is not base64"))?;
    require_match(keys, &[url.as_bytes(), body], &[signature])
}

/// Validates a configured notification URL: an absolute `http(s)://` URL, used as written.
pub(crate) fn check_url(scheme: &'static str, url: &str) -> Result<(), ConfigError> {
    let setting = |why| ConfigError::Setting {
        scheme,
        field: "signed_url",
        why,
    };
    if url.is_empty() {
        return Err(ConfigError::Missing {
            scheme,
            field: "signed_url",
        });
    }
    let lower = url.to_ascii_lowercase();
    let rest = ["https://", "http://"]
        .iter()
        .find_map(|scheme| lower.strip_prefix(scheme))
        .ok_or_else(|| {
            setting("must be an absolute http:// or https:// URL, as the sender was given it")
        })?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err(setting("has no host"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(setting("holds whitespace or a control character"));
    }
    Ok(())
}
