//! Known-good vectors, one or more per scheme.
//!
//! Published vectors (copied from the provider's documentation or reference libraries):
//! - Standard Webhooks / Svix: the reference libraries' test vector.
//! - GitHub: "Validating webhook deliveries", "Testing the webhook payload validation".
//! - Slack: "Verifying requests from Slack", the worked example.
//! - generic-hmac: RFC 4231 test case 2 (HMAC-SHA256, HMAC-SHA512) and RFC 2202 test case 2
//!   (HMAC-SHA1).
//!
//! Stripe, Shopify and Paddle publish no fixed vector: for those the expected signature is
//! computed here, independently of the crate, with the `hmac` crate from the documented recipe.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_providers::{
    Algorithm, Encoding, GenericHmac, KeySource, Scheme, Secret, Verifier, VerifyError, github,
    paddle, shopify, slack, standard_webhooks, stripe, svix,
};
use sha2::Sha256;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn verifier(scheme: Scheme, secrets: &[&str]) -> Verifier {
    let secrets = secrets.iter().map(|s| Secret::from(*s)).collect();
    Verifier::new(scheme, secrets, Verifier::DEFAULT_TOLERANCE).unwrap()
}

/// HMAC-SHA256 computed with the `hmac` crate directly, not through the crate under test.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// --- Standard Webhooks / Svix (published) -------------------------------------------------------

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const SW_TS: u64 = 1_614_265_330;
const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
const SW_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

#[test]
fn standard_webhooks_reference_vector() {
    assert_eq!(
        standard_webhooks::sign(SW_SECRET.as_bytes(), SW_ID, SW_TS, SW_BODY).unwrap(),
        SW_SIGNATURE
    );
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    let h = headers(&[
        ("webhook-id", SW_ID),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", SW_SIGNATURE),
    ]);
    let ok = v.verify(&h, SW_BODY, at(SW_TS)).unwrap();
    assert_eq!(ok.event_id.as_str(), SW_ID);
    assert_eq!(ok.signed_at, Some(at(SW_TS)));
}

#[test]
fn svix_reference_vector() {
    assert_eq!(
        svix::sign(SW_SECRET.as_bytes(), SW_ID, SW_TS, SW_BODY).unwrap(),
        SW_SIGNATURE
    );
    let v = verifier(Scheme::Svix, &[SW_SECRET]);
    let h = headers(&[
        ("svix-id", SW_ID),
        ("svix-timestamp", "1614265330"),
        ("svix-signature", SW_SIGNATURE),
    ]);
    assert_eq!(
        v.verify(&h, SW_BODY, at(SW_TS + 60))
            .unwrap()
            .event_id
            .as_str(),
        SW_ID
    );
}

#[test]
fn standard_webhooks_signature_list_skips_other_versions_and_bad_entries() {
    let v = verifier(Scheme::StandardWebhooks, &[SW_SECRET]);
    let list = format!(
        "v1a,c2lnbmVkIHdpdGggZWQyNTUxOQ== v1,not*base64 v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= {SW_SIGNATURE}"
    );
    let h = headers(&[
        ("webhook-id", SW_ID),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", &list),
    ]);
    assert!(v.verify(&h, SW_BODY, at(SW_TS)).is_ok());
    // The right bytes under a version other than v1 do not count.
    let v1a_only = SW_SIGNATURE.replace("v1,", "v1a,");
    let h = headers(&[
        ("webhook-id", SW_ID),
        ("webhook-timestamp", "1614265330"),
        ("webhook-signature", &v1a_only),
    ]);
    assert!(matches!(
        v.verify(&h, SW_BODY, at(SW_TS)),
        Err(VerifyError::BadSignature)
    ));
}

// --- GitHub (published) ---------------------------------------------------------------------------

#[test]
fn github_docs_vector() {
    let secret = "It's a Secret to Everybody";
    let body = b"Hello, World!";
    let expected = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    assert_eq!(github::sign(secret.as_bytes(), body), expected);
    let v = verifier(Scheme::Github, &[secret]);
    let h = headers(&[
        ("X-Hub-Signature-256", expected),
        ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ("X-GitHub-Hook-ID", "292430182"),
    ]);
    let ok = v.verify(&h, body, at(0)).unwrap();
    assert_eq!(
        ok.event_id.as_str(),
        "292430182:72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
    assert_eq!(ok.signed_at, None);
    // Upper-case hex is the same signature.
    let h = headers(&[
        (
            "X-Hub-Signature-256",
            &expected.to_uppercase().replace("SHA256=", "sha256="),
        ),
        ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
    ]);
    assert_eq!(
        v.verify(&h, body, at(0)).unwrap().event_id.as_str(),
        "72d3162e-cc78-11e3-81ab-4c9367dc0958"
    );
}

// --- Slack (published) ------------------------------------------------------------------------------

#[test]
fn slack_docs_vector() {
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    assert_eq!(
        slack::sign(secret.as_bytes(), 1_531_420_618, body),
        expected
    );
    let v = verifier(Scheme::Slack, &[secret]);
    let h = headers(&[
        ("X-Slack-Request-Timestamp", "1531420618"),
        ("X-Slack-Signature", expected),
    ]);
    // The signature is good; this slash-command body is form-encoded, not an Events API JSON
    // body, so there is no event id to read: 400, not 401.
    let err = v.verify(&h, body, at(1_531_420_618)).unwrap_err();
    assert!(matches!(err, VerifyError::InvalidJson(_)), "{err:?}");
    assert_eq!(err.status(), 400);
}

// --- generic-hmac (RFC 4231 / RFC 2202) -------------------------------------------------------------

#[test]
fn generic_hmac_rfc_vectors() {
    let body = b"what do ya want for nothing?";
    for (algorithm, expected) in [
        (Algorithm::Sha1, "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"),
        (
            Algorithm::Sha256,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
        ),
        (
            Algorithm::Sha512,
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737",
        ),
    ] {
        let config = GenericHmac {
            header: "X-Signature".into(),
            algorithm,
            event_id: KeySource::Header("X-Request-Id".into()),
            ..GenericHmac::default()
        };
        assert_eq!(config.sign(b"Jefe", 0, body).unwrap(), expected);
        let v = verifier(Scheme::GenericHmac(config), &["Jefe"]);
        let h = headers(&[("x-signature", expected), ("x-request-id", "req-1")]);
        assert_eq!(
            v.verify(&h, body, at(0)).unwrap().event_id.as_str(),
            "req-1"
        );
    }
}

// --- Stripe, Shopify, Paddle (computed independently) -----------------------------------------------

#[test]
fn stripe_computed_vector_with_several_v1() {
    let secret = "whsec_test_secret";
    let body = br#"{"id":"evt_test_webhook","object":"event"}"#;
    // stripe-node: HMAC-SHA256 hex of `${t}.${payload}`, keyed with the secret string as is.
    let expected = hex(&hmac_sha256(secret.as_bytes(), &[b"1700000000.", body]));
    assert_eq!(
        stripe::sign(secret.as_bytes(), 1_700_000_000, body),
        format!("t=1700000000,v1={expected}")
    );
    let v = verifier(Scheme::Stripe, &[secret]);
    // A v0 entry, a stale v1 from another secret and the good one: any v1 may match.
    let header = format!(
        "t=1700000000,v0={},v1={},v1={expected}",
        "0".repeat(64),
        hex(&hmac_sha256(b"whsec_old", &[b"1700000000.", body]))
    );
    let h = headers(&[("Stripe-Signature", &header)]);
    let ok = v.verify(&h, body, at(1_700_000_100)).unwrap();
    assert_eq!(ok.event_id.as_str(), "evt_test_webhook");
    assert_eq!(ok.signed_at, Some(at(1_700_000_000)));
}

#[test]
fn shopify_computed_vector() {
    let secret = "hush";
    let body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    // Shopify: base64 of HMAC-SHA256 over the raw body.
    let expected = base64::engine::general_purpose::STANDARD.encode(hmac_sha256(b"hush", &[body]));
    assert_eq!(shopify::sign(secret.as_bytes(), body), expected);
    let v = verifier(Scheme::Shopify, &[secret]);
    let h = headers(&[
        ("X-Shopify-Hmac-SHA256", &expected),
        (
            "X-Shopify-Webhook-Id",
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
        ),
        ("X-Shopify-Event-Id", "98880550-7158-44d4-b7cd-2c97c8a091b5"),
    ]);
    assert_eq!(
        v.verify(&h, body, at(0)).unwrap().event_id.as_str(),
        "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"
    );
}

#[test]
fn paddle_computed_vector_with_several_h1() {
    let secret = "pdl_ntfset_01gkpjp8bkm3tm53kdgkx6sms7_6h3qd3uFSi9YCD3OLYAShQI90XTI5vEI";
    let body =
        br#"{"event_id":"evt_01h8bzakzx3hm2fmen703n5q45","event_type":"transaction.completed"}"#;
    // Paddle: hex HMAC-SHA256 of `${ts}:${rawBody}`.
    let expected = hex(&hmac_sha256(secret.as_bytes(), &[b"1671552777:", body]));
    assert_eq!(
        paddle::sign(secret.as_bytes(), 1_671_552_777, body),
        format!("ts=1671552777;h1={expected}")
    );
    let v = verifier(Scheme::Paddle, &[secret]);
    let header = format!("ts=1671552777;h1={};h1={expected}", "ab".repeat(32));
    let h = headers(&[("Paddle-Signature", &header)]);
    let ok = v.verify(&h, body, at(1_671_552_780)).unwrap();
    assert_eq!(ok.event_id.as_str(), "evt_01h8bzakzx3hm2fmen703n5q45");
}

#[test]
fn generic_hmac_timestamp_template_computed() {
    let config = GenericHmac {
        header: "X-Ingest-Signature".into(),
        encoding: Encoding::Base64,
        prefix: Some("sha256=".into()),
        algorithm: Algorithm::Sha256,
        timestamp_header: Some("X-Ingest-Timestamp".into()),
        signed_payload: Some("v1:{timestamp}:{body}".into()),
        event_id: KeySource::JsonPointer("/data/id".into()),
    };
    let body = br#"{"data":{"id":"ord_42"}}"#;
    let expected = format!(
        "sha256={}",
        base64::engine::general_purpose::STANDARD
            .encode(hmac_sha256(b"k", &[b"v1:1700000000:", body]))
    );
    assert_eq!(config.sign(b"k", 1_700_000_000, body).unwrap(), expected);
    let v = verifier(Scheme::GenericHmac(config), &["k"]);
    let h = headers(&[
        ("X-Ingest-Signature", &expected),
        ("X-Ingest-Timestamp", "1700000000"),
    ]);
    let ok = v.verify(&h, body, at(1_700_000_000)).unwrap();
    assert_eq!(ok.event_id.as_str(), "ord_42");
    assert_eq!(ok.signed_at, Some(at(1_700_000_000)));
}
