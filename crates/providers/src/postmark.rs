//! Postmark: **no signature**. Postmark authenticates itself with HTTP basic auth, the
//! credentials written into the webhook URL (`https://user:password@example.com/hook`). Each
//! secret is one `user:password` (several during a rotation); the whole credential of
//! `Authorization: Basic ..` is compared in constant time with each. Nothing is signed, so no
//! tolerance applies, and the body is not covered: keep the webhook URL on HTTPS, and narrow the
//! senders with the gateway's `allow_from` (Postmark publishes its webhook addresses).
//!
//! Postmark's payloads carry no delivery id, so the event id is built from the body, by its
//! `RecordType` (a retry resends the same body):
//!
//! | `RecordType` | event id |
//! |---|---|
//! | none, or `Inbound` (inbound email) | `MessageID` |
//! | `Bounce`, `SpamComplaint` | `{RecordType}:{ID}` |
//! | `Delivery` (one per recipient) | `Delivery:{MessageID}:{Recipient}` |
//! | `Open`, `Click` (one per open or click) | `{RecordType}:{MessageID}:{Recipient}:{ReceivedAt}` |
//! | `SubscriptionChange` | `SubscriptionChange:{MessageID}:{Recipient}:{ChangedAt}` |
//!
//! Any other `RecordType` is a 400 `missing_event_id` naming it; a source can read the id
//! elsewhere instead ([`PostmarkScheme::event_id`](crate::PostmarkScheme)).

use http::HeaderMap;
use http::header::AUTHORIZATION;
use idemgate_core::EventId;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::VerifyError;
use crate::util::{base64_decode, base64_encode, digests_equal, header, malformed};

/// The `Authorization` value Postmark sends for the credential `user:password`.
///
/// For tests and load generation.
pub fn authorization(credential: &[u8]) -> String {
    format!("Basic {}", base64_encode(credential))
}

/// One configured credential, kept as its SHA-256 so that every comparison takes the same time
/// whatever the lengths.
pub(crate) fn digest(credential: &[u8]) -> [u8; 32] {
    Sha256::digest(credential).into()
}

pub(crate) fn check(credentials: &[[u8; 32]], headers: &HeaderMap) -> Result<(), VerifyError> {
    let value = header(headers, &AUTHORIZATION)?.trim();
    let (scheme, encoded) = value
        .split_once(' ')
        .ok_or_else(|| malformed(&AUTHORIZATION, "expected Basic <base64 of user:password>"))?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(malformed(
            &AUTHORIZATION,
            "expected Basic <base64 of user:password>",
        ));
    }
    let presented = base64_decode(encoded.trim())
        .ok_or_else(|| malformed(&AUTHORIZATION, "credentials are not base64"))?;
    let presented = digest(&presented);
    // Every configured credential is compared, matched or not.
    let matched = credentials
        .iter()
        .fold(false, |any, c| digests_equal(c, &presented) | any);
    if matched {
        Ok(())
    } else {
        Err(VerifyError::BadCredentials)
    }
}

/// The event id of a Postmark payload, by its `RecordType` (see the module docs).
pub(crate) fn event_id(body: &[u8]) -> Result<EventId, VerifyError> {
    let doc: Value = serde_json::from_slice(body).map_err(VerifyError::InvalidJson)?;
    let field = |name: &str| -> Result<String, VerifyError> {
        match doc.get(name) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::Number(n)) => Ok(n.to_string()),
            _ => Err(VerifyError::MissingEventId {
                location: format!("body {name}"),
            }),
        }
    };
    let id = match doc.get("RecordType").and_then(Value::as_str) {
        None | Some("Inbound") => field("MessageID")?,
        Some(kind @ ("Bounce" | "SpamComplaint")) => format!("{kind}:{}", field("ID")?),
        Some(kind @ "Delivery") => {
            format!("{kind}:{}:{}", field("MessageID")?, field("Recipient")?)
        }
        Some(kind @ ("Open" | "Click")) => format!(
            "{kind}:{}:{}:{}",
            field("MessageID")?,
            field("Recipient")?,
            field("ReceivedAt")?
        ),
        Some(kind @ "SubscriptionChange") => format!(
            "{kind}:{}:{}:{}",
            field("MessageID")?,
            field("Recipient")?,
            field("ChangedAt")?
        ),
        Some(other) => {
            return Err(VerifyError::MissingEventId {
                location: format!(
                    "body: RecordType {other:?} has no built-in id (read it elsewhere with event_id_pointer)"
                ),
            });
        }
    };
    EventId::new(id).map_err(VerifyError::InvalidEventId)
}
