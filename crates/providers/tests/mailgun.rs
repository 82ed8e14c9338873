//! Mailgun: the vectors its Python SDK accepts, the signature in the body, the tolerance, and the
//! token as the event id.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use idemgate_providers::{
    KeySource, MailgunScheme, Scheme, Secret, Verifier, VerifyError, mailgun,
};
use serde_json::{Value, json};

const KEY: &str = "key-7e55d003b4e2d4ea1e4b7da3c1d0d4f1";
const NOW: u64 = 1_770_920_772;
const HOURS_9: Duration = Duration::from_secs(9 * 3600);

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn verifier_with(secrets: &[&str], event_id: Option<KeySource>, tolerance: Duration) -> Verifier {
    Verifier::new(
        Scheme::Mailgun(MailgunScheme { event_id }),
        secrets.iter().map(|s| Secret::from(*s)).collect(),
        tolerance,
    )
    .unwrap()
}

fn verifier(secrets: &[&str]) -> Verifier {
    verifier_with(secrets, None, Verifier::DEFAULT_TOLERANCE)
}

fn verify(
    v: &Verifier,
    body: &[u8],
    now: u64,
) -> Result<idemgate_providers::Verified, VerifyError> {
    v.verify(&HeaderMap::new(), body, at(now))
}

fn event(token: &str) -> Value {
    json!({"event-data": {"id": "CPgfbmQMTCKtHW6uIWtuVe", "event": "delivered"}, "token-hint": token})
}

#[test]
fn the_vectors_the_sdk_accepts_verify_and_the_others_do_not() {
    let doc: Value = serde_json::from_str(include_str!("fixtures/mailgun/vectors.json")).unwrap();
    let vectors = doc["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 5);
    for vector in vectors {
        let name = vector["name"].as_str().unwrap();
        let v = verifier(&[vector["signing_key"].as_str().unwrap()]);
        let body = vector["body"].as_str().unwrap().as_bytes();
        let ts = vector["timestamp"].as_u64().unwrap();
        let result = verify(&v, body, ts);
        if vector["valid"].as_bool().unwrap() {
            let ok = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                ok.event_id.as_str(),
                vector["token"].as_str().unwrap(),
                "{name}"
            );
            assert_eq!(ok.signed_at, Some(at(ts)), "{name}");
            let signature: Value =
                serde_json::from_slice::<Value>(body).unwrap()["signature"].clone();
            assert_eq!(
                mailgun::sign(KEY.as_bytes(), ts, vector["token"].as_str().unwrap()),
                signature["signature"].as_str().unwrap()
            );
        } else {
            let err = result.unwrap_err();
            assert!(matches!(err, VerifyError::BadSignature), "{name}: {err:?}");
        }
    }
}

#[test]
fn signing_writes_the_block_into_the_body_and_the_token_is_the_event_id() {
    let v = verifier(&[KEY, "key-previous"]);
    let token = "t".repeat(50);
    let body = serde_json::to_vec(&event(&token)).unwrap();
    // The headers alone cannot carry it.
    assert_eq!(
        v.sign(&token, at(NOW), &body).unwrap_err().to_string(),
        "the mailgun scheme writes its signature into the body: use Verifier::sign_request"
    );
    let signed = v.sign_request(&token, at(NOW), &body, None).unwrap();
    assert!(signed.headers.is_empty() && signed.query.is_none());
    let doc: Value = serde_json::from_slice(&signed.body).unwrap();
    assert_eq!(doc["signature"]["token"], json!(token));
    assert_eq!(doc["signature"]["timestamp"], json!(NOW.to_string()));
    assert_eq!(doc["event-data"]["id"], "CPgfbmQMTCKtHW6uIWtuVe");
    let ok = verify(&v, &signed.body, NOW).unwrap();
    assert_eq!(
        (ok.event_id.as_str(), ok.signed_at),
        (token.as_str(), Some(at(NOW)))
    );

    // Rotation, and a subaccount's parent-signature: either key may match either field.
    let old = verifier(&["key-previous"])
        .sign_request(&token, at(NOW), &body, None)
        .unwrap();
    assert!(verify(&v, &old.body, NOW).is_ok());
    let mut parent: Value = serde_json::from_slice(&old.body).unwrap();
    parent["signature"]["parent-signature"] = parent["signature"]["signature"].clone();
    parent["signature"]["signature"] = json!("00".repeat(32));
    assert!(verify(&v, &serde_json::to_vec(&parent).unwrap(), NOW).is_ok());

    // A wrong key.
    let wrong = verifier(&["key-wrong"])
        .sign_request(&token, at(NOW), &body, None)
        .unwrap();
    assert_eq!(
        verify(&v, &wrong.body, NOW).unwrap_err().kind(),
        "bad_signature"
    );

    // A body that is not an object cannot carry it.
    let err = v.sign_request(&token, at(NOW), b"[1]", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "mailgun: the body must be a JSON object to carry the signature"
    );
}

#[test]
fn event_data_is_not_signed_so_the_token_must_stay_the_key() {
    // What the scheme cannot do: the event data is outside the signature. The token (the event
    // id, hence the claim) is what a replay with other event data keeps, so the store sees the
    // same key with another fingerprint: a conflict, not a new event.
    let v = verifier(&[KEY]);
    let token = "r".repeat(50);
    let signed = v
        .sign_request(
            &token,
            at(NOW),
            &serde_json::to_vec(&event(&token)).unwrap(),
            None,
        )
        .unwrap();
    let mut doc: Value = serde_json::from_slice(&signed.body).unwrap();
    doc["event-data"]["event"] = json!("failed");
    let forged = serde_json::to_vec(&doc).unwrap();
    assert_eq!(verify(&v, &forged, NOW).unwrap().event_id.as_str(), token);
    assert!(!v.scheme().signs_body());
}

#[test]
fn the_tolerance_applies_to_the_signed_timestamp() {
    let v = verifier(&[KEY]);
    let signed = v.sign_request("tok-1", at(NOW), b"{}", None).unwrap();
    let late = NOW + Verifier::DEFAULT_TOLERANCE.as_secs() + 1;
    assert_eq!(
        verify(&v, &signed.body, late).unwrap_err().kind(),
        "stale_timestamp"
    );
    let early = NOW - Verifier::DEFAULT_TOLERANCE.as_secs() - 1;
    assert_eq!(
        verify(&v, &signed.body, early).unwrap_err().kind(),
        "future_timestamp"
    );
    // A retry resends the first attempt's block hours later: a tolerance that covers Mailgun's
    // 8-hour retry window accepts it.
    let lenient = verifier_with(&[KEY], None, HOURS_9);
    assert!(verify(&lenient, &signed.body, NOW + 8 * 3600).is_ok());
    // Re-dating the timestamp breaks the signature.
    let mut doc: Value = serde_json::from_slice(&signed.body).unwrap();
    doc["signature"]["timestamp"] = json!((NOW + 60).to_string());
    assert_eq!(
        verify(&v, &serde_json::to_vec(&doc).unwrap(), NOW)
            .unwrap_err()
            .kind(),
        "bad_signature"
    );
}

#[test]
fn a_body_without_a_usable_block_is_refused_as_unauthenticated() {
    let v = verifier(&[KEY]);
    let sig = mailgun::sign(KEY.as_bytes(), NOW, "tok");
    for (body, why) in [
        (json!(null).to_string(), "no \"signature\" object"),
        ("not json".to_owned(), "not JSON"),
        (json!({"event-data": {}}).to_string(), "no \"signature\" object"),
        (
            json!({"signature": {"token": "tok", "signature": sig}}).to_string(),
            "signature.timestamp is missing",
        ),
        (
            json!({"signature": {"timestamp": "soon", "token": "tok", "signature": sig}}).to_string(),
            "not a Unix time",
        ),
        (
            json!({"signature": {"timestamp": NOW.to_string(), "signature": sig}}).to_string(),
            "signature.token is missing",
        ),
        (
            json!({"signature": {"timestamp": NOW.to_string(), "token": "tok", "signature": "xyz"}})
                .to_string(),
            "signature.signature is not hex",
        ),
        (
            json!({"signature": {"timestamp": NOW.to_string(), "token": "tok"}}).to_string(),
            "signature.signature is missing",
        ),
    ] {
        let err = verify(&v, body.as_bytes(), NOW).unwrap_err();
        assert_eq!((err.status(), err.kind()), (401, "malformed_body"), "{body}");
        assert!(err.to_string().contains(why), "{body}: {err}");
    }
    // A numeric timestamp is signed as its JSON text.
    let body = json!({"signature": {"timestamp": NOW, "token": "tok", "signature": sig}});
    assert!(verify(&v, body.to_string().as_bytes(), NOW).is_ok());
}

#[test]
fn the_event_id_may_be_the_event_data_id() {
    let v = verifier_with(
        &[KEY],
        Some(KeySource::JsonPointer("/event-data/id".into())),
        Verifier::DEFAULT_TOLERANCE,
    );
    let body = serde_json::to_vec(&event("")).unwrap();
    let signed = v.sign_request("ignored", at(NOW), &body, None).unwrap();
    let doc: Value = serde_json::from_slice(&signed.body).unwrap();
    assert_eq!(doc["signature"]["token"].as_str().unwrap().len(), 50);
    assert_eq!(
        verify(&v, &signed.body, NOW).unwrap().event_id.as_str(),
        "CPgfbmQMTCKtHW6uIWtuVe"
    );
}

/// Found by the `verify` fuzz target: a delivery signed with an empty token was refused as
/// unsigned (401) instead of as a bad event id (400).
#[test]
fn an_empty_token_is_signed_and_then_refused_as_an_event_id() {
    let v = verifier(&[KEY]);
    let signed = v.sign_request("", at(NOW), b"{}", None).unwrap();
    let err = verify(&v, &signed.body, NOW).unwrap_err();
    assert_eq!((err.status(), err.kind()), (400, "invalid_event_id"));
}
