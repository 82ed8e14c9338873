//! GitHub: `X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256 of the body keyed with the
//! webhook secret. No timestamp is signed, so no tolerance applies.
//!
//! The event id is `X-GitHub-Hook-ID` + `:` + `X-GitHub-Delivery`. A delivery GUID is shared by
//! every hook (and app) subscribed to the same event, so it is scoped by the hook id; when a
//! sender omits `X-GitHub-Hook-ID` (GitHub always sends it) the delivery GUID alone is the id.
//! The legacy SHA-1 `X-Hub-Signature` header is not checked.

use http::{HeaderMap, HeaderName};
use idemgate_core::EventId;

use crate::error::VerifyError;
use crate::keyed::{Keyed, require_match};
use crate::util::{event_id_header_text, header, hex_decode, hex_encode, malformed};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("x-hub-signature-256");
/// The delivery GUID, kept on redelivery.
pub const DELIVERY_HEADER: HeaderName = HeaderName::from_static("x-github-delivery");
/// The hook id that scopes the delivery GUID.
pub const HOOK_ID_HEADER: HeaderName = HeaderName::from_static("x-github-hook-id");

/// The `X-Hub-Signature-256` value GitHub would send for `body`.
///
/// For tests and load generation.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    sign_with(&Keyed::sha256(secret), body)
}

pub(crate) fn sign_with(key: &Keyed, body: &[u8]) -> String {
    format!("sha256={}", hex_encode(&key.over(&[body]).finalize()))
}

pub(crate) fn check(keys: &[Keyed], headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
    let value = header(headers, &SIGNATURE_HEADER)?;
    let hex = value
        .trim()
        .strip_prefix("sha256=")
        .ok_or_else(|| malformed(&SIGNATURE_HEADER, "expected sha256=<hex>"))?;
    let signature =
        hex_decode(hex).ok_or_else(|| malformed(&SIGNATURE_HEADER, "signature is not hex"))?;
    require_match(keys, &[body], &[signature])
}

pub(crate) fn event_id(headers: &HeaderMap) -> Result<EventId, VerifyError> {
    let delivery = event_id_header_text(headers, &DELIVERY_HEADER)?
        .filter(|d| !d.is_empty())
        .ok_or_else(|| VerifyError::MissingEventId {
            location: format!("header {DELIVERY_HEADER}"),
        })?;
    let id = match event_id_header_text(headers, &HOOK_ID_HEADER)?.filter(|h| !h.is_empty()) {
        Some(hook) => format!("{hook}:{delivery}"),
        None => delivery.to_owned(),
    };
    EventId::new(id).map_err(VerifyError::InvalidEventId)
}
