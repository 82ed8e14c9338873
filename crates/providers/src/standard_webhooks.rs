//! Standard Webhooks (<https://www.standardwebhooks.com>): `webhook-signature: v1,<base64>`, a
//! space-separated list during secret rotation, each the HMAC-SHA256 of
//! `{webhook-id}.{webhook-timestamp}.{body}`. The secret is `whsec_` followed by the base64 of the
//! key; it is decoded once, when the [`Verifier`](crate::Verifier) is built.
//!
//! Entries of other versions (`v1a,` is ed25519) are skipped; any `v1` entry may match. The
//! timestamp must be within the tolerance (the reference libraries use 5 minutes, both ways). The
//! event id is `webhook-id`, kept on every retry.
//!
//! [Svix](crate::svix) is the same scheme with `svix-` header names.

use std::time::SystemTime;

use http::{HeaderMap, HeaderName};

use crate::error::{ConfigError, VerifyError};
use crate::util::{
    Keyed, base64_decode, base64_encode, header, malformed, parse_unix_seconds, require_match,
};

/// The header carrying the message id (and event id).
pub const ID_HEADER: HeaderName = HeaderName::from_static("webhook-id");
/// The header carrying the signed timestamp.
pub const TIMESTAMP_HEADER: HeaderName = HeaderName::from_static("webhook-timestamp");
/// The header carrying the signatures.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("webhook-signature");
/// What every secret of this scheme starts with.
pub const SECRET_PREFIX: &str = "whsec_";

/// The three header names of one flavour of the scheme.
#[derive(Debug)]
pub(crate) struct Names {
    pub(crate) scheme: &'static str,
    pub(crate) id: HeaderName,
    pub(crate) timestamp: HeaderName,
    pub(crate) signature: HeaderName,
}

pub(crate) static STANDARD: Names = Names {
    scheme: "standard-webhooks",
    id: ID_HEADER,
    timestamp: TIMESTAMP_HEADER,
    signature: SIGNATURE_HEADER,
};

/// The HMAC key inside a `whsec_<base64>` secret.
///
/// # Errors
/// A short reason that never quotes the secret.
pub(crate) fn decode_secret(secret: &[u8]) -> Result<Vec<u8>, &'static str> {
    const FORM: &str = "expected whsec_ followed by the base64 of the key";
    let text = std::str::from_utf8(secret).map_err(|_| FORM)?;
    let encoded = text.strip_prefix(SECRET_PREFIX).ok_or(FORM)?;
    if encoded.is_empty() {
        return Err("the key after whsec_ is empty");
    }
    base64_decode(encoded).ok_or("the part after whsec_ is not valid base64")
}

/// The `webhook-signature` value for a message, as a Standard Webhooks sender would send it:
/// `v1,<base64>`. `secret` is the `whsec_...` form; `timestamp` is Unix seconds (also sent as
/// `webhook-timestamp`).
///
/// For tests and load generation.
///
/// # Errors
/// [`ConfigError::Secret`] when the secret is not `whsec_` + base64.
pub fn sign(
    secret: &[u8],
    msg_id: &str,
    timestamp: u64,
    body: &[u8],
) -> Result<String, ConfigError> {
    sign_as(&STANDARD, secret, msg_id, timestamp, body)
}

pub(crate) fn sign_as(
    names: &Names,
    secret: &[u8],
    msg_id: &str,
    timestamp: u64,
    body: &[u8],
) -> Result<String, ConfigError> {
    let key = decode_secret(secret).map_err(|why| ConfigError::Secret {
        index: 0,
        scheme: names.scheme,
        why,
    })?;
    Ok(sign_with(&Keyed::sha256(&key), msg_id, timestamp, body))
}

pub(crate) fn sign_with(key: &Keyed, msg_id: &str, timestamp: u64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mac = key
        .over(&[msg_id.as_bytes(), b".", ts.as_bytes(), b".", body])
        .finalize();
    format!("v1,{}", base64_encode(&mac))
}

pub(crate) fn check(
    names: &Names,
    keys: &[Keyed],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<SystemTime, VerifyError> {
    // The id is signed as the bytes it is; whether it is a usable event id is decided after the
    // signature (a 400, not a 401).
    let id = headers
        .get(&names.id)
        .ok_or_else(|| VerifyError::MissingHeader {
            header: names.id.clone(),
        })?
        .as_bytes();
    let ts = header(headers, &names.timestamp)?.trim();
    let value = header(headers, &names.signature)?;
    let mut entries = 0;
    let mut signatures = Vec::new();
    for entry in value.split_ascii_whitespace() {
        let Some((version, signature)) = entry.split_once(',') else {
            continue;
        };
        entries += 1;
        if version == "v1" {
            // Not base64: cannot match, like the libraries' string comparison.
            signatures.extend(base64_decode(signature));
        }
    }
    if entries == 0 {
        return Err(malformed(
            &names.signature,
            "expected space-separated version,signature entries",
        ));
    }
    let signed_at = parse_unix_seconds(ts, &names.timestamp)?;
    require_match(keys, &[id, b".", ts.as_bytes(), b".", body], &signatures)?;
    Ok(signed_at)
}
