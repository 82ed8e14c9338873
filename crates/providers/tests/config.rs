//! Configuration is checked once, when a verifier is built; errors name what is wrong and never
//! quote a secret.

use std::time::Duration;

use idemgate_providers::{
    Algorithm, ConfigError, Encoding, GenericHmac, KeySource, NoneScheme, Scheme, Secret, Verifier,
    VerifyError, standard_webhooks, svix,
};

fn build(scheme: Scheme, secrets: &[&str]) -> Result<Verifier, ConfigError> {
    let secrets = secrets.iter().map(|s| Secret::from(*s)).collect();
    Verifier::new(scheme, secrets, Verifier::DEFAULT_TOLERANCE)
}

fn generic(edit: impl FnOnce(&mut GenericHmac)) -> Scheme {
    let mut config = GenericHmac {
        header: "X-Signature".into(),
        event_id: KeySource::Header("X-Id".into()),
        ..GenericHmac::default()
    };
    edit(&mut config);
    Scheme::GenericHmac(config)
}

#[test]
fn scheme_names_round_trip() {
    for name in Scheme::NAMES {
        let scheme = Scheme::from_name(name).unwrap();
        assert_eq!(scheme.name(), name);
        assert_eq!(scheme.to_string(), name);
        assert_eq!(name.parse::<Scheme>().unwrap(), scheme);
    }
    let err = Scheme::from_name("Stripe").unwrap_err();
    assert!(matches!(err, ConfigError::UnknownScheme { .. }));
    assert!(err.to_string().contains("generic-hmac"), "{err}");
    assert_eq!("base64".parse::<Encoding>().unwrap(), Encoding::Base64);
    assert_eq!("sha512".parse::<Algorithm>().unwrap(), Algorithm::Sha512);
    assert!("md5".parse::<Algorithm>().is_err());
    assert!("b64".parse::<Encoding>().is_err());
}

#[test]
fn configurable_schemes_from_a_bare_name_must_be_filled_in() {
    let err = build(Scheme::from_name("generic-hmac").unwrap(), &["s"]).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Missing {
                field: "header",
                ..
            }
        ),
        "{err}"
    );
    let err = build(Scheme::from_name("none").unwrap(), &[]).unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::Missing {
                field: "event_id",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn secret_lists() {
    for scheme in ["stripe", "github", "shopify", "slack", "paddle", "svix"] {
        let err = build(Scheme::from_name(scheme).unwrap(), &[]).unwrap_err();
        assert!(matches!(err, ConfigError::NoSecrets { .. }), "{err}");
    }
    let none = Scheme::None(NoneScheme {
        event_id: KeySource::Header("X-Id".into()),
    });
    assert!(build(none.clone(), &[]).is_ok());
    assert!(matches!(
        build(none, &["s"]),
        Err(ConfigError::SecretsNotAllowed)
    ));
    let err = build(Scheme::Github, &["ok", ""]).unwrap_err();
    assert!(matches!(err, ConfigError::Secret { index: 1, .. }), "{err}");
    let err = build(Scheme::Github, &["hunter2\n"]).unwrap_err();
    assert!(matches!(err, ConfigError::Secret { index: 0, .. }), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    // Stripe's whsec_ secret is used as is, not decoded: any non-empty text is accepted.
    assert!(build(Scheme::Stripe, &["whsec_not*base64"]).is_ok());
}

#[test]
fn standard_webhooks_secrets_must_be_whsec_base64() {
    let good = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    for scheme in [Scheme::StandardWebhooks, Scheme::Svix] {
        assert!(build(scheme.clone(), &[good]).is_ok());
        for (bad, mentions) in [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_"),
            ("whsec_", "empty"),
            ("whsec_Mf!Q9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "base64"),
        ] {
            let err = build(scheme.clone(), &[good, bad]).unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, ConfigError::Secret { index: 1, .. }),
                "{text}"
            );
            assert!(text.contains("secrets[1]"), "{text}");
            assert!(text.contains(mentions), "{text}");
            assert!(
                !text.contains("MfKQ9r8G") && !text.contains("Mf!Q"),
                "{text}"
            );
            assert!(std::error::Error::source(&err).is_none());
        }
    }
    assert!(standard_webhooks::sign(b"raw", "id", 1, b"").is_err());
    assert!(svix::sign(b"whsec_@@@@", "id", 1, b"").is_err());
}

#[test]
fn generic_hmac_settings() {
    assert!(build(generic(|_| {}), &["s"]).is_ok());
    let cases: Vec<(Scheme, &str)> = vec![
        (generic(|g| g.header = String::new()), "header is required"),
        (
            generic(|g| g.header = "X Signature".into()),
            "not a valid header name",
        ),
        (
            generic(|g| g.timestamp_header = Some("bad:name".into())),
            "timestamp_header",
        ),
        (
            generic(|g| g.event_id = KeySource::Header(String::new())),
            "event_id is required",
        ),
        (
            generic(|g| g.event_id = KeySource::JsonPointer("data.id".into())),
            "must start with '/'",
        ),
        (
            generic(|g| g.event_id = KeySource::JsonPointer(String::new())),
            "whole document",
        ),
        (
            generic(|g| g.event_id = KeySource::JsonPointer("/a~2".into())),
            "~0 and ~1",
        ),
        (
            generic(|g| g.signed_payload = Some("{timestamp}.{body}".into())),
            "needs a timestamp_header",
        ),
        (
            generic(|g| {
                g.timestamp_header = Some("X-Ts".into());
                g.signed_payload = Some("{body}".into());
            }),
            "{timestamp} exactly once",
        ),
        (
            generic(|g| g.signed_payload = Some("{ts}.{body}".into())),
            "unknown placeholder",
        ),
        (
            generic(|g| g.signed_payload = Some("static".into())),
            "{body} exactly once",
        ),
    ];
    for (scheme, mentions) in cases {
        let err = build(scheme, &["s"]).unwrap_err();
        assert!(err.to_string().contains(mentions), "{err} / {mentions}");
    }
}

#[test]
fn zero_tolerance_is_refused() {
    let err = Verifier::new(Scheme::Stripe, vec!["s".into()], Duration::ZERO).unwrap_err();
    assert!(matches!(err, ConfigError::ZeroTolerance));
}

#[test]
fn verifier_accessors() {
    let v = Verifier::new(
        Scheme::Slack,
        vec!["a".into(), "b".into()],
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(v.scheme(), &Scheme::Slack);
    assert_eq!(v.tolerance(), Duration::from_secs(60));
    assert_eq!(v.secret_count(), 2);
    let shown = format!("{v:?}");
    assert!(!shown.contains("\"a\""), "{shown}");
}

#[test]
fn error_statuses_and_kinds_are_stable() {
    use http::HeaderName;
    let h = HeaderName::from_static("x");
    let json = serde_json::from_slice::<serde_json::Value>(b"{").unwrap_err();
    let key = idemgate_providers::EventId::new("").unwrap_err();
    let table: Vec<(VerifyError, u16, &str)> = vec![
        (
            VerifyError::MissingHeader { header: h.clone() },
            401,
            "missing_header",
        ),
        (
            VerifyError::MalformedHeader {
                header: h,
                why: "x",
            },
            401,
            "malformed_header",
        ),
        (VerifyError::BadSignature, 401, "bad_signature"),
        (
            VerifyError::StaleTimestamp {
                age: Duration::from_secs(301),
            },
            401,
            "stale_timestamp",
        ),
        (
            VerifyError::FutureTimestamp {
                ahead: Duration::from_secs(301),
            },
            401,
            "future_timestamp",
        ),
        (
            VerifyError::MissingEventId {
                location: "body /id".into(),
            },
            400,
            "missing_event_id",
        ),
        (VerifyError::InvalidEventId(key), 400, "invalid_event_id"),
        (VerifyError::InvalidJson(json), 400, "invalid_json"),
    ];
    for (err, status, kind) in table {
        assert_eq!(err.status(), status, "{err}");
        assert_eq!(err.kind(), kind, "{err}");
    }
}
