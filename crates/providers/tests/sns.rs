//! Amazon SNS: messages signed with a test certificate's key and checked by AWS's validator
//! (`fixtures/sns`), the certificate URL's checks (nothing is named that may not be fetched), the
//! subscription handshake, the retry-aware timestamp, and bad input.

use std::time::SystemTime;

use http::HeaderMap;
use idemgate_providers::sns::{self, Sns};
use idemgate_providers::{Control, Delivery, DocumentKind, Scheme, Secret, Verifier, VerifyError};
use serde_json::{Map, Value, json};

const CERT: &str = include_str!("fixtures/sns/signing-cert.pem");
const KEY: &str = include_str!("fixtures/sns/signing-key.pem");

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/sns/vectors.json")).unwrap()
}

fn time(rfc3339: &str) -> SystemTime {
    humantime::parse_rfc3339(rfc3339).unwrap()
}

fn verifier(hosts: &[&str]) -> Verifier {
    let config = Sns {
        cert_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        ..Sns::default()
    };
    Verifier::new(Scheme::Sns(config), vec![], Verifier::DEFAULT_TOLERANCE).unwrap()
}

/// Verifies `body` as the gateway does: ask what is needed, pass the certificate in.
fn check(
    v: &Verifier,
    body: &[u8],
    cert: &str,
    now: SystemTime,
) -> Result<idemgate_providers::Verified, VerifyError> {
    let headers = HeaderMap::new();
    let delivery = Delivery::new(&headers, body);
    let needed = v.needs(&delivery)?.expect("sns needs its certificate");
    assert_eq!(needed.kind, DocumentKind::Certificate);
    v.verify_delivery(&delivery.with_document(&needed.url, cert.as_bytes()), now)
}

#[test]
fn the_validators_verdicts_hold() {
    let f = fixture();
    let v = verifier(&[]);
    let now = time(f["now"].as_str().unwrap());
    let mut seen = (0, 0);
    for vector in f["vectors"].as_array().unwrap() {
        let name = vector["name"].as_str().unwrap();
        let body = vector["body"].as_str().unwrap().as_bytes();
        let got = check(&v, body, CERT, now);
        if vector["valid"].as_bool().unwrap() {
            let ok = got.unwrap_or_else(|e| panic!("{name}: {e}"));
            let message: Value = serde_json::from_slice(body).unwrap();
            assert_eq!(ok.event_id.as_str(), message["MessageId"].as_str().unwrap());
            assert_eq!(
                ok.signed_at,
                Some(time(message["Timestamp"].as_str().unwrap()))
            );
            match message["Type"].as_str().unwrap() {
                "SubscriptionConfirmation" => assert_eq!(
                    ok.control,
                    Some(Control::SnsSubscription {
                        subscribe_url: message["SubscribeURL"].as_str().unwrap().to_owned(),
                        topic_arn: message["TopicArn"].as_str().unwrap().to_owned(),
                    })
                ),
                _ => assert_eq!(ok.control, None, "{name}"),
            }
            seen.0 += 1;
        } else {
            assert!(
                matches!(got, Err(VerifyError::BadSignature)),
                "{name}: {got:?}"
            );
            seen.1 += 1;
        }
    }
    assert_eq!(seen, (4, 5));
}

/// Any AWS account can make SNS sign a message to any endpoint: with `topic_arns`, a verified
/// message of another topic is refused (403 `untrusted_topic`), a message of one listed passes.
#[test]
fn a_verified_message_of_a_foreign_topic_is_refused() {
    let f = fixture();
    let now = time(f["now"].as_str().unwrap());
    let vector = f["vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["valid"].as_bool().unwrap())
        .unwrap();
    let body = vector["body"].as_str().unwrap().as_bytes();
    let pinned = |topics: &[&str]| {
        Verifier::new(
            Scheme::Sns(Sns {
                topic_arns: topics.iter().map(|t| (*t).to_owned()).collect(),
                ..Sns::default()
            }),
            vec![],
            Verifier::DEFAULT_TOLERANCE,
        )
        .unwrap()
    };
    let ours = pinned(&["arn:aws:sns:us-east-1:123456789012:orders"]);
    assert!(check(&ours, body, CERT, now).is_ok());
    let theirs = pinned(&["arn:aws:sns:us-east-1:999999999999:orders"]);
    let e = check(&theirs, body, CERT, now).unwrap_err();
    assert_eq!((e.status(), e.kind()), (403, "untrusted_topic"), "{e}");
    assert!(
        e.to_string()
            .contains("arn:aws:sns:us-east-1:123456789012:orders"),
        "{e}"
    );
}

fn message(url: &str, at: &str) -> Map<String, Value> {
    json!({
        "Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:aws:sns:us-east-1:1:t",
        "Message": "hello", "Timestamp": at, "SignatureVersion": "2", "SigningCertURL": url,
    })
    .as_object()
    .unwrap()
    .clone()
}

fn signed(m: &Map<String, Value>) -> Vec<u8> {
    serde_json::to_vec(&sns::sign(KEY.as_bytes(), m).unwrap()).unwrap()
}

#[test]
fn retries_of_the_same_message_verify_for_an_hour_past_the_tolerance() {
    let v = verifier(&["certs.example.com"]);
    let body = signed(&message(
        "https://certs.example.com/c.pem",
        "2026-01-02T03:00:00Z",
    ));
    for (now, ok) in [
        ("2026-01-02T03:00:00Z", true),
        ("2026-01-02T04:05:00Z", true),
        ("2026-01-02T04:05:01Z", false),
        ("2026-01-02T02:55:00Z", true),
        ("2026-01-02T02:54:59Z", false),
    ] {
        let got = check(&v, &body, CERT, time(now));
        assert_eq!(got.is_ok(), ok, "{now}: {got:?}");
    }
    assert!(matches!(
        check(&v, &body, CERT, time("2026-01-02T05:00:00Z")),
        Err(VerifyError::StaleTimestamp { .. })
    ));
    assert!(matches!(
        check(&v, &body, CERT, time("2026-01-02T02:00:00Z")),
        Err(VerifyError::FutureTimestamp { .. })
    ));
}

#[test]
fn an_untrusted_certificate_url_is_refused_before_anything_is_named() {
    let v = verifier(&[]);
    let headers = HeaderMap::new();
    for url in [
        "https://evil.example.com/SimpleNotificationService-1.pem",
        "http://sns.us-east-1.amazonaws.com/SimpleNotificationService-1.pem",
        "https://sns.us-east-1.amazonaws.com/not-a-certificate.txt",
    ] {
        let body = signed(&message(url, "2026-01-02T03:00:00Z"));
        let e = v.needs(&Delivery::new(&headers, &body)).unwrap_err();
        assert_eq!((e.status(), e.kind()), (401, "untrusted_url"), "{url}: {e}");
        // Even handed a document, verification refuses the URL.
        let e = v
            .verify_delivery(
                &Delivery::new(&headers, &body).with_document(url, CERT.as_bytes()),
                time("2026-01-02T03:00:00Z"),
            )
            .unwrap_err();
        assert_eq!(e.kind(), "untrusted_url");
    }
}

#[test]
fn a_subscribe_url_off_the_allowed_hosts_is_refused() {
    let v = verifier(&["certs.example.com"]);
    let mut m = message("https://certs.example.com/c.pem", "2026-01-02T03:00:00Z");
    m.insert("Type".into(), "SubscriptionConfirmation".into());
    m.insert("Token".into(), "tok".into());
    m.insert(
        "SubscribeURL".into(),
        "https://evil.example.com/?Action=ConfirmSubscription".into(),
    );
    let e = check(&v, &signed(&m), CERT, time("2026-01-02T03:00:00Z")).unwrap_err();
    assert_eq!(e.kind(), "untrusted_url");
    assert!(e.to_string().contains("SubscribeURL"), "{e}");
    m.insert(
        "SubscribeURL".into(),
        "https://certs.example.com/?Action=ConfirmSubscription".into(),
    );
    let ok = check(&v, &signed(&m), CERT, time("2026-01-02T03:00:00Z")).unwrap();
    assert!(matches!(ok.control, Some(Control::SnsSubscription { .. })));
    m.insert("Type".into(), "UnsubscribeConfirmation".into());
    let ok = check(&v, &signed(&m), CERT, time("2026-01-02T03:00:00Z")).unwrap();
    assert!(matches!(ok.control, Some(Control::SnsUnsubscribed { .. })));
}

#[test]
fn bad_messages_and_documents_are_refused_clearly() {
    let v = verifier(&["certs.example.com"]);
    let url = "https://certs.example.com/c.pem";
    let now = time("2026-01-02T03:00:00Z");
    let headers = HeaderMap::new();
    for body in [&b"not json"[..], b"[1]", b"{}", br#"{"SigningCertURL": 5}"#] {
        let e = v.needs(&Delivery::new(&headers, body)).unwrap_err();
        assert_eq!((e.status(), e.kind()), (401, "malformed_body"), "{e}");
    }
    let good = message(url, "2026-01-02T03:00:00Z");
    for (field, value) in [
        ("SignatureVersion", json!("3")),
        ("Type", json!("Gossip")),
        ("Timestamp", json!("yesterday")),
        ("Signature", json!("!!")),
    ] {
        let mut m: Map<String, Value> = serde_json::from_slice(&signed(&good)).unwrap();
        m.insert(field.into(), value);
        let e = check(&v, &serde_json::to_vec(&m).unwrap(), CERT, now).unwrap_err();
        assert!(
            matches!(
                e,
                VerifyError::MalformedBody { .. } | VerifyError::BadSignature
            ),
            "{field}: {e:?}"
        );
    }
    let body = signed(&good);
    // Without the certificate: 503; with something that is not one: 502.
    let e = v
        .verify_delivery(&Delivery::new(&headers, &body), now)
        .unwrap_err();
    assert_eq!(e.status(), 503);
    for doc in [
        "",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ] {
        let e = check(&v, &body, doc, now).unwrap_err();
        assert_eq!((e.status(), e.kind()), (502, "bad_document"), "{e}");
    }
    // Settings.
    let e = Verifier::new(
        Scheme::Sns(Sns {
            cert_hosts: vec!["*".into()],
            ..Sns::default()
        }),
        vec![],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("cert_hosts"), "{e}");
    let e = Verifier::new(
        Scheme::Sns(Sns::default()),
        vec![Secret::from("s")],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap_err();
    assert!(e.to_string().contains("SigningCertURL"), "{e}");
    let e = sns::sign(KEY.as_bytes(), &{
        let mut m = good.clone();
        m.insert("SignatureVersion".into(), "1".into());
        m
    })
    .unwrap_err();
    assert!(e.to_string().contains("SignatureVersion"), "{e}");
}

/// Found by the fuzz target: SNS signs a message's canonical fields, not its bytes. A changed
/// signed field is a bad signature and broken JSON is a malformed body (both refused), while
/// the JSON's spacing or a field outside the signed set is not covered; so the scheme does not
/// claim to sign the body's bytes.
#[test]
fn the_signed_fields_are_covered_and_the_bytes_are_not() {
    let v = verifier(&["certs.example.com"]);
    assert!(!v.scheme().signs_body());
    let at = "2026-01-02T03:00:00Z";
    let mut m = message("https://certs.example.com/c.pem", at);
    m.insert(
        "UnsubscribeURL".into(),
        json!("https://certs.example.com/unsub"),
    );
    let body = signed(&m);
    assert!(check(&v, &body, CERT, time(at)).is_ok());

    let text = String::from_utf8(body.clone()).unwrap();
    let changed = text.replace("hello", "hellO");
    assert!(matches!(
        check(&v, changed.as_bytes(), CERT, time(at)),
        Err(VerifyError::BadSignature)
    ));
    let broken = &body[..body.len() - 1];
    assert!(matches!(
        check(&v, broken, CERT, time(at)),
        Err(VerifyError::MalformedBody { .. })
    ));
    let unsigned = text.replace("/unsub", "/other");
    assert!(check(&v, unsigned.as_bytes(), CERT, time(at)).is_ok());
}
