//! Twilio: the SDK's vectors (form and JSON bodies, ports, repeated keys), and the refusals every
//! scheme must make.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use idemgate_providers::{
    Delivery, KeySource, Scheme, Secret, TwilioScheme, Verifier, VerifyError, twilio,
};

const URL: &str = "https://mycompany.com/sms";
const NOW: u64 = 1_700_000_000;
const FORM: &str = "application/x-www-form-urlencoded";
const BODY: &[u8] = b"MessageSid=SM123&From=%2B14158141829&Body=Hi+there&MediaUrl=b&MediaUrl=a";

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn verifier_with(url: &str, secrets: &[&str], event_id: Option<KeySource>) -> Verifier {
    Verifier::new(
        Scheme::Twilio(TwilioScheme {
            signed_url: url.to_owned(),
            event_id,
        }),
        secrets.iter().map(|s| Secret::from(*s)).collect(),
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap()
}

fn verifier(secrets: &[&str]) -> Verifier {
    verifier_with(URL, secrets, None)
}

fn check(
    v: &Verifier,
    headers: &HeaderMap,
    body: &[u8],
    query: Option<&str>,
) -> Result<idemgate_providers::Verified, VerifyError> {
    v.verify_delivery(&Delivery::new(headers, body).with_query(query), at(NOW))
}

fn with_token(signature: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        twilio::SIGNATURE_HEADER,
        HeaderValue::from_str(signature).unwrap(),
    );
    h.insert(
        twilio::IDEMPOTENCY_TOKEN_HEADER,
        HeaderValue::from_static("idem-1"),
    );
    h
}

#[test]
fn the_sdk_vectors_verify_and_the_tampered_ones_do_not() {
    let doc: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/twilio/vectors.json")).unwrap();
    let vectors = doc["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 10);
    for vector in vectors {
        let text = |k: &str| vector[k].as_str().unwrap();
        let name = text("name");
        let v = verifier_with(text("signed_url"), &[text("auth_token")], None);
        let query = vector["query"].as_str();
        let result = check(
            &v,
            &with_token(text("signature")),
            text("body").as_bytes(),
            query,
        );
        if vector["valid"].as_bool().unwrap() {
            let ok = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(ok.event_id.as_str(), "idem-1", "{name}");
        } else {
            let err = result.unwrap_err();
            assert!(matches!(err, VerifyError::BadSignature), "{name}: {err:?}");
        }
    }
}

#[test]
fn the_signer_matches_the_sdk() {
    let doc: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/twilio/vectors.json")).unwrap();
    let vector = doc["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "sms form body")
        .unwrap();
    let url = format!(
        "{}?{}",
        vector["signed_url"].as_str().unwrap(),
        vector["query"].as_str().unwrap()
    );
    assert_eq!(
        twilio::sign_form(b"12345", &url, vector["body"].as_str().unwrap().as_bytes()),
        vector["signature"].as_str().unwrap()
    );
}

#[test]
fn form_and_json_deliveries_round_trip_and_tampering_is_refused() {
    let v = verifier(&["current-token", "previous-token"]);
    // A form body: no query needed.
    let form = v
        .sign_request("idem-form", at(NOW), BODY, Some(FORM))
        .unwrap();
    assert_eq!(form.query, None);
    let ok = check(&v, &form.headers, BODY, None).unwrap();
    assert_eq!((ok.event_id.as_str(), ok.signed_at), ("idem-form", None));
    // The parameters are signed, not their order or their encoding.
    let reordered = b"MediaUrl=a&Body=Hi%20there&MessageSid=SM123&MediaUrl=b&From=%2B14158141829";
    assert!(check(&v, &form.headers, reordered, None).is_ok());
    for tampered in [
        &b"MessageSid=SM124&From=%2B14158141829&Body=Hi+there&MediaUrl=b&MediaUrl=a"[..],
        b"MessageSid=SM123&From=%2B14158141829&Body=Hi+there&MediaUrl=b",
        b"MessageSid=SM123&From=%2B14158141829&Body=Hi+there&MediaUrl=b&MediaUrl=a&X=1",
    ] {
        let err = check(&v, &form.headers, tampered, None).unwrap_err();
        assert_eq!(err.kind(), "bad_signature");
    }
    // A query the request did not carry when signed.
    assert_eq!(
        check(&v, &form.headers, BODY, Some("x=1"))
            .unwrap_err()
            .kind(),
        "bad_signature"
    );

    // A JSON body: the hash goes into the query, which is signed.
    let body = br#"{"event":"status","sid":"SM123"}"#;
    let json = v
        .sign_request("idem-json", at(NOW), body, Some("application/json"))
        .unwrap();
    let query = json.query.clone().unwrap();
    assert!(query.starts_with("bodySHA256="), "{query}");
    assert!(check(&v, &json.headers, body, Some(&query)).is_ok());
    let err = check(
        &v,
        &json.headers,
        br#"{"event":"status","sid":"SM124"}"#,
        Some(&query),
    )
    .unwrap_err();
    assert!(matches!(err, VerifyError::BadSignature), "{err:?}");
    // Without the query, the body is read as a form and the signature does not match.
    assert_eq!(
        check(&v, &json.headers, body, None).unwrap_err().kind(),
        "bad_signature"
    );
    // A hash swapped for the tampered body's breaks the signature over the URL.
    let swapped = twilio::body_sha256_param(b"{}");
    assert_eq!(
        check(&v, &json.headers, b"{}", Some(&swapped))
            .unwrap_err()
            .kind(),
        "bad_signature"
    );

    // Rotation: the previous token still verifies; a wrong one does not.
    let old = verifier(&["previous-token"])
        .sign_request("idem-form", at(NOW), BODY, Some(FORM))
        .unwrap();
    assert!(check(&v, &old.headers, BODY, None).is_ok());
    let wrong = verifier(&["wrong-token"])
        .sign("idem-form", at(NOW), BODY)
        .unwrap();
    assert_eq!(
        check(&v, &wrong, BODY, None).unwrap_err().kind(),
        "bad_signature"
    );
}

#[test]
fn bad_headers_and_missing_event_ids() {
    let v = verifier(&["token"]);
    let good = v.sign("idem-1", at(NOW), BODY).unwrap();
    let mut missing = good.clone();
    missing.remove(twilio::SIGNATURE_HEADER);
    let err = check(&v, &missing, BODY, None).unwrap_err();
    assert_eq!(err.to_string(), "missing header x-twilio-signature");
    let mut garbled = good.clone();
    garbled.insert(twilio::SIGNATURE_HEADER, HeaderValue::from_static("%%%"));
    assert_eq!(
        check(&v, &garbled, BODY, None).unwrap_err().kind(),
        "malformed_header"
    );
    let mut binary = good.clone();
    binary.insert(
        twilio::SIGNATURE_HEADER,
        HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
    );
    assert_eq!(
        check(&v, &binary, BODY, None).unwrap_err().kind(),
        "malformed_header"
    );

    // Signed, but without Twilio's idempotency token: 400 naming the header.
    let mut no_token = good.clone();
    no_token.remove(twilio::IDEMPOTENCY_TOKEN_HEADER);
    let err = check(&v, &no_token, BODY, None).unwrap_err();
    assert_eq!(err.status(), 400);
    assert_eq!(
        err.to_string(),
        "no event id in header i-twilio-idempotency-token"
    );
}

#[test]
fn the_event_id_may_come_from_a_form_field() {
    let v = verifier_with(
        URL,
        &["token"],
        Some(KeySource::FormField("MessageSid".into())),
    );
    let h = v.sign("ignored", at(NOW), BODY).unwrap();
    assert!(!h.contains_key(twilio::IDEMPOTENCY_TOKEN_HEADER));
    assert_eq!(
        check(&v, &h, BODY, None).unwrap().event_id.as_str(),
        "SM123"
    );
    let without = b"From=%2B14158141829";
    let h = v.sign("ignored", at(NOW), without).unwrap();
    let err = check(&v, &h, without, None).unwrap_err();
    assert_eq!(err.to_string(), "no event id in form parameter MessageSid");
}

#[test]
fn ports_are_tried_with_and_without_the_default() {
    // Configured with the default port written out, signed by Twilio without it, and back.
    let body = b"A=1";
    for (configured, signed_as) in [
        ("https://mycompany.com:443/sms", "https://mycompany.com/sms"),
        ("https://mycompany.com/sms", "https://mycompany.com:443/sms"),
        ("HTTPS://MyCompany.com/sms", "https://mycompany.com/sms"),
        ("http://mycompany.com", "http://mycompany.com:80/"),
    ] {
        let v = verifier_with(configured, &["token"], None);
        let h = with_token(&twilio::sign_form(b"token", signed_as, body));
        assert!(
            check(&v, &h, body, None).is_ok(),
            "{configured} / {signed_as}"
        );
    }
}

#[test]
fn a_source_needs_a_url_without_query_or_fragment() {
    for (url, why) in [
        ("", "twilio: signed_url is required"),
        ("https://mycompany.com/sms?x=1", "without its query string"),
        ("https://mycompany.com/sms#rc=2", "leave out the #fragment"),
        ("https://mycompany.com:44x/sms", "port that is not a number"),
        ("mycompany.com/sms", "absolute http:// or https://"),
    ] {
        let err = Verifier::new(
            Scheme::Twilio(TwilioScheme {
                signed_url: url.to_owned(),
                event_id: None,
            }),
            vec![Secret::from("t")],
            Verifier::DEFAULT_TOLERANCE,
        )
        .unwrap_err();
        assert!(err.to_string().contains(why), "{url:?}: {err}");
    }
}

/// Found by the `verify` fuzz target, and kept as Twilio's SDK has it: a form's distinct
/// parameters are signed, not its bytes, so a pair sent twice counts once and another encoding of
/// the same parameter verifies; a changed value never does.
#[test]
fn a_form_is_signed_by_its_distinct_parameters() {
    let v = verifier(&["token"]);
    let body = b"Body=Hi&Body=Hi&Sid=SM1";
    let h = v.sign("idem-1", at(NOW), body).unwrap();
    for same in [&b"Body=Hi&Sid=SM1"[..], b"Sid=SM1&Body=%48i&Body=Hi&&"] {
        assert!(
            check(&v, &h, same, None).is_ok(),
            "{}",
            String::from_utf8_lossy(same)
        );
    }
    let err = check(&v, &h, b"Body=Hi&Body=Ho&Sid=SM1", None).unwrap_err();
    assert!(matches!(err, VerifyError::BadSignature), "{err:?}");
}
