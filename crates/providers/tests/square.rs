//! Square: the SDK's vectors, and the refusals every scheme must make.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use idemgate_providers::{Scheme, Secret, SquareScheme, Verifier, VerifyError, square};

const URL: &str = "https://example.com/webhooks/square";
const NOW: u64 = 1_700_000_000;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn verifier(url: &str, secrets: &[&str]) -> Verifier {
    Verifier::new(
        Scheme::Square(SquareScheme {
            signed_url: url.to_owned(),
        }),
        secrets.iter().map(|s| Secret::from(*s)).collect(),
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap()
}

fn signed(signature: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        square::SIGNATURE_HEADER,
        HeaderValue::from_str(signature).unwrap(),
    );
    h
}

struct Vector {
    name: String,
    signature_key: String,
    notification_url: String,
    body: String,
    signature: String,
    valid: bool,
}

fn vectors() -> Vec<Vector> {
    let doc: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/square/vectors.json")).unwrap();
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap().to_owned();
    doc["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| Vector {
            name: text(v, "name"),
            signature_key: text(v, "signature_key"),
            notification_url: text(v, "notification_url"),
            body: text(v, "body"),
            signature: text(v, "signature"),
            valid: v["valid"].as_bool().unwrap(),
        })
        .collect()
}

#[test]
fn the_sdk_vectors_verify_and_the_tampered_ones_do_not() {
    let vectors = vectors();
    assert!(vectors.iter().any(|v| v.valid) && vectors.iter().any(|v| !v.valid));
    for v in &vectors {
        let verifier = verifier(&v.notification_url, &[&v.signature_key]);
        let result = verifier.verify(&signed(&v.signature), v.body.as_bytes(), at(NOW));
        if v.valid {
            let ok = result.unwrap_or_else(|e| panic!("{}: {e}", v.name));
            let body: serde_json::Value = serde_json::from_str(&v.body).unwrap();
            assert_eq!(ok.event_id.as_str(), body["event_id"].as_str().unwrap());
            assert_eq!(ok.signed_at, None, "{}", v.name);
            // Our signer writes the same header.
            assert_eq!(
                square::sign(
                    v.signature_key.as_bytes(),
                    &v.notification_url,
                    v.body.as_bytes()
                ),
                v.signature
            );
        } else {
            let err = result.unwrap_err();
            assert!(
                matches!(err, VerifyError::BadSignature),
                "{}: {err:?}",
                v.name
            );
        }
    }
}

#[test]
fn refusals_rotation_and_the_event_id() {
    let v = verifier(URL, &["current-key", "previous-key"]);
    let body = br#"{"event_id":"ev-1","type":"payment.created"}"#;
    let good = v.sign("ignored", at(NOW), body).unwrap();
    assert_eq!(
        v.verify(&good, body, at(NOW)).unwrap().event_id.as_str(),
        "ev-1"
    );
    // No timestamp is signed: a day later it still verifies.
    assert!(v.verify(&good, body, at(NOW + 86_400)).is_ok());

    // Rotation: the previous key still verifies.
    let old = verifier(URL, &["previous-key"])
        .sign("", at(NOW), body)
        .unwrap();
    assert!(v.verify(&old, body, at(NOW)).is_ok());

    // Tampered body, wrong key, another URL.
    let kind = |h: &HeaderMap, b: &[u8]| v.verify(h, b, at(NOW)).unwrap_err().kind();
    assert_eq!(
        kind(&good, br#"{"event_id":"ev-2","type":"payment.created"}"#),
        "bad_signature"
    );
    let wrong = verifier(URL, &["wrong-key"])
        .sign("", at(NOW), body)
        .unwrap();
    assert_eq!(kind(&wrong, body), "bad_signature");
    let elsewhere = verifier("https://example.com/other", &["current-key"])
        .sign("", at(NOW), body)
        .unwrap();
    assert_eq!(kind(&elsewhere, body), "bad_signature");

    // Malformed and missing headers.
    assert_eq!(kind(&HeaderMap::new(), body), "missing_header");
    assert_eq!(kind(&signed("not base64!"), body), "malformed_header");
    let err = v.verify(&signed("not base64!"), body, at(NOW)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "malformed header x-square-hmacsha256-signature: signature is not base64"
    );

    // Signed, but no event id: 400.
    let no_id = br#"{"type":"payment.created"}"#;
    let h = v.sign("", at(NOW), no_id).unwrap();
    let err = v.verify(&h, no_id, at(NOW)).unwrap_err();
    assert_eq!((err.status(), err.kind()), (400, "missing_event_id"));
}

#[test]
fn a_source_needs_an_absolute_notification_url() {
    for (url, why) in [
        ("", "square: signed_url is required"),
        (
            "example.com/hook",
            "must be an absolute http:// or https:// URL",
        ),
        ("https:///hook", "has no host"),
        ("https://example.com/a b", "whitespace"),
    ] {
        let err = Verifier::new(
            Scheme::Square(SquareScheme {
                signed_url: url.to_owned(),
            }),
            vec![Secret::from("k")],
            Verifier::DEFAULT_TOLERANCE,
        )
        .unwrap_err();
        assert!(err.to_string().contains(why), "{url:?}: {err}");
    }
    // `from_name` gives the scheme without its URL, which a verifier refuses.
    let err = Verifier::new(
        Scheme::from_name("square").unwrap(),
        vec![Secret::from("k")],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "square: signed_url is required");
}
