//! Mailgun: the signature travels **in the JSON body**, as
//! `{"signature": {"timestamp": "..", "token": "..", "signature": "<hex>"}, "event-data": {..}}`,
//! where `signature` is the hex HMAC-SHA256 of `timestamp` followed by `token`, keyed with the
//! domain's HTTP webhook signing key. A subaccount's events also carry `parent-signature`, the
//! same HMAC under the parent account's key: either may match any configured secret.
//!
//! The timestamp is signed, so the tolerance applies, but **a retry resends the first attempt's
//! signature block** (timestamp and token unchanged, hours later: Mailgun retries for 8 hours),
//! so a source's tolerance must cover the retry window; the gateway's default for Mailgun does.
//!
//! Only the timestamp and the token are signed: `event-data` is not. What keeps a captured
//! signature from carrying other event data is the token, which is the event id by default: each
//! webhook has its own (50 random characters) and keeps it on retry, so a second request with a
//! token already seen is a duplicate (or, with other event data, a conflict) and is not processed
//! again while the token is remembered. That is Mailgun's advice ("cache the token value locally
//! and not honor any subsequent request with the same token"), with the store as the cache.

use std::time::SystemTime;

use serde_json::Value;

use crate::error::{SignError, VerifyError};
use crate::keyed::{Keyed, require_match};
use crate::util::{hex_decode, hex_encode};

/// Where the token (the default event id) is in the body.
pub(crate) const TOKEN_POINTER: &str = "/signature/token";

/// The hex `signature` Mailgun would write for `timestamp` and `token`.
///
/// For tests and load generation.
pub fn sign(secret: &[u8], timestamp: u64, token: &str) -> String {
    sign_with(&Keyed::sha256(secret), &timestamp.to_string(), token)
}

pub(crate) fn sign_with(key: &Keyed, timestamp: &str, token: &str) -> String {
    hex_encode(
        &key.over(&[timestamp.as_bytes(), token.as_bytes()])
            .finalize(),
    )
}

/// `body` (a JSON object, or empty for `{}`) with a `signature` block for `timestamp` and
/// `token`, signed with `key`.
pub(crate) fn signed_body(
    key: &Keyed,
    timestamp: u64,
    token: &str,
    body: &[u8],
) -> Result<Vec<u8>, SignError> {
    let refuse = |why| SignError::Body {
        scheme: "mailgun",
        why,
    };
    let mut doc: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice(body)
            .map_err(|_| refuse("the body must be a JSON object to carry the signature"))?
    };
    let Some(map) = doc.as_object_mut() else {
        return Err(refuse(
            "the body must be a JSON object to carry the signature",
        ));
    };
    let ts = timestamp.to_string();
    let signature = sign_with(key, &ts, token);
    map.insert(
        "signature".to_owned(),
        serde_json::json!({ "timestamp": ts, "token": token, "signature": signature }),
    );
    serde_json::to_vec(&doc).map_err(|_| refuse("the body could not be written"))
}

/// Checks the body's signature block; returns its signed timestamp.
pub(crate) fn check(keys: &[Keyed], body: &[u8]) -> Result<SystemTime, VerifyError> {
    let bad = |why| VerifyError::MalformedBody { why };
    let doc: Value = serde_json::from_slice(body)
        .map_err(|_| bad("not JSON, so it carries no Mailgun signature"))?;
    let block = doc
        .get("signature")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no \"signature\" object"))?;
    let timestamp = match block.get("timestamp") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(bad("signature.timestamp is missing")),
    };
    let signed_at = crate::util::parse_unix_seconds(
        &timestamp,
        &http::HeaderName::from_static("signature.timestamp"),
    )
    .map_err(|_| bad("signature.timestamp is not a Unix time in whole seconds"))?;
    // An empty token is signed like any other, then refused as an event id (400).
    let token = block
        .get("token")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("signature.token is missing"))?;
    let mut signatures = Vec::new();
    for field in ["signature", "parent-signature"] {
        match block.get(field) {
            None => {}
            Some(Value::String(hex)) => signatures
                .push(hex_decode(hex).ok_or_else(|| bad("signature.signature is not hex"))?),
            Some(_) => return Err(bad("signature.signature is not a string")),
        }
    }
    if !block.contains_key("signature") {
        return Err(bad("signature.signature is missing"));
    }
    require_match(keys, &[timestamp.as_bytes(), token.as_bytes()], &signatures)?;
    Ok(signed_at)
}
