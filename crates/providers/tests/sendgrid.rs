//! SendGrid's Event Webhook: vectors signed with P-256 keys and checked by SendGrid's SDK
//! (`fixtures/sendgrid`), then rotation, staleness, bad input and the batch's events.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use idemgate_providers::{Scheme, Secret, Verifier, VerifyError, sendgrid};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/sendgrid/vectors.json")).unwrap()
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn verifier(keys: &[&str]) -> Verifier {
    let secrets = keys.iter().map(|k| Secret::from(*k)).collect();
    Verifier::new(Scheme::Sendgrid, secrets, Verifier::DEFAULT_TOLERANCE).unwrap()
}

fn headers(timestamp: &str, signature: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        sendgrid::TIMESTAMP_HEADER,
        HeaderValue::from_str(timestamp).unwrap(),
    );
    h.insert(
        sendgrid::SIGNATURE_HEADER,
        HeaderValue::from_str(signature).unwrap(),
    );
    h
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key}"))
}

#[test]
fn the_sdks_vectors_verify_with_either_active_key_and_tampered_ones_do_not() {
    let f = fixture();
    let both = verifier(&[text(&f["keys"], "current"), text(&f["keys"], "previous")]);
    let mut seen = (0, 0);
    for v in f["vectors"].as_array().unwrap() {
        let ts = text(v, "timestamp");
        let now = at(ts.parse().unwrap());
        let got = both.verify(
            &headers(ts, text(v, "signature")),
            text(v, "body").as_bytes(),
            now,
        );
        if v["valid"].as_bool().unwrap() {
            let ok = got.unwrap_or_else(|e| panic!("{}: {e}", text(v, "name")));
            assert_eq!(ok.signed_at, Some(now));
            seen.0 += 1;
        } else {
            let e = got.expect_err(text(v, "name"));
            assert!(
                matches!(e, VerifyError::BadSignature),
                "{}: {e:?}",
                text(v, "name")
            );
            seen.1 += 1;
        }
    }
    assert_eq!(seen, (6, 9));
    // The previous key alone refuses what the current one signed.
    let previous = verifier(&[text(&f["keys"], "previous")]);
    let v = &f["vectors"][0];
    assert!(matches!(
        previous.verify(
            &headers(text(v, "timestamp"), text(v, "signature")),
            text(v, "body").as_bytes(),
            at(1_735_732_800)
        ),
        Err(VerifyError::BadSignature)
    ));
}

#[test]
fn each_event_of_a_batch_has_its_own_id_and_bytes() {
    let f = fixture();
    let v = &f["vectors"][0];
    let body = text(v, "body").as_bytes();
    let ok = verifier(&[text(&f["keys"], "current")])
        .verify(
            &headers(text(v, "timestamp"), text(v, "signature")),
            body,
            at(1_735_732_800),
        )
        .unwrap();
    let batch = ok.batch.expect("a batch");
    assert_eq!(ok.event_id.as_str(), "sg-evt-1");
    let ids: Vec<_> = batch
        .iter()
        .map(|e| e.id.clone().unwrap().as_str().to_owned())
        .collect();
    assert_eq!(ids, ["sg-evt-1", "sg-evt-2", "sg-evt-3"]);
    for (i, e) in batch.iter().enumerate() {
        assert_eq!(e.index, i);
        let event: Value = serde_json::from_slice(&body[e.span.clone()]).unwrap();
        assert_eq!(event["sg_event_id"], ids[i].as_str());
    }
    // Pretty-printed, non-ASCII: the span is the object's exact bytes.
    let v = &f["vectors"][5];
    let body = text(v, "body").as_bytes();
    let ok = verifier(&[text(&f["keys"], "current")])
        .verify(
            &headers(text(v, "timestamp"), text(v, "signature")),
            body,
            at(1_735_732_800),
        )
        .unwrap();
    let e = &ok.batch.unwrap()[0];
    assert!(body[e.span.clone()].starts_with(b"{\"email\": \"zo\xc3\xab"));
    assert!(body[e.span.clone()].ends_with(b"\"sg-\xc3\xa9vt-4\"}"));
}

#[test]
fn an_event_without_an_id_is_reported_beside_the_others() {
    let f = fixture();
    let v = &f["vectors"][10];
    assert_eq!(text(v, "name"), "one_missing_id (current key)");
    let ok = verifier(&[text(&f["keys"], "current")])
        .verify(
            &headers(text(v, "timestamp"), text(v, "signature")),
            text(v, "body").as_bytes(),
            at(1_735_732_800),
        )
        .unwrap();
    let batch = ok.batch.unwrap();
    assert_eq!(batch[0].id.as_ref().unwrap().as_str(), "sg-evt-5");
    assert_eq!(batch[1].id.as_ref().unwrap_err(), "no sg_event_id");
}

fn signed(key: &str, ts: u64, body: &[u8]) -> HeaderMap {
    headers(
        &ts.to_string(),
        &sendgrid::sign(key.as_bytes(), ts, body).unwrap(),
    )
}

#[test]
fn sign_round_trips_and_the_timestamp_is_held_to_the_tolerance() {
    let f = fixture();
    let private = text(&f, "signing_key");
    let v = verifier(&[text(&f["keys"], "current")]);
    let body = br#"[{"sg_event_id":"a"}]"#;
    let h = signed(private, 1_000_000, body);
    assert!(v.verify(&h, body, at(1_000_000 + 300)).is_ok());
    assert!(matches!(
        v.verify(&h, body, at(1_000_000 + 301)),
        Err(VerifyError::StaleTimestamp { .. })
    ));
    assert!(matches!(
        v.verify(&h, body, at(1_000_000 - 301)),
        Err(VerifyError::FutureTimestamp { .. })
    ));
    // Verifier::sign with the private key first, as `idemgate send` does.
    let signer = verifier(&[private]);
    let h = signer.sign("ignored", at(1_000_000), body).unwrap();
    assert_eq!(
        v.verify(&h, body, at(1_000_000)).unwrap().event_id.as_str(),
        "a"
    );
    // The public key verifies but cannot sign.
    let e = v.sign("x", at(1_000_000), body).unwrap_err();
    assert!(e.to_string().contains("PKCS#8"), "{e}");
}

#[test]
fn bad_input_is_refused_clearly() {
    let f = fixture();
    let v = verifier(&[text(&f["keys"], "current")]);
    let body = br#"[{"sg_event_id":"a"}]"#;
    let good = signed(text(&f, "signing_key"), 1_000_000, body);
    let now = at(1_000_000);
    for (name, remove) in [
        ("signature", sendgrid::SIGNATURE_HEADER),
        ("timestamp", sendgrid::TIMESTAMP_HEADER),
    ] {
        let mut h = good.clone();
        h.remove(&remove);
        let e = v.verify(&h, body, now).unwrap_err();
        assert!(
            matches!(e, VerifyError::MissingHeader { .. }),
            "{name}: {e:?}"
        );
    }
    let mut h = good.clone();
    h.insert(
        sendgrid::SIGNATURE_HEADER,
        HeaderValue::from_static("not base64!"),
    );
    assert_eq!(
        v.verify(&h, body, now).unwrap_err().kind(),
        "malformed_header"
    );
    let mut h = good.clone();
    h.insert(sendgrid::TIMESTAMP_HEADER, HeaderValue::from_static("soon"));
    assert_eq!(
        v.verify(&h, body, now).unwrap_err().kind(),
        "malformed_header"
    );
    // Signed, but not a batch: 400s after the signature.
    let key = text(&f, "signing_key");
    for (body, kind) in [
        (&b"{\"sg_event_id\":\"a\"}"[..], "invalid_json"),
        (b"[]", "missing_event_id"),
        (b"[{\"event\":\"open\"}]", "missing_event_id"),
    ] {
        let e = v
            .verify(&signed(key, 1_000_000, body), body, now)
            .unwrap_err();
        assert_eq!(
            (e.status(), e.kind()),
            (400, kind),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn keys_that_cannot_work_are_refused_naming_their_index() {
    let f = fixture();
    for bad in [
        "not base64!",
        "aGVsbG8=",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ] {
        let e = Verifier::new(
            Scheme::Sendgrid,
            vec![Secret::from(text(&f["keys"], "current")), Secret::from(bad)],
            Verifier::DEFAULT_TOLERANCE,
        )
        .unwrap_err();
        let shown = e.to_string();
        assert!(shown.contains("secrets[1]"), "{shown}");
        assert!(!shown.contains(bad), "{shown}");
    }
    assert!(Verifier::new(Scheme::Sendgrid, vec![], Verifier::DEFAULT_TOLERANCE).is_err());
}
