//! Square, Twilio, Mailgun and Postmark: whatever arrives (headers, body, query), an answer and
//! never a panic; and a signed delivery whose body changes by one bit is refused wherever the
//! signature covers the body's bytes (not a Twilio form: its parameters are signed).

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_providers::{
    Delivery, MailgunScheme, PostmarkScheme, Scheme, Secret, SquareScheme, TwilioScheme, Verifier,
};
use proptest::prelude::*;

fn verifiers() -> Vec<Verifier> {
    [
        (
            Scheme::Square(SquareScheme {
                signed_url: "https://x.example/sq".into(),
            }),
            "k",
        ),
        (
            Scheme::Twilio(TwilioScheme {
                signed_url: "https://x.example/tw".into(),
                event_id: None,
            }),
            "k",
        ),
        (Scheme::Mailgun(MailgunScheme::default()), "k"),
        (Scheme::Postmark(PostmarkScheme::default()), "u:p"),
    ]
    .into_iter()
    .map(|(scheme, secret)| {
        Verifier::new(scheme, vec![Secret::from(secret)], Duration::from_secs(300)).unwrap()
    })
    .collect()
}

const NAMES: &[&str] = &[
    "x-square-hmacsha256-signature",
    "x-twilio-signature",
    "i-twilio-idempotency-token",
    "authorization",
    "content-type",
];

/// Bytes biased toward what forms, queries and the signature block are made of.
fn text() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        any::<u8>(),
        Just(b'&'),
        Just(b'='),
        Just(b'%'),
        Just(b'+'),
        Just(b'"'),
        Just(b'{'),
        Just(b'}'),
        Just(b':'),
        Just(b'1'),
    ];
    prop::collection::vec(byte, 0..96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_requests_never_panic(
        pairs in prop::collection::vec((0..NAMES.len(), text()), 0..6),
        body in text(),
        query in proptest::option::of("[a-zA-Z0-9=&%]{0,40}"),
        now in any::<u32>(),
    ) {
        let mut headers = HeaderMap::new();
        for (name, bytes) in pairs {
            if let Ok(v) = HeaderValue::from_bytes(&bytes) {
                headers.append(HeaderName::from_static(NAMES[name]), v);
            }
        }
        let now = UNIX_EPOCH + Duration::from_secs(u64::from(now));
        for v in verifiers() {
            let delivery = Delivery::new(&headers, &body).with_query(query.as_deref());
            if let Err(e) = v.verify_delivery(&delivery, now) {
                prop_assert!(matches!(e.status(), 400 | 401), "{}: {e}", v.scheme());
            }
        }
    }

    #[test]
    fn signed_requests_verify_and_a_flipped_body_bit_is_refused(
        body in prop::collection::vec(any::<u8>(), 1..96),
        flip in any::<prop::sample::Index>(),
        form in any::<bool>(),
        ts in 0u64..4_000_000_000,
    ) {
        let at = UNIX_EPOCH + Duration::from_secs(ts);
        let content_type = if form { "application/x-www-form-urlencoded" } else { "application/json" };
        for v in verifiers() {
            let Ok(signed) = v.sign_request("evt-1", at, &body, Some(content_type)) else {
                // Mailgun needs a JSON object to write its block into.
                prop_assert!(matches!(v.scheme(), Scheme::Mailgun(_)));
                continue;
            };
            let check = |body: &[u8]| {
                v.verify_delivery(
                    &Delivery::new(&signed.headers, body).with_query(signed.query.as_deref()),
                    at,
                )
            };
            let err = check(&signed.body).err();
            prop_assert!(err.as_ref().is_none_or(|e| e.status() == 400), "{} {:?}", v.scheme(), err);
            // A Twilio form is signed by its distinct parameters, not its bytes (see twilio.rs).
            let twilio_form = matches!(v.scheme(), Scheme::Twilio(_)) && form;
            if v.scheme().signs_body() && !twilio_form {
                let mut tampered = signed.body.clone();
                let i = flip.index(tampered.len());
                tampered[i] ^= 0x01;
                let err = check(&tampered).err();
                prop_assert!(err.as_ref().is_some_and(|e| e.kind() == "bad_signature"), "{} {:?}", v.scheme(), err);
            }
        }
    }
}
