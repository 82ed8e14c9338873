//! Postmark: basic auth credentials instead of a signature (RFC 7617 cases: Postmark's SDKs have
//! nothing to sign), and the event id built from each documented payload type.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};
use idemgate_providers::{KeySource, PostmarkScheme, Scheme, Secret, Verifier, postmark};
use serde_json::json;

const NOW: u64 = 1_700_000_000;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn verifier(secrets: &[&str]) -> Verifier {
    Verifier::new(
        Scheme::Postmark(PostmarkScheme::default()),
        secrets.iter().map(|s| Secret::from(*s)).collect(),
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap()
}

fn auth(value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(AUTHORIZATION, HeaderValue::from_str(value).unwrap());
    h
}

const INBOUND: &str =
    r#"{"From":"a@example.com","MessageID":"22c74902-a0c1-4511-804f-341342852c90","Subject":"Hi"}"#;

#[test]
fn credentials_are_checked_whole_and_either_of_two_may_match() {
    let v = verifier(&["postmark:current-pass", "postmark:previous-pass"]);
    let body = INBOUND.as_bytes();
    // RFC 7617's example encoding, and what Postmark sends for https://user:pass@host/.
    assert_eq!(
        postmark::authorization(b"Aladdin:open sesame"),
        "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
    );
    let signed = v.sign("ignored", at(NOW), body).unwrap();
    assert_eq!(signed[AUTHORIZATION], "Basic cG9zdG1hcms6Y3VycmVudC1wYXNz");
    let ok = v.verify(&signed, body, at(NOW)).unwrap();
    assert_eq!(
        (ok.event_id.as_str(), ok.signed_at),
        ("22c74902-a0c1-4511-804f-341342852c90", None)
    );
    // Rotation; the scheme word in any case; padding optional.
    for value in [
        "Basic cG9zdG1hcms6cHJldmlvdXMtcGFzcw==",
        "basic cG9zdG1hcms6Y3VycmVudC1wYXNz",
        "BASIC   cG9zdG1hcms6Y3VycmVudC1wYXNz",
    ] {
        assert!(v.verify(&auth(value), body, at(NOW)).is_ok(), "{value}");
    }
    // Nothing is signed: neither the body nor a time.
    assert!(!v.scheme().signs_body() && !v.scheme().signs_timestamp());
    assert!(
        v.verify(&signed, br#"{"MessageID":"other"}"#, at(NOW + 86_400))
            .is_ok()
    );

    // Wrong, partial or extended credentials.
    for wrong in [
        "postmark:wrong",
        "postmark:current-pas",
        "postmark:current-passs",
        "postmark",
        "Postmark:current-pass",
        "",
    ] {
        let value = postmark::authorization(wrong.as_bytes());
        let err = v.verify(&auth(&value), body, at(NOW)).unwrap_err();
        let expected = if wrong.is_empty() {
            "malformed_header"
        } else {
            "bad_credentials"
        };
        assert_eq!((err.status(), err.kind()), (401, expected), "{wrong:?}");
    }
    let err = v
        .verify(&auth("Basic cG9zdG1hcms6d3Jvbmc="), body, at(NOW))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the basic auth credentials match none configured"
    );

    // Missing and malformed headers.
    let err = v.verify(&HeaderMap::new(), body, at(NOW)).unwrap_err();
    assert_eq!(err.to_string(), "missing header authorization");
    for bad in [
        "Bearer cG9zdG1hcms6Y3VycmVudC1wYXNz",
        "Basic",
        "Basic !!!",
        "cG9zdG1hcms6",
    ] {
        let err = v.verify(&auth(bad), body, at(NOW)).unwrap_err();
        assert_eq!(err.kind(), "malformed_header", "{bad}");
    }
}

#[test]
fn secrets_must_be_user_and_password() {
    let err = Verifier::new(
        Scheme::from_name("postmark").unwrap(),
        vec![Secret::from("a:b"), Secret::from("no-colon")],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "secrets[1] (counting from 0) is not a postmark secret: must be user:password, the credentials written into the webhook URL"
    );
    let err = Verifier::new(
        Scheme::from_name("postmark").unwrap(),
        vec![],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the postmark scheme needs at least one secret"
    );
}

#[test]
fn the_event_id_follows_the_record_type() {
    let v = verifier(&["u:p"]);
    let headers = auth(&postmark::authorization(b"u:p"));
    let id = |body: serde_json::Value| {
        v.verify(&headers, body.to_string().as_bytes(), at(NOW))
            .map(|ok| ok.event_id.as_str().to_owned())
            .map_err(|e| (e.status(), e.kind(), e.to_string()))
    };
    let m = "883953f4-6105-42a2-a16a-77a8eac79483";
    assert_eq!(
        id(json!({"RecordType": "Bounce", "ID": 4323372036854775807_u64, "MessageID": m})).unwrap(),
        "Bounce:4323372036854775807"
    );
    assert_eq!(
        id(json!({"RecordType": "SpamComplaint", "ID": 42, "MessageID": m})).unwrap(),
        "SpamComplaint:42"
    );
    assert_eq!(
        id(json!({"RecordType": "Delivery", "MessageID": m, "Recipient": "john@example.com", "DeliveredAt": "2026-11-05T16:33:54Z"})).unwrap(),
        format!("Delivery:{m}:john@example.com")
    );
    assert_eq!(
        id(json!({"RecordType": "Open", "MessageID": m, "Recipient": "john@example.com", "ReceivedAt": "2026-11-05T16:33:54.9070259Z", "FirstOpen": true})).unwrap(),
        format!("Open:{m}:john@example.com:2026-11-05T16:33:54.9070259Z")
    );
    assert_eq!(
        id(json!({"RecordType": "Click", "MessageID": m, "Recipient": "john@example.com", "ReceivedAt": "2026-11-05T16:34:01Z"})).unwrap(),
        format!("Click:{m}:john@example.com:2026-11-05T16:34:01Z")
    );
    assert_eq!(
        id(json!({"RecordType": "SubscriptionChange", "MessageID": m, "Recipient": "john@example.com", "ChangedAt": "2026-11-05T16:35:00Z"})).unwrap(),
        format!("SubscriptionChange:{m}:john@example.com:2026-11-05T16:35:00Z")
    );
    assert_eq!(
        id(json!({"RecordType": "Inbound", "MessageID": m})).unwrap(),
        m
    );
    // A delivery without its recipient, an unknown record type, a body that is not JSON.
    let err = id(json!({"RecordType": "Delivery", "MessageID": m})).unwrap_err();
    assert_eq!(
        err,
        (
            400,
            "missing_event_id",
            "no event id in body Recipient".to_owned()
        )
    );
    let err = id(json!({"RecordType": "Transmogrified", "MessageID": m})).unwrap_err();
    assert_eq!((err.0, err.1), (400, "missing_event_id"));
    assert!(err.2.contains("\"Transmogrified\""), "{}", err.2);
    let err = v.verify(&headers, b"MessageID=1", at(NOW)).unwrap_err();
    assert_eq!((err.status(), err.kind()), (400, "invalid_json"));
}

#[test]
fn the_event_id_may_be_read_elsewhere() {
    let v = Verifier::new(
        Scheme::Postmark(PostmarkScheme {
            event_id: Some(KeySource::Header("X-Delivery-Id".into())),
        }),
        vec![Secret::from("u:p")],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap();
    let headers = v.sign("dlv-7", at(NOW), b"{}").unwrap();
    assert_eq!(headers["x-delivery-id"], "dlv-7");
    assert_eq!(
        v.verify(&headers, b"{}", at(NOW))
            .unwrap()
            .event_id
            .as_str(),
        "dlv-7"
    );
}
