//! Standard Webhooks' asymmetric signatures (`v1a`, ed25519): vectors made with Node's crypto
//! beside the official library's `v1` (`fixtures/standard-webhooks`), public keys beside HMAC
//! secrets, rotation, signing with `whsk_`, and keys that cannot work.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use idemgate_providers::{
    Scheme, Secret, SignError, Verifier, VerifyError, standard_webhooks, svix,
};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/standard-webhooks/vectors.json")).unwrap()
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn verifier(scheme: Scheme, secrets: &[&str]) -> Verifier {
    let secrets = secrets.iter().map(|k| Secret::from(*k)).collect();
    Verifier::new(scheme, secrets, Verifier::DEFAULT_TOLERANCE).unwrap()
}

fn headers(prefix: &str, id: &str, ts: u64, signature: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in [
        ("id", id.to_owned()),
        ("timestamp", ts.to_string()),
        ("signature", signature.to_owned()),
    ] {
        h.insert(
            http::HeaderName::from_bytes(format!("{prefix}-{name}").as_bytes()).unwrap(),
            HeaderValue::from_str(&value).unwrap(),
        );
    }
    h
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key}"))
}

#[test]
fn the_vectors_verify_with_public_keys_and_tampered_ones_do_not() {
    let f = fixture();
    let (current, previous) = (text(&f["keys"], "current"), text(&f["keys"], "previous"));
    // Public keys only, both active (rotation); and the same beside the library's HMAC secret.
    let public = verifier(Scheme::StandardWebhooks, &[current, previous]);
    let mixed = verifier(
        Scheme::StandardWebhooks,
        &[text(&f, "whsec"), current, previous],
    );
    let mut counts = (0, 0);
    for v in f["vectors"].as_array().unwrap() {
        let name = text(v, "name");
        let ts = v["timestamp"].as_u64().unwrap();
        let h = headers("webhook", text(v, "id"), ts, text(v, "signature"));
        let body = text(v, "body").as_bytes();
        for (who, verifier) in [("public", &public), ("mixed", &mixed)] {
            let got = verifier.verify(&h, body, at(ts));
            if v["valid"].as_bool().unwrap() {
                let ok = got.unwrap_or_else(|e| panic!("{name} ({who}): {e}"));
                assert_eq!(ok.event_id.as_str(), text(v, "id"));
            } else {
                assert!(
                    matches!(got, Err(VerifyError::BadSignature)),
                    "{name} ({who}): {got:?}"
                );
            }
        }
        if v["valid"].as_bool().unwrap() {
            counts.0 += 1
        } else {
            counts.1 += 1
        }
    }
    assert_eq!(counts, (9, 15));
    // The HMAC secret alone verifies the library's v1 entry but none of the v1a-only vectors.
    let hmac = verifier(Scheme::StandardWebhooks, &[text(&f, "whsec")]);
    for v in f["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["valid"] == true)
    {
        let ts = v["timestamp"].as_u64().unwrap();
        let got = hmac.verify(
            &headers("webhook", text(v, "id"), ts, text(v, "signature")),
            text(v, "body").as_bytes(),
            at(ts),
        );
        assert_eq!(got.is_ok(), v["hmac"] == true, "{}", text(v, "name"));
    }
}

#[test]
fn a_secret_key_signs_v1a_like_the_vectors_and_verifies_too() {
    let f = fixture();
    let v = &f["vectors"][0];
    let ts = v["timestamp"].as_u64().unwrap();
    let body = text(v, "body").as_bytes();
    // ed25519 is deterministic: the seed-and-public-key form and the seed alone both sign the same.
    for key in [text(&f, "signing_key"), text(&f, "signing_key_seed")] {
        let sig = standard_webhooks::sign_v1a(key.as_bytes(), text(v, "id"), ts, body).unwrap();
        assert_eq!(sig, text(v, "signature"));
        let signer = verifier(Scheme::StandardWebhooks, &[key]);
        let h = signer.sign(text(v, "id"), at(ts), body).unwrap();
        assert_eq!(h["webhook-signature"], text(v, "signature"));
        assert!(signer.verify(&h, body, at(ts)).is_ok());
    }
    // Svix headers, same keys.
    let svix = verifier(Scheme::Svix, &[text(&f, "signing_key")]);
    let h = svix.sign("msg_1", at(ts), body).unwrap();
    assert!(h["svix-signature"].to_str().unwrap().starts_with("v1a,"));
    assert!(
        verifier(Scheme::Svix, &[text(&f["keys"], "current")])
            .verify(&h, body, at(ts))
            .is_ok()
    );
    assert!(matches!(
        verifier(Scheme::Svix, &[text(&f["keys"], "previous")]).verify(&h, body, at(ts)),
        Err(VerifyError::BadSignature)
    ));
    assert!(
        svix::sign(text(&f, "signing_key").as_bytes(), "m", ts, body).is_err(),
        "v1 needs whsec_"
    );
}

#[test]
fn a_public_key_first_cannot_sign_and_a_whsec_first_signs_v1() {
    let f = fixture();
    let e = verifier(
        Scheme::StandardWebhooks,
        &[text(&f["keys"], "current"), text(&f, "whsec")],
    )
    .sign("m", at(1), b"{}")
    .unwrap_err();
    assert!(matches!(e, SignError::CannotSign { .. }), "{e}");
    assert!(e.to_string().contains("whsk_"), "{e}");
    let h = verifier(
        Scheme::StandardWebhooks,
        &[text(&f, "whsec"), text(&f["keys"], "current")],
    )
    .sign("m", at(1), b"{}")
    .unwrap();
    assert!(h["webhook-signature"].to_str().unwrap().starts_with("v1,"));
}

#[test]
fn v1a_is_held_to_the_tolerance_and_to_its_headers() {
    let f = fixture();
    let v = verifier(Scheme::StandardWebhooks, &[text(&f["keys"], "current")]);
    let signer = verifier(Scheme::StandardWebhooks, &[text(&f, "signing_key")]);
    let h = signer.sign("msg_1", at(1_000_000), b"{}").unwrap();
    assert!(v.verify(&h, b"{}", at(1_000_300)).is_ok());
    assert!(matches!(
        v.verify(&h, b"{}", at(1_000_301)),
        Err(VerifyError::StaleTimestamp { .. })
    ));
    assert!(matches!(
        v.verify(&h, b"{}", at(999_699)),
        Err(VerifyError::FutureTimestamp { .. })
    ));
    let mut no_id = h.clone();
    no_id.remove("webhook-id");
    assert!(matches!(
        v.verify(&no_id, b"{}", at(1_000_000)),
        Err(VerifyError::MissingHeader { .. })
    ));
    let mut garbled = h.clone();
    garbled.insert("webhook-signature", HeaderValue::from_static("v1a,!!!"));
    assert!(matches!(
        v.verify(&garbled, b"{}", at(1_000_000)),
        Err(VerifyError::BadSignature)
    ));
    garbled.insert("webhook-signature", HeaderValue::from_static("garbage"));
    assert_eq!(
        v.verify(&garbled, b"{}", at(1_000_000)).unwrap_err().kind(),
        "malformed_header"
    );
}

#[test]
fn keys_that_cannot_work_are_refused_naming_their_index() {
    let f = fixture();
    let current = text(&f["keys"], "current");
    for bad in [
        "whpk_",
        "whpk_!!!",
        "whpk_aGVsbG8=", // 5 bytes
        "whsk_aGVsbG8=", // 5 bytes
        "wh_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ] {
        let e = Verifier::new(
            Scheme::StandardWebhooks,
            vec![Secret::from(current), Secret::from(bad)],
            Verifier::DEFAULT_TOLERANCE,
        )
        .unwrap_err();
        assert!(e.to_string().contains("secrets[1]"), "{bad}: {e}");
    }
    // A 64-byte secret key whose public half is not its seed's.
    let sk = text(&f, "signing_key").strip_prefix("whsk_").unwrap();
    let mut bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, sk).unwrap();
    bytes[40] ^= 1;
    let bad = format!(
        "whsk_{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes)
    );
    let e = Verifier::new(
        Scheme::StandardWebhooks,
        vec![Secret::from(bad)],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("do not go together"), "{e}");
}
