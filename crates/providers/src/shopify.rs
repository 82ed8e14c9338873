//! Shopify: `X-Shopify-Hmac-SHA256: <base64>`, the HMAC-SHA256 of the body keyed with the app's
//! client secret (or the webhook signing secret shown in the admin). No timestamp is signed, so
//! no tolerance applies.
//!
//! The event id is `X-Shopify-Webhook-Id`, which is per delivery and kept on retry.
//! (`X-Shopify-Event-Id` is shared by every subscription to the event, so it is not used.)

use http::{HeaderMap, HeaderName};

use crate::error::VerifyError;
use crate::keyed::{Keyed, require_match};
use crate::util::{base64_decode, base64_encode, header, malformed};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("x-shopify-hmac-sha256");
/// The delivery id, kept on retry.
pub const WEBHOOK_ID_HEADER: HeaderName = HeaderName::from_static("x-shopify-webhook-id");

/// The `X-Shopify-Hmac-SHA256` value Shopify would send for `body`.
///
/// For tests and load generation.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    sign_with(&Keyed::sha256(secret), body)
}

pub(crate) fn sign_with(key: &Keyed, body: &[u8]) -> String {
    base64_encode(&key.over(&[body]).finalize())
}

pub(crate) fn check(keys: &[Keyed], headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
    let value = header(headers, &SIGNATURE_HEADER)?;
    let signature = base64_decode(value.trim())
        .ok_or_else(|| malformed(&SIGNATURE_HEADER, "signature is not base64"))?;
    require_match(keys, &[body], &[signature])
}
