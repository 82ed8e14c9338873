//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`.
//!
//! Each `v1` is the hex HMAC-SHA256 of `{t}.{body}`, keyed with the endpoint's signing secret
//! exactly as Stripe shows it (`whsec_...` is used as is, not decoded). Stripe sends several `v1`
//! entries while an endpoint has more than one active secret; any may match (as in stripe-node's
//! `constructEvent`). Entries of other schemes (`v0`) are ignored. The event id is the body's `id`
//! (`evt_...`).

use std::time::SystemTime;

use http::{HeaderMap, HeaderName};

use crate::error::VerifyError;
use crate::util::{
    Keyed, header, hex_decode, hex_encode, malformed, parse_unix_seconds, require_match,
};

/// The header carrying the timestamp and signatures.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("stripe-signature");
/// Where the event id is in the body.
pub const EVENT_ID_POINTER: &str = "/id";

/// The `Stripe-Signature` value Stripe would send for `body` at `timestamp` (Unix seconds).
///
/// For tests and load generation.
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    sign_with(&Keyed::sha256(secret), timestamp, body)
}

pub(crate) fn sign_with(key: &Keyed, timestamp: u64, body: &[u8]) -> String {
    let t = timestamp.to_string();
    let mac = key.over(&[t.as_bytes(), b".", body]).finalize();
    format!("t={t},v1={}", hex_encode(&mac))
}

pub(crate) fn check(
    keys: &[Keyed],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<SystemTime, VerifyError> {
    let value = header(headers, &SIGNATURE_HEADER)?;
    let mut t = None;
    let mut saw_v1 = false;
    let mut signatures = Vec::new();
    for item in value.split(',') {
        let Some((key, val)) = item.trim().split_once('=') else {
            continue;
        };
        match key {
            // The last `t` wins, as in stripe-node; it is signed, so it cannot be swapped.
            "t" => t = Some(val),
            "v1" => {
                saw_v1 = true;
                // Not hex: cannot match, like a string comparison that fails.
                signatures.extend(hex_decode(val));
            }
            _ => {}
        }
    }
    let t = t.ok_or_else(|| malformed(&SIGNATURE_HEADER, "no t= timestamp"))?;
    if !saw_v1 {
        return Err(malformed(&SIGNATURE_HEADER, "no v1= signature"));
    }
    let signed_at = parse_unix_seconds(t, &SIGNATURE_HEADER)?;
    require_match(keys, &[t.as_bytes(), b".", body], &signatures)?;
    Ok(signed_at)
}
