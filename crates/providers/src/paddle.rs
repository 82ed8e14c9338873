//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...]`, the hex HMAC-SHA256 of
//! `{ts}:{body}` keyed with the notification destination's secret key as shown (`pdl_ntfset_...`,
//! not decoded). Several `h1` entries may appear while a secret is rotated; any may match.
//!
//! Paddle's Node SDK allows only 5 seconds between `ts` and receipt; this crate applies the
//! verifier's tolerance (default 5 minutes) in both directions. The event id is the body's
//! `event_id` (one event may fan out to several `notification_id`s; the event is what is deduped).

use std::time::SystemTime;

use http::{HeaderMap, HeaderName};

use crate::error::VerifyError;
use crate::keyed::Keyed;
use crate::keyed::TaggedList;
use crate::util::hex_encode;

/// The header carrying the timestamp and signatures.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("paddle-signature");
/// Where the event id is in the body.
pub const EVENT_ID_POINTER: &str = "/event_id";

/// The `Paddle-Signature` value Paddle would send for `body` at `timestamp` (Unix seconds).
///
/// For tests and load generation.
pub fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    sign_with(&Keyed::sha256(secret), timestamp, body)
}

pub(crate) fn sign_with(key: &Keyed, timestamp: u64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mac = key.over(&[ts.as_bytes(), b":", body]).finalize();
    format!("ts={ts};h1={}", hex_encode(&mac))
}

const LIST: TaggedList = TaggedList {
    header: SIGNATURE_HEADER,
    separator: ';',
    timestamp: "ts",
    signature: "h1",
    joiner: b":",
    no_timestamp: "no ts= timestamp",
    no_signature: "no h1= signature",
};

pub(crate) fn check(
    keys: &[Keyed],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<SystemTime, VerifyError> {
    LIST.check(keys, headers, body)
}
