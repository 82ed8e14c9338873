//! Inputs the fuzz targets (`fuzz/`, targets `verify` and `generic`) found, kept as tests.
//!
//! Each test names the property the fuzzer saw broken. The property behind most of them: a
//! delivery that `Verifier::sign` produced and that went over HTTP (which strips the spaces and
//! tabs around each header value) verifies, or its event id is refused (400), never its
//! signature (401).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use idemgate_providers::{
    ConfigError, GenericHmac, KeySource, Scheme, Secret, SignError, Verifier,
};

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000)
}

fn build(scheme: Scheme, secret: &str) -> Result<Verifier, ConfigError> {
    Verifier::new(
        scheme,
        vec![Secret::from(secret)],
        Verifier::DEFAULT_TOLERANCE,
    )
}

fn generic(edit: impl FnOnce(&mut GenericHmac)) -> Scheme {
    let mut config = GenericHmac {
        header: "X-Sig".into(),
        event_id: KeySource::JsonPointer("/id".into()),
        ..GenericHmac::default()
    };
    edit(&mut config);
    Scheme::GenericHmac(config)
}

/// What a receiver behind an HTTP/1.1 server sees of `headers`.
fn over_http(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        let trimmed = HeaderValue::from_bytes(value.as_bytes().trim_ascii()).unwrap();
        out.append(name.clone(), trimmed);
    }
    out
}

fn assert_setting(result: Result<Verifier, ConfigError>, expected: &str) {
    match result {
        Err(ConfigError::Setting { field, .. }) if field == expected => {}
        other => panic!("expected a refused {expected} setting, got {other:?}"),
    }
}

/// Found by `generic`: `@header X-Sig` with `@timestamp-header X-Sig`. `sign` wrote the
/// timestamp, then the signature over it into the same header; `verify` read the signature as
/// the timestamp: 401 malformed_header for every delivery. Such a configuration is now refused
/// when the verifier is built.
#[test]
fn generic_timestamp_header_cannot_be_the_signature_header() {
    let scheme = generic(|g| g.timestamp_header = Some("x-sig".into()));
    let err = build(scheme, "s").unwrap_err();
    assert_eq!(
        err.to_string(),
        "generic-hmac: timestamp_header: must differ from header"
    );
}

/// Found while fixing the above: the event id read from the signature header (or the timestamp
/// header) verifies, but the id then changes whenever the signature (or the time) does, so every
/// retry looks like a new event. Refused, whatever the case of the names.
#[test]
fn generic_event_id_header_cannot_share_a_header() {
    let scheme = generic(|g| g.event_id = KeySource::Header("X-SIG".into()));
    assert_setting(build(scheme, "s"), "event_id");
    let scheme = generic(|g| {
        g.timestamp_header = Some("X-Ts".into());
        g.event_id = KeySource::Header("x-ts".into());
    });
    let err = build(scheme, "s").unwrap_err();
    assert_eq!(
        err.to_string(),
        "generic-hmac: event_id: must differ from timestamp_header"
    );
    // Distinct headers are fine.
    let scheme = generic(|g| {
        g.timestamp_header = Some("X-Ts".into());
        g.event_id = KeySource::Header("X-Id".into());
    });
    assert!(build(scheme, "s").is_ok());
}

/// Found while fixing the above, and a case of the same property: a prefix that starts with a
/// space (`@prefix  x`). The sender's header `" x<hex>"` arrives as `"x<hex>"`, which lacks the
/// prefix: 401 for every delivery. A prefix with a character no header value can carry could
/// never arrive at all.
#[test]
fn generic_prefix_must_survive_http() {
    for prefix in [" sha256=", "\tv1=", "v1=\n", "sig\u{7f}"] {
        let scheme = generic(|g| g.prefix = Some(prefix.into()));
        assert_setting(build(scheme, "s"), "prefix");
    }
    // Inner and trailing spaces survive the trip, so they are allowed and verify.
    for prefix in ["sha256=", "v1 ", "t = "] {
        let v = build(generic(|g| g.prefix = Some(prefix.into())), "s").unwrap();
        let body = br#"{"id":"evt_1"}"#;
        let headers = over_http(&v.sign("ignored", now(), body).unwrap());
        assert_eq!(
            v.verify(&headers, body, now()).unwrap().event_id.as_str(),
            "evt_1",
            "{prefix:?}"
        );
    }
}

/// Found by `verify`: `@scheme standard-webhooks` with `@sign xo@scheme w ` (an id ending in a
/// space). Standard Webhooks and Svix sign the id header's bytes; HTTP delivers the id without
/// its trailing space, so the signature never matched (401 bad_signature). `sign` now refuses an
/// event id that HTTP would not deliver as written, for every scheme that puts it in a header.
#[test]
fn sign_refuses_an_id_http_would_trim() {
    let body = br#"{"type":"invoice.paid"}"#;
    for (scheme, secret) in [
        (Scheme::StandardWebhooks, SW_SECRET),
        (Scheme::Svix, SW_SECRET),
        (Scheme::Github, "s"),
        (Scheme::Shopify, "s"),
    ] {
        let v = build(scheme, secret).unwrap();
        for id in ["xo@scheme w ", " msg_1", "msg_1\t"] {
            let err = v.sign(id, now(), body).unwrap_err();
            assert!(
                matches!(err, SignError::Whitespace { .. }),
                "{}: {id:?}: {err:?}",
                v.scheme()
            );
        }
        // Inner spaces are delivered as they are, and verify.
        let headers = over_http(&v.sign("msg 1", now(), body).unwrap());
        assert!(
            v.verify(&headers, body, now()).is_ok(),
            "{}: an inner space",
            v.scheme()
        );
    }
}
