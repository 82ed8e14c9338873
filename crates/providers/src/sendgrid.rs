//! SendGrid's Event Webhook: `X-Twilio-Email-Event-Webhook-Signature` is the base64 of an ASN.1
//! DER ECDSA P-256/SHA-256 signature over `X-Twilio-Email-Event-Webhook-Timestamp` followed by the
//! raw body. The verification key is the base64 DER SubjectPublicKeyInfo SendGrid shows ("signed
//! event webhook" settings); several may be active during rotation.
//!
//! The body is a JSON array of events, each with its own `sg_event_id`: a delivery is a
//! **batch**, and each event is claimed on its own ([`Verified::batch`](crate::Verified::batch)).
//! The timestamp is signed, so the tolerance applies; SendGrid signs each attempt afresh.

use std::ops::Range;
use std::time::SystemTime;

use http::{HeaderMap, HeaderName};
use serde_json::value::RawValue;

use crate::asym::{PrivateKey, PublicKey};
use crate::error::{ConfigError, VerifyError};
use crate::util::{base64_decode, base64_encode, header, malformed, parse_unix_seconds};
use crate::verified::BatchEvent;
use crate::{EventId, KeyError, der};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: HeaderName =
    HeaderName::from_static("x-twilio-email-event-webhook-signature");
/// The header carrying the signed timestamp (Unix seconds).
pub const TIMESTAMP_HEADER: HeaderName =
    HeaderName::from_static("x-twilio-email-event-webhook-timestamp");
/// Where each event's id is, in each element of the array.
pub const EVENT_ID_FIELD: &str = "sg_event_id";

/// One configured key: a public key verifies; a private key (for tests and `idemgate send`)
/// verifies with its public half and signs.
#[derive(Debug)]
pub(crate) enum Key {
    Public(PublicKey),
    Private(Box<PrivateKey>, PublicKey),
}

impl Key {
    /// A key as configured: base64 DER (or PEM) of a SubjectPublicKeyInfo, or of a PKCS#8
    /// private key.
    pub(crate) fn parse(text: &[u8]) -> Result<Self, &'static str> {
        const FORM: &str = "expected the base64 DER public key SendGrid shows (or a PKCS#8 P-256 private key, for signing)";
        let text = std::str::from_utf8(text).map_err(|_| FORM)?;
        let der = der::base64_or_pem(text).ok_or(FORM)?;
        match PublicKey::p256_from_spki(&der) {
            Ok(public) => Ok(Self::Public(public)),
            Err(spki_why) => match PrivateKey::p256_from_pkcs8(&der) {
                Ok(private) => {
                    let public = private.public();
                    Ok(Self::Private(Box::new(private), public))
                }
                // Say why the public key did not do, unless it is not an SPKI at all.
                Err(pkcs8_why) if spki_why.starts_with("not a") => Err(pkcs8_why),
                Err(_) => Err(spki_why),
            },
        }
    }
}

/// The signature header's value for `body` at `timestamp`, signed with a PKCS#8 P-256 private key
/// (base64 DER or PEM), as SendGrid signs.
///
/// For tests and load generation.
///
/// # Errors
/// [`ConfigError::Secret`] when the key is not a P-256 private key.
pub fn sign(private_key: &[u8], timestamp: u64, body: &[u8]) -> Result<String, ConfigError> {
    let refuse = |why| ConfigError::Secret {
        index: 0,
        scheme: "sendgrid",
        why,
    };
    match Key::parse(private_key).map_err(refuse)? {
        Key::Private(key, _) => Ok(sign_with(&key, timestamp, body)),
        Key::Public(_) => Err(refuse("a public key cannot sign")),
    }
}

pub(crate) fn sign_with(key: &PrivateKey, timestamp: u64, body: &[u8]) -> String {
    base64_encode(&key.sign(&[timestamp.to_string().as_bytes(), body]))
}

pub(crate) fn check(
    keys: &[PublicKey],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<SystemTime, VerifyError> {
    let ts = header(headers, &TIMESTAMP_HEADER)?;
    let signature = header(headers, &SIGNATURE_HEADER)?;
    let signature = base64_decode(signature.trim())
        .ok_or_else(|| malformed(&SIGNATURE_HEADER, "not base64"))?;
    let signed_at = parse_unix_seconds(ts, &TIMESTAMP_HEADER)?;
    if keys
        .iter()
        .any(|k| k.verifies(&[ts.as_bytes(), body], &signature))
    {
        Ok(signed_at)
    } else {
        Err(VerifyError::BadSignature)
    }
}

/// The events of a verified batch, in order: each one's bytes within `body` and its id, or why it
/// has none usable.
///
/// # Errors
/// [`VerifyError::InvalidJson`] when the body is not a JSON array;
/// [`VerifyError::MissingEventId`] when it is empty.
pub(crate) fn events(body: &[u8]) -> Result<Vec<BatchEvent>, VerifyError> {
    let items: Vec<&RawValue> = serde_json::from_slice(body).map_err(VerifyError::InvalidJson)?;
    if items.is_empty() {
        return Err(VerifyError::MissingEventId {
            location: "body: the array holds no events".to_owned(),
        });
    }
    let start = body.as_ptr().addr();
    Ok(items
        .iter()
        .enumerate()
        .map(|(index, raw)| {
            // `raw` borrows from `body`: its place in it is a difference of addresses.
            let from = raw.get().as_ptr().addr() - start;
            let span: Range<usize> = from..from + raw.get().len();
            BatchEvent {
                index,
                span,
                id: event_id(raw),
            }
        })
        .collect())
}

fn event_id(raw: &RawValue) -> Result<EventId, String> {
    let value: serde_json::Value =
        serde_json::from_str(raw.get()).map_err(|e| format!("not JSON: {e}"))?;
    let Some(object) = value.as_object() else {
        return Err("not a JSON object".to_owned());
    };
    match object.get(EVENT_ID_FIELD) {
        None | Some(serde_json::Value::Null) => Err(format!("no {EVENT_ID_FIELD}")),
        Some(serde_json::Value::String(id)) => EventId::new(id.as_str())
            .map_err(|e: KeyError| format!("{EVENT_ID_FIELD} refused: {e}")),
        Some(_) => Err(format!("{EVENT_ID_FIELD} is not a string")),
    }
}
