//! Slack (Events API): `X-Slack-Signature: v0=<hex>`, the HMAC-SHA256 of
//! `v0:{X-Slack-Request-Timestamp}:{body}` keyed with the app's signing secret as shown (not
//! decoded). The timestamp must be within the tolerance (Slack's SDKs use 5 minutes).
//!
//! The event id is the body's `event_id`. Slack's one-time `url_verification` handshake has none
//! (it answers with [`MissingEventId`](crate::VerifyError::MissingEventId)), and interactive
//! payloads are form-encoded, not JSON: this scheme is for Events API deliveries.

use std::time::SystemTime;

use http::{HeaderMap, HeaderName};

use crate::error::VerifyError;
use crate::keyed::{Keyed, require_match};
use crate::util::{header, hex_decode, hex_encode, malformed, parse_unix_seconds};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("x-slack-signature");
/// The header carrying the signed timestamp.
pub const TIMESTAMP_HEADER: HeaderName = HeaderName::from_static("x-slack-request-timestamp");
/// Where the event id is in the body.
pub const EVENT_ID_POINTER: &str = "/event_id";

/// The `X-Slack-Signature` value Slack would send for `body` at `timestamp` (Unix seconds, also
/// sent as `X-Slack-Request-Timestamp`).
///
/// For tests and load generation.
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    sign_with(&Keyed::sha256(secret), timestamp, body)
}

pub(crate) fn sign_with(key: &Keyed, timestamp: u64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mac = key.over(&[b"v0:", ts.as_bytes(), b":", body]).finalize();
    format!("v0={}", hex_encode(&mac))
}

pub(crate) fn check(
    keys: &[Keyed],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<SystemTime, VerifyError> {
    let value = header(headers, &SIGNATURE_HEADER)?;
    let ts = header(headers, &TIMESTAMP_HEADER)?.trim();
    let hex = value
        .trim()
        .strip_prefix("v0=")
        .ok_or_else(|| malformed(&SIGNATURE_HEADER, "expected v0=<hex>"))?;
    let signature =
        hex_decode(hex).ok_or_else(|| malformed(&SIGNATURE_HEADER, "signature is not hex"))?;
    let signed_at = parse_unix_seconds(ts, &TIMESTAMP_HEADER)?;
    require_match(keys, &[b"v0:", ts.as_bytes(), b":", body], &[signature])?;
    Ok(signed_at)
}

/// The `challenge` of Slack's `url_verification` handshake body, which the receiver echoes; `None`
/// for any other body. Call it only on a delivery whose signature was checked.
pub fn challenge(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    (v.get("type")?.as_str()? == "url_verification")
        .then(|| v.get("challenge")?.as_str().map(str::to_owned))
        .flatten()
}
