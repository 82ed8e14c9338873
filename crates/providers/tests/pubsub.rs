//! Pub/Sub push authentication: tokens signed RS256 and checked by google-auth-library
//! (`fixtures/pubsub`), verified against the JWKS given as a document or passed in for a URL;
//! each claim's refusal; the event id.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use idemgate_providers::pubsub::{self, Jwks, Pubsub};
use idemgate_providers::{Delivery, DocumentKind, Scheme, Secret, Verifier, VerifyError};
use serde_json::{Value, json};

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/pubsub/vectors.json")).unwrap()
}

const KEY: &str = include_str!("fixtures/pubsub/signing-key.pem");

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn config(f: &Value, jwks: Jwks) -> Pubsub {
    Pubsub {
        audience: f["audience"].as_str().unwrap().to_owned(),
        issuers: Vec::new(),
        email: Some(f["email"].as_str().unwrap().to_owned()),
        jwks,
    }
}

fn verifier(config: Pubsub) -> Verifier {
    Verifier::new(Scheme::Pubsub(config), vec![], Verifier::DEFAULT_TOLERANCE).unwrap()
}

fn bearer(value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_str(value).unwrap(),
    );
    h
}

#[test]
fn the_sdks_verdicts_hold_with_a_jwks_document() {
    let f = fixture();
    let v = verifier(config(
        &f,
        Jwks::Document(f["jwks"].to_string().into_bytes()),
    ));
    let now = at(f["now"].as_u64().unwrap());
    let body = f["body"].as_str().unwrap().as_bytes();
    for vector in f["vectors"].as_array().unwrap() {
        let name = vector["name"].as_str().unwrap();
        let got = v.verify(
            &bearer(vector["authorization"].as_str().unwrap()),
            body,
            now,
        );
        match vector["refused"].as_str() {
            None => {
                let ok = got.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(ok.event_id.as_str(), f["event_id"].as_str().unwrap());
            }
            Some("signature") => assert!(
                matches!(got, Err(VerifyError::BadSignature)),
                "{name}: {got:?}"
            ),
            Some("kid") => assert!(
                matches!(got, Err(VerifyError::UnknownKey { .. })),
                "{name}: {got:?}"
            ),
            Some(claim) => match got {
                Err(VerifyError::Claim { claim: c, .. }) => assert_eq!(c, claim, "{name}"),
                other => panic!("{name}: {other:?}"),
            },
        }
    }
}

#[test]
fn a_jwks_url_is_named_and_the_document_passed_in_is_used() {
    let f = fixture();
    let url = "https://keys.example.com/certs";
    let v = verifier(config(&f, Jwks::Url(url.to_owned())));
    let h = bearer(f["vectors"][0]["authorization"].as_str().unwrap());
    let body = f["body"].as_str().unwrap().as_bytes();
    let now = at(f["now"].as_u64().unwrap());
    let delivery = Delivery::new(&h, body);
    let needed = v.needs(&delivery).unwrap().unwrap();
    assert_eq!(
        (needed.url.as_str(), needed.kind),
        (url, DocumentKind::Jwks)
    );
    // Without the document: 503, the caller's to fetch.
    let e = v.verify_delivery(&delivery, now).unwrap_err();
    assert_eq!((e.status(), e.kind()), (503, "document_unavailable"));
    let jwks = f["jwks"].to_string();
    assert!(
        v.verify_delivery(&delivery.with_document(url, jwks.as_bytes()), now)
            .is_ok()
    );
    // A document for another URL is not used; a broken one is a 502.
    let e = v
        .verify_delivery(
            &delivery.with_document("https://other.example.com/", jwks.as_bytes()),
            now,
        )
        .unwrap_err();
    assert_eq!(e.status(), 503);
    let e = v
        .verify_delivery(&delivery.with_document(url, b"<html>"), now)
        .unwrap_err();
    assert_eq!((e.status(), e.kind()), (502, "bad_document"));
    // A JWKS given by document needs nothing.
    let doc = verifier(config(&f, Jwks::Document(jwks.into_bytes())));
    assert_eq!(doc.needs(&delivery).unwrap(), None);
}

#[test]
fn tokens_signed_here_are_checked_claim_by_claim() {
    let f = fixture();
    let jwks = pubsub::jwks_of(KEY.as_bytes(), "k1").unwrap();
    let v = verifier(config(&f, Jwks::Document(jwks.into_bytes())));
    let now = 1_800_000_000;
    let body = f["body"].as_str().unwrap().as_bytes();
    let good = json!({
        "aud": f["audience"], "iss": "accounts.google.com", "email": f["email"],
        "email_verified": true, "iat": now, "exp": now + 3600,
    });
    let check = |claims: &Value, at_s: u64| {
        let token = pubsub::sign_token(KEY.as_bytes(), "k1", claims).unwrap();
        v.verify(&bearer(&format!("Bearer {token}")), body, at(at_s))
    };
    let ok = check(&good, now).unwrap();
    assert_eq!(ok.signed_at, Some(at(now)));
    // Within the tolerance of exp and iat; beyond it refused.
    assert!(check(&good, now + 3600 + 300).is_ok());
    assert!(check(&good, now - 300).is_ok());
    for (change, at_s, claim) in [
        (json!({"exp": now + 3600}), now + 3901, "exp"),
        (json!({}), now - 301, "iat"),
        (json!({"exp": now + 2 * 86_400}), now, "exp"),
        (json!({"aud": ["https://other.example.com/"]}), now, "aud"),
        (json!({"iss": null}), now, "iss"),
        (json!({"email": "other@example.com"}), now, "email"),
        (json!({"email_verified": false}), now, "email_verified"),
        (json!({"iat": "yesterday"}), now, "iat"),
    ] {
        let mut claims = good.clone();
        for (k, val) in change.as_object().unwrap() {
            claims[k] = val.clone();
        }
        match check(&claims, at_s) {
            Err(VerifyError::Claim { claim: c, .. }) => assert_eq!(c, claim, "{change}"),
            other => panic!("{change}: {other:?}"),
        }
    }
    // An audience list holding ours is accepted.
    let mut list = good.clone();
    list["aud"] = json!(["https://other.example.com/", f["audience"]]);
    assert!(check(&list, now).is_ok());
}

#[test]
fn bad_headers_and_settings_are_refused_clearly() {
    let f = fixture();
    let v = verifier(config(
        &f,
        Jwks::Document(f["jwks"].to_string().into_bytes()),
    ));
    let body = f["body"].as_str().unwrap().as_bytes();
    let now = at(f["now"].as_u64().unwrap());
    assert!(matches!(
        v.verify(&HeaderMap::new(), body, now),
        Err(VerifyError::MissingHeader { .. })
    ));
    for bad in [
        "Basic dXNlcjpwYXNz",
        "Bearer a.b",
        "Bearer !!.!!.!!",
        "Bearer e30.e30.e30",
    ] {
        let e = v.verify(&bearer(bad), body, now).unwrap_err();
        assert_eq!(e.kind(), "malformed_header", "{bad}: {e}");
    }
    // Good token, body without a messageId: 400.
    let h = bearer(f["vectors"][0]["authorization"].as_str().unwrap());
    let e = v.verify(&h, br#"{"message":{}}"#, now).unwrap_err();
    assert_eq!((e.status(), e.kind()), (400, "missing_event_id"));
    // Settings.
    let mut no_audience = config(&f, Jwks::Url(pubsub::GOOGLE_JWKS_URL.to_owned()));
    no_audience.audience.clear();
    let e = Verifier::new(
        Scheme::Pubsub(no_audience),
        vec![],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("audience"), "{e}");
    let e = Verifier::new(
        Scheme::Pubsub(config(&f, Jwks::Url("http://keys.example.com/".into()))),
        vec![],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("https"), "{e}");
    let e = Verifier::new(
        Scheme::Pubsub(config(&f, Jwks::Document(b"{\"keys\":[]}".to_vec()))),
        vec![],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("jwks"), "{e}");
    let e = Verifier::new(
        Scheme::Pubsub(config(
            &f,
            Jwks::Document(f["jwks"].to_string().into_bytes()),
        )),
        vec![Secret::from("s")],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("takes no secrets"), "{e}");
    // And it cannot sign a delivery itself.
    assert!(
        v.sign("x", now, body)
            .unwrap_err()
            .to_string()
            .contains("sign_token")
    );
}
