//! The same checks run against every scheme: a signed delivery verifies; a tampered body, a wrong
//! secret, a stale or future timestamp, a missing, garbled or non-UTF-8 header and a missing event
//! id are each refused with the right variant; a rotated (second) secret is accepted.
//!
//! Deliveries are produced by [`Verifier::sign`]; `vectors.rs` pins each signer to a published or
//! independently computed vector, so these round trips cannot agree with a wrong recipe.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_providers::{
    Algorithm, Encoding, GenericHmac, KeySource, NoneScheme, Scheme, Secret, Verifier, VerifyError,
};

const NOW: u64 = 1_700_000_000;
const TOLERANCE: Duration = Verifier::DEFAULT_TOLERANCE;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// Where a scheme reads its event id.
enum Id {
    /// In the body: `with` holds the id, `without` lacks it.
    Body {
        with: &'static str,
        without: &'static str,
    },
    /// In this header, which is not signed.
    Header(&'static str),
    /// In this header, which is signed (Standard Webhooks, Svix): removing it is a missing
    /// header (401), not a missing event id.
    SignedHeader(&'static str),
}

struct Case {
    scheme: Scheme,
    /// The current and the previous secret.
    secrets: [&'static str; 2],
    /// A secret of the right form that is not active.
    wrong: &'static str,
    signature: &'static str,
    /// The header holding the signed timestamp, if the scheme signs one in its own header.
    timestamp: Option<&'static str>,
    /// Whether the scheme signs a timestamp at all (Stripe and Paddle sign it inside the
    /// signature header).
    signs_timestamp: bool,
    id: Id,
    expected_id: &'static str,
}

impl Case {
    fn body(&self) -> &'static [u8] {
        match self.id {
            Id::Body { with, .. } => with.as_bytes(),
            _ => br#"{"hello":"world"}"#,
        }
    }

    fn verifier(&self, secrets: &[&str]) -> Verifier {
        let secrets = secrets.iter().map(|s| Secret::from(*s)).collect();
        Verifier::new(self.scheme.clone(), secrets, TOLERANCE).unwrap()
    }

    fn active(&self) -> Verifier {
        self.verifier(&self.secrets)
    }

    /// A delivery signed with `secret` at `ts`.
    fn signed(&self, secret: &str, ts: u64, body: &[u8]) -> HeaderMap {
        self.verifier(&[secret])
            .sign(self.expected_id, at(ts), body)
            .unwrap()
    }

    fn header(&self, name: &str) -> HeaderName {
        HeaderName::from_bytes(name.as_bytes()).unwrap()
    }

    fn run(&self) {
        let body = self.body();
        let v = self.active();
        assert_eq!(v.secret_count(), 2);
        assert_eq!(v.scheme().signs_timestamp(), self.signs_timestamp);

        // Good, and signed with the current secret.
        let good = self.signed(self.secrets[0], NOW, body);
        v.check_headers(&good)
            .expect("a signed delivery has every header its check needs");
        let ok = v.verify(&good, body, at(NOW)).unwrap();
        assert_eq!(ok.event_id.as_str(), self.expected_id);
        assert_eq!(ok.signed_at.is_some(), self.signs_timestamp);

        // Rotation: the previous secret, second in the list, still verifies.
        let old = self.signed(self.secrets[1], NOW, body);
        assert!(v.verify(&old, body, at(NOW)).is_ok());

        // Tampered body.
        let mut tampered = body.to_vec();
        tampered.push(b' ');
        expect(&v, &good, &tampered, NOW, "bad_signature");
        // A signature header from another delivery.
        let other = self.signed(self.secrets[0], NOW, br#"{"other":1}"#);
        let mut swapped = good.clone();
        let sig = self.header(self.signature);
        swapped.insert(sig.clone(), other[&sig].clone());
        expect(&v, &swapped, body, NOW, "bad_signature");

        // Wrong secret, and a message that reveals nothing.
        let wrong = self.signed(self.wrong, NOW, body);
        let err = v.verify(&wrong, body, at(NOW)).unwrap_err();
        assert!(matches!(err, VerifyError::BadSignature), "{err:?}");
        assert_eq!(err.to_string(), "no signature matches");

        // Timestamps.
        let late = NOW + TOLERANCE.as_secs() + 1;
        let early = NOW - TOLERANCE.as_secs() - 1;
        if self.signs_timestamp {
            let err = v.verify(&good, body, at(late)).unwrap_err();
            assert!(
                matches!(err, VerifyError::StaleTimestamp { age } if age == TOLERANCE + Duration::from_secs(1)),
                "{err:?}"
            );
            expect(&v, &good, body, early, "future_timestamp");
            // Exactly at the edge is still accepted.
            assert!(v.verify(&good, body, at(NOW + TOLERANCE.as_secs())).is_ok());
            assert!(v.verify(&good, body, at(NOW - TOLERANCE.as_secs())).is_ok());
            if let Some(ts) = self.timestamp {
                // A re-dated timestamp breaks the signature, so it cannot be used to refresh an
                // old delivery.
                let mut redated = good.clone();
                redated.insert(self.header(ts), HeaderValue::from(NOW + 60));
                expect(&v, &redated, body, NOW, "bad_signature");
                let mut garbled = good.clone();
                garbled.insert(self.header(ts), HeaderValue::from_static("yesterday"));
                expect(&v, &garbled, body, NOW, "malformed_header");
                let mut missing = good.clone();
                missing.remove(self.header(ts));
                expect_missing(&v, &missing, body, ts);
            }
        } else {
            // Nothing signed to be stale: a day-old delivery still verifies.
            let old = self.signed(self.secrets[0], NOW - 86_400, body);
            assert!(v.verify(&old, body, at(NOW)).is_ok());
        }

        // The signature header: missing, garbled, not UTF-8, empty.
        let mut missing = good.clone();
        missing.remove(&sig);
        expect_missing(&v, &missing, body, self.signature);
        for bad in [&b"garbage!"[..], b"\xff\xfe\x80", b""] {
            let mut garbled = good.clone();
            garbled.insert(sig.clone(), HeaderValue::from_bytes(bad).unwrap());
            let err = v.verify(&garbled, body, at(NOW)).unwrap_err();
            assert!(
                matches!(&err, VerifyError::MalformedHeader { header, .. } if *header == sig),
                "{bad:?}: {err:?}"
            );
            assert_eq!(err.status(), 401);
        }

        // The event id.
        match self.id {
            Id::Body { without, .. } => {
                let headers = self.signed(self.secrets[0], NOW, without.as_bytes());
                expect(&v, &headers, without.as_bytes(), NOW, "missing_event_id");
                let headers = self.signed(self.secrets[0], NOW, b"not json");
                let err = v.verify(&headers, b"not json", at(NOW)).unwrap_err();
                assert!(matches!(err, VerifyError::InvalidJson(_)), "{err:?}");
                assert_eq!(err.status(), 400);
            }
            Id::Header(name) => {
                let mut headers = good.clone();
                headers.remove(self.header(name));
                let err = v.verify(&headers, body, at(NOW)).unwrap_err();
                assert!(
                    matches!(&err, VerifyError::MissingEventId { location } if location.contains(&name.to_ascii_lowercase())),
                    "{err:?}"
                );
                assert_eq!(err.status(), 400);
                // The sender is authenticated: an id that is not UTF-8 is a bad id (400).
                headers.insert(self.header(name), HeaderValue::from_bytes(b"\xff").unwrap());
                expect(&v, &headers, body, NOW, "invalid_event_id");
                assert_eq!(v.verify(&headers, body, at(NOW)).unwrap_err().status(), 400);
            }
            Id::SignedHeader(name) => {
                let mut headers = good.clone();
                headers.remove(self.header(name));
                expect_missing(&v, &headers, body, name);
                // The id is signed as bytes: another id, UTF-8 or not, breaks the signature.
                headers.insert(self.header(name), HeaderValue::from_bytes(b"\xff").unwrap());
                expect(&v, &headers, body, NOW, "bad_signature");
                // An empty id is signed like any other, then refused as an id.
                let signer = self.verifier(&[self.secrets[0]]);
                let empty = signer.sign("", at(NOW), body).unwrap();
                expect(&v, &empty, body, NOW, "invalid_event_id");
            }
        }
    }
}

fn expect(v: &Verifier, headers: &HeaderMap, body: &[u8], now: u64, kind: &str) {
    match v.verify(headers, body, at(now)) {
        Ok(ok) => panic!("expected {kind}, got {ok:?}"),
        Err(err) => assert_eq!(err.kind(), kind, "{err:?}"),
    }
}

fn expect_missing(v: &Verifier, headers: &HeaderMap, body: &[u8], name: &str) {
    // Found missing before the body is read, too.
    let early = v.check_headers(headers).unwrap_err();
    assert!(
        matches!(&early, VerifyError::MissingHeader { header } if header.as_str() == name.to_ascii_lowercase()),
        "{name}: {early:?}"
    );
    let err = v.verify(headers, body, at(NOW)).unwrap_err();
    assert!(
        matches!(&err, VerifyError::MissingHeader { header } if header.as_str() == name.to_ascii_lowercase()),
        "{name}: {err:?}"
    );
    assert_eq!(err.status(), 401);
}

#[test]
fn stripe() {
    Case {
        scheme: Scheme::Stripe,
        secrets: ["whsec_current", "whsec_previous"],
        wrong: "whsec_wrong",
        signature: "Stripe-Signature",
        timestamp: None,
        signs_timestamp: true,
        id: Id::Body {
            with: r#"{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"charge.succeeded"}"#,
            without: r#"{"type":"charge.succeeded"}"#,
        },
        expected_id: "evt_1NG8Du2eZvKYlo2CUI79vXWy",
    }
    .run();
}

#[test]
fn github() {
    Case {
        scheme: Scheme::Github,
        secrets: ["current", "previous"],
        wrong: "wrong",
        signature: "X-Hub-Signature-256",
        timestamp: None,
        signs_timestamp: false,
        id: Id::Header("X-GitHub-Delivery"),
        expected_id: "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    }
    .run();
}

#[test]
fn github_scopes_the_delivery_by_hook_id() {
    let v = Verifier::new(
        Scheme::Github,
        vec!["s".into()],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap();
    let body = b"{}";
    let mut headers = v.sign("guid-1", at(NOW), body).unwrap();
    headers.insert("x-github-hook-id", HeaderValue::from_static("42"));
    let a = v.verify(&headers, body, at(NOW)).unwrap();
    headers.insert("x-github-hook-id", HeaderValue::from_static("43"));
    let b = v.verify(&headers, body, at(NOW)).unwrap();
    assert_eq!(a.event_id.as_str(), "42:guid-1");
    assert_eq!(b.event_id.as_str(), "43:guid-1");
}

#[test]
fn shopify() {
    Case {
        scheme: Scheme::Shopify,
        secrets: ["current", "previous"],
        wrong: "wrong",
        signature: "X-Shopify-Hmac-SHA256",
        timestamp: None,
        signs_timestamp: false,
        id: Id::Header("X-Shopify-Webhook-Id"),
        expected_id: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
    }
    .run();
}

#[test]
fn slack() {
    Case {
        scheme: Scheme::Slack,
        secrets: ["current", "previous"],
        wrong: "wrong",
        signature: "X-Slack-Signature",
        timestamp: Some("X-Slack-Request-Timestamp"),
        signs_timestamp: true,
        id: Id::Body {
            with: r#"{"type":"event_callback","event_id":"Ev08MFMKH6","event":{"type":"app_mention"}}"#,
            without: r#"{"type":"url_verification","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#,
        },
        expected_id: "Ev08MFMKH6",
    }
    .run();
}

#[test]
fn standard_webhooks() {
    Case {
        scheme: Scheme::StandardWebhooks,
        secrets: [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_cHJldmlvdXMgc2VjcmV0IGtleSBieXRlcw==",
        ],
        wrong: "whsec_d3Jvbmcgc2VjcmV0IGtleSBieXRlcyEh",
        signature: "webhook-signature",
        timestamp: Some("webhook-timestamp"),
        signs_timestamp: true,
        id: Id::SignedHeader("webhook-id"),
        expected_id: "msg_p5jXN8AQM9LWM0D4loKWxJek",
    }
    .run();
}

#[test]
fn svix() {
    Case {
        scheme: Scheme::Svix,
        secrets: [
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_cHJldmlvdXMgc2VjcmV0IGtleSBieXRlcw==",
        ],
        wrong: "whsec_d3Jvbmcgc2VjcmV0IGtleSBieXRlcyEh",
        signature: "svix-signature",
        timestamp: Some("svix-timestamp"),
        signs_timestamp: true,
        id: Id::SignedHeader("svix-id"),
        expected_id: "msg_2LJf9JQbLkzQhkBvQBM8sXrQK2s",
    }
    .run();
}

#[test]
fn paddle() {
    Case {
        scheme: Scheme::Paddle,
        secrets: ["pdl_ntfset_current", "pdl_ntfset_previous"],
        wrong: "pdl_ntfset_wrong",
        signature: "Paddle-Signature",
        timestamp: None,
        signs_timestamp: true,
        id: Id::Body {
            with: r#"{"event_id":"evt_01h8bzakzx3hm2fmen703n5q45","notification_id":"ntf_01h8bzam1z32agrxjwhjgqk8w6"}"#,
            without: r#"{"notification_id":"ntf_01h8bzam1z32agrxjwhjgqk8w6"}"#,
        },
        expected_id: "evt_01h8bzakzx3hm2fmen703n5q45",
    }
    .run();
}

#[test]
fn generic_hmac_hex_with_prefix_timestamp_and_pointer() {
    Case {
        scheme: Scheme::GenericHmac(GenericHmac {
            header: "X-Signature".into(),
            encoding: Encoding::Hex,
            prefix: Some("sha256=".into()),
            algorithm: Algorithm::Sha256,
            timestamp_header: Some("X-Timestamp".into()),
            signed_payload: None,
            event_id: KeySource::JsonPointer("/data/id".into()),
        }),
        secrets: ["current", "previous"],
        wrong: "wrong",
        signature: "X-Signature",
        timestamp: Some("X-Timestamp"),
        signs_timestamp: true,
        id: Id::Body {
            with: r#"{"data":{"id":"ord_1001"}}"#,
            without: r#"{"data":{"name":"x"}}"#,
        },
        expected_id: "ord_1001",
    }
    .run();
}

#[test]
fn generic_hmac_base64_sha512_header_id() {
    Case {
        scheme: Scheme::GenericHmac(GenericHmac {
            header: "X-Hook-Signature".into(),
            encoding: Encoding::Base64,
            prefix: None,
            algorithm: Algorithm::Sha512,
            timestamp_header: None,
            signed_payload: None,
            event_id: KeySource::Header("X-Hook-Id".into()),
        }),
        secrets: ["current", "previous"],
        wrong: "wrong",
        signature: "X-Hook-Signature",
        timestamp: None,
        signs_timestamp: false,
        id: Id::Header("X-Hook-Id"),
        expected_id: "hook-7",
    }
    .run();
}

#[test]
fn generic_hmac_sha1_legacy() {
    Case {
        scheme: Scheme::GenericHmac(GenericHmac {
            header: "X-Hub-Signature".into(),
            prefix: Some("sha1=".into()),
            algorithm: Algorithm::Sha1,
            event_id: KeySource::JsonPointer("/id".into()),
            ..GenericHmac::default()
        }),
        secrets: ["current", "previous"],
        wrong: "wrong",
        signature: "X-Hub-Signature",
        timestamp: None,
        signs_timestamp: false,
        id: Id::Body {
            with: r#"{"id":12345}"#,
            without: r#"{"id":null}"#,
        },
        expected_id: "12345",
    }
    .run();
}

#[test]
fn generic_hmac_accepts_any_of_several_signature_headers() {
    let scheme = Scheme::GenericHmac(GenericHmac {
        header: "X-Signature".into(),
        event_id: KeySource::Header("X-Id".into()),
        ..GenericHmac::default()
    });
    let v = Verifier::new(scheme.clone(), vec!["new".into()], TOLERANCE).unwrap();
    let old = Verifier::new(scheme, vec!["old".into()], TOLERANCE).unwrap();
    let body = b"payload";
    let mut headers = old.sign("id-1", at(NOW), body).unwrap();
    let fresh = v.sign("id-1", at(NOW), body).unwrap();
    headers.append("x-signature", fresh["x-signature"].clone());
    assert!(v.verify(&headers, body, at(NOW)).is_ok());
}

#[test]
fn none_scheme_reads_the_id_and_checks_nothing() {
    let header = Verifier::new(
        Scheme::None(NoneScheme {
            event_id: KeySource::Header("Idempotency-Key".into()),
        }),
        vec![],
        TOLERANCE,
    )
    .unwrap();
    let headers = header.sign("job-1", at(NOW), b"anything").unwrap();
    let ok = header.verify(&headers, b"anything", at(0)).unwrap();
    assert_eq!(ok.event_id.as_str(), "job-1");
    assert_eq!(ok.signed_at, None);
    expect(&header, &HeaderMap::new(), b"", NOW, "missing_event_id");

    let pointer = Verifier::new(
        Scheme::None(NoneScheme {
            event_id: KeySource::JsonPointer("/meta/event~1id".into()),
        }),
        vec![],
        TOLERANCE,
    )
    .unwrap();
    let body = br#"{"meta":{"event/id":"e-9"}}"#;
    let ok = pointer.verify(&HeaderMap::new(), body, at(NOW)).unwrap();
    assert_eq!(ok.event_id.as_str(), "e-9");
    expect(&pointer, &HeaderMap::new(), b"{}", NOW, "missing_event_id");
    expect(&pointer, &HeaderMap::new(), b"{", NOW, "invalid_json");
    expect(
        &pointer,
        &HeaderMap::new(),
        br#"{"meta":{"event/id":{"nested":1}}}"#,
        NOW,
        "invalid_event_id",
    );
    expect(
        &pointer,
        &HeaderMap::new(),
        br#"{"meta":{"event/id":"a\nb"}}"#,
        NOW,
        "invalid_event_id",
    );
}

#[test]
fn the_signature_is_checked_before_the_timestamp_and_the_id() {
    // A stale delivery with a bad signature is a bad signature; a bad signature without an event
    // id is a bad signature.
    let v = Verifier::new(Scheme::Stripe, vec!["whsec_a".into()], TOLERANCE).unwrap();
    let body = br#"{"type":"no id"}"#;
    let forged = Verifier::new(Scheme::Stripe, vec!["whsec_b".into()], TOLERANCE)
        .unwrap()
        .sign("", at(NOW - 86_400), body)
        .unwrap();
    expect(&v, &forged, body, NOW, "bad_signature");
    // And a stale one without an id is stale.
    let stale = v.sign("", at(NOW - 86_400), body).unwrap();
    expect(&v, &stale, body, NOW, "stale_timestamp");
}

#[test]
fn an_overlong_event_id_is_refused_after_verification() {
    let v = Verifier::new(Scheme::Shopify, vec!["s".into()], TOLERANCE).unwrap();
    let long = "x".repeat(256);
    let headers = v.sign(&long, at(NOW), b"{}").unwrap();
    let err = v.verify(&headers, b"{}", at(NOW)).unwrap_err();
    assert!(matches!(err, VerifyError::InvalidEventId(_)), "{err:?}");
    assert_eq!(err.status(), 400);
    assert!(std::error::Error::source(&err).is_some());
}
