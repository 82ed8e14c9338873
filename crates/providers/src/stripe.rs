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
use crate::keyed::Keyed;
use crate::keyed::TaggedList;
use crate::util::hex_encode;

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

const LIST: TaggedList = TaggedList {
    header: SIGNATURE_HEADER,
    separator: ',',
    timestamp: "t",
    signature: "v1",
    joiner: b".",
    no_timestamp: "no t= timestamp",
    no_signature: "no v1= signature",
};

pub(crate) fn check(
    keys: &[Keyed],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<SystemTime, VerifyError> {
    LIST.check(keys, headers, body)
}
