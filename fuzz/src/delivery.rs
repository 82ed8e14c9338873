//! A delivery as text, run through a [`Verifier`], and the properties every scheme must keep.
//!
//! The form, as the seed corpus writes it: head lines up to the first empty line, then the body
//! (raw bytes, to the end of the input).
//!
//! ```text
//! @scheme stripe
//! @secret whsec_test_secret
//! @now 1700000100
//! Stripe-Signature: t=1700000000,v1=5257a869...
//!
//! {"id":"evt_test_webhook","object":"event"}
//! ```
//!
//! A head line is a request header (`Name: value`, appended) or a directive:
//!
//! | directive | meaning |
//! |---|---|
//! | `@scheme NAME` | the scheme (`Scheme::from_name`) |
//! | `@secret TEXT` | an active secret (repeat for rotation); a default one when none is given |
//! | `@tolerance SECS` | the timestamp tolerance (default 300) |
//! | `@now SECS` | the receive time, Unix seconds (default 1700000000) |
//! | `@sign ID [SECS]` | adds the headers `Verifier::sign(ID, SECS or now, body)` writes |
//! | `@set Name: value` / `@drop Name` | replaces / removes a header (after a `@sign`, say) |
//! | `@header`, `@encoding`, `@prefix`, `@algorithm`, `@timestamp-header`, `@signed-payload` | `generic-hmac` settings |
//! | `@id-header NAME` / `@id-pointer /json/pointer` / `@id-field NAME` | where `generic-hmac`, `none`, `twilio`, `mailgun` and `postmark` read the event id |
//! | `@signed-url URL` | `square` and `twilio`: the configured URL (default `https://fuzz.example/hook`) |
//! | `@query TEXT` | the request's query string (Twilio signs it); a `@sign` that makes one replaces it |
//! | `@content-type TYPE` | the body's type for `@sign` (Twilio signs a form by its parameters) |
//!
//! Lines that are neither are ignored, so that mutations keep most of an input meaningful.
//! `@sign` lets the fuzzer start from a correctly signed delivery of whatever body it made and
//! change it from there, so it explores beyond "bad signature". (A Mailgun `@sign` rewrites the
//! body, which carries its signature.)

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_providers::pubsub::{Jwks, Pubsub};
use idemgate_providers::{
    Delivery, GenericHmac, KeySource, MailgunScheme, NoneScheme, PostmarkScheme, Scheme, Secret,
    SquareScheme, TwilioScheme, Verifier, VerifyError,
};

/// Which schemes a target drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schemes {
    /// The providers with fixed rules: stripe, github, shopify, slack, standard-webhooks, svix,
    /// paddle, square, twilio, mailgun, postmark, sendgrid, pubsub (with a test JWKS and
    /// audience), sns (the test certificate passed in for whatever URL it names).
    BuiltIn,
    /// The configurable ones: generic-hmac (header, encoding, prefix, algorithm, timestamp
    /// header, signed_payload template, event id header or JSON pointer) and none.
    Configurable,
}

/// The receive time when an input names none.
pub const DEFAULT_NOW: u64 = 1_700_000_000;
/// A secret for each scheme when an input names none.
const DEFAULT_SECRET: &str = "fuzz-secret";
const DEFAULT_WHSEC: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The providers' test fixtures: SendGrid's PKCS#8 signing key, Pub/Sub's JWKS, SNS's
/// certificate.
const SENDGRID: &str = include_str!("../../crates/providers/tests/fixtures/sendgrid/vectors.json");
const PUBSUB: &str = include_str!("../../crates/providers/tests/fixtures/pubsub/vectors.json");
const SNS_CERT: &str = include_str!("../../crates/providers/tests/fixtures/sns/signing-cert.pem");
/// The audience of the fuzzed Pub/Sub source.
pub const PUBSUB_AUDIENCE: &str = "https://hooks.example.com/hooks/pubsub";

fn fixture(text: &'static str, key: &str) -> String {
    let doc: serde_json::Value = serde_json::from_str(text).expect("a fixture");
    match &doc[key] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn sendgrid_key() -> &'static str {
    static KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    KEY.get_or_init(|| fixture(SENDGRID, "signing_key"))
}

fn pubsub_jwks() -> &'static str {
    static JWKS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    JWKS.get_or_init(|| fixture(PUBSUB, "jwks"))
}

const DEFAULT_CREDENTIAL: &str = "fuzz:secret";
const DEFAULT_URL: &str = "https://fuzz.example/hook";

#[derive(Debug)]
enum Step<'a> {
    Sign { id: String, at: Option<u64> },
    Append(&'a [u8], &'a [u8]),
    Set(&'a [u8], &'a [u8]),
    Drop(&'a [u8]),
}

#[derive(Debug, Default)]
struct Input<'a> {
    scheme: Option<String>,
    secrets: Vec<&'a [u8]>,
    tolerance: Option<u64>,
    now: Option<u64>,
    generic: GenericHmac,
    event_id: Option<KeySource>,
    signed_url: Option<String>,
    query: Option<String>,
    content_type: Option<String>,
    steps: Vec<Step<'a>>,
    body: &'a [u8],
    /// A setting that does not parse (an unknown encoding or algorithm).
    refused: bool,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn number(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// `Name: value`, the value without the whitespace HTTP strips around it.
fn header_line(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    let value = &line[colon + 1..];
    Some((&line[..colon], value.trim_ascii()))
}

fn parse(data: &[u8]) -> Input<'_> {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &data[data.len()..]),
    };
    let mut input = Input {
        body,
        ..Input::default()
    };
    for line in head.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(directive) = line.strip_prefix(b"@") else {
            if let Some((name, value)) = header_line(line) {
                input.steps.push(Step::Append(name, value));
            }
            continue;
        };
        let (word, arg) = match directive.iter().position(|&b| b == b' ') {
            Some(at) => (&directive[..at], &directive[at + 1..]),
            None => (directive, &directive[directive.len()..]),
        };
        let g = &mut input.generic;
        match word {
            b"scheme" => input.scheme = Some(text(arg)),
            b"secret" => input.secrets.push(arg),
            b"tolerance" => input.tolerance = number(arg),
            b"now" => input.now = number(arg),
            b"sign" => {
                let arg = text(arg);
                let (id, at) = match arg.rsplit_once(' ') {
                    Some((id, at)) if at.parse::<u64>().is_ok() => (id.to_owned(), at.parse().ok()),
                    _ => (arg, None),
                };
                input.steps.push(Step::Sign { id, at });
            }
            b"set" => {
                if let Some((name, value)) = header_line(arg) {
                    input.steps.push(Step::Set(name, value));
                }
            }
            b"drop" => input.steps.push(Step::Drop(arg)),
            b"header" => g.header = text(arg),
            b"encoding" => match text(arg).parse() {
                Ok(e) => g.encoding = e,
                Err(_) => input.refused = true,
            },
            b"prefix" => g.prefix = Some(text(arg)),
            b"algorithm" => match text(arg).parse() {
                Ok(a) => g.algorithm = a,
                Err(_) => input.refused = true,
            },
            b"timestamp-header" => g.timestamp_header = Some(text(arg)),
            b"signed-payload" => g.signed_payload = Some(text(arg)),
            b"id-header" => input.event_id = Some(KeySource::Header(text(arg))),
            b"id-pointer" => input.event_id = Some(KeySource::JsonPointer(text(arg))),
            b"id-field" => input.event_id = Some(KeySource::FormField(text(arg))),
            b"signed-url" => input.signed_url = Some(text(arg)),
            b"query" => input.query = Some(text(arg)),
            b"content-type" => input.content_type = Some(text(arg)),
            _ => {}
        }
    }
    input
}

fn at(secs: u64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Runs one input through the verifier its head describes, checking every property; panics
/// (a crash to libFuzzer) naming the property broken.
pub fn run(data: &[u8], schemes: Schemes) {
    let mut input = parse(data);
    if input.refused {
        return;
    }
    let scheme = match (schemes, input.scheme.as_deref()) {
        (Schemes::Configurable, None | Some("generic-hmac")) => {
            let mut g = std::mem::take(&mut input.generic);
            g.event_id = input.event_id.take().unwrap_or_default();
            Scheme::GenericHmac(g)
        }
        (Schemes::Configurable, Some("none")) => Scheme::None(NoneScheme {
            event_id: input.event_id.take().unwrap_or_default(),
        }),
        (Schemes::BuiltIn, Some("pubsub")) => Scheme::Pubsub(Pubsub {
            audience: PUBSUB_AUDIENCE.to_owned(),
            issuers: Vec::new(),
            email: None,
            jwks: Jwks::Document(pubsub_jwks().as_bytes().to_vec()),
        }),
        (Schemes::BuiltIn, Some(name)) if !matches!(name, "generic-hmac" | "none") => {
            let url = input
                .signed_url
                .clone()
                .unwrap_or_else(|| DEFAULT_URL.to_owned());
            let event_id = input.event_id.take();
            match Scheme::from_name(name) {
                Ok(Scheme::Square(_)) => Scheme::Square(SquareScheme { signed_url: url }),
                Ok(Scheme::Twilio(_)) => Scheme::Twilio(TwilioScheme {
                    signed_url: url,
                    event_id,
                }),
                Ok(Scheme::Mailgun(_)) => Scheme::Mailgun(MailgunScheme { event_id }),
                Ok(Scheme::Postmark(_)) => Scheme::Postmark(PostmarkScheme { event_id }),
                Ok(s) => s,
                Err(_) => return,
            }
        }
        _ => return,
    };
    let mut secrets: Vec<Secret> = input.secrets.iter().map(|s| Secret::from(*s)).collect();
    let keyless = matches!(scheme, Scheme::Pubsub(_) | Scheme::Sns(_));
    if secrets.is_empty() && scheme.is_signed() && !keyless {
        let default = match scheme {
            Scheme::StandardWebhooks | Scheme::Svix => DEFAULT_WHSEC,
            Scheme::Sendgrid => sendgrid_key(),
            Scheme::Postmark(_) => DEFAULT_CREDENTIAL,
            _ => DEFAULT_SECRET,
        };
        secrets.push(Secret::from(default));
    }
    let tolerance = Duration::from_secs(input.tolerance.unwrap_or(300));
    let verifier = match Verifier::new(scheme, secrets, tolerance) {
        Ok(v) => v,
        Err(e) => {
            assert!(
                !e.to_string().is_empty(),
                "a ConfigError displays as nothing"
            );
            return;
        }
    };
    let now_secs = input.now.unwrap_or(DEFAULT_NOW);
    let Some(now) = at(now_secs) else { return };

    let own_id = input.steps.iter().find_map(|s| match s {
        Step::Sign { id, .. } => Some(id.as_str()),
        _ => None,
    });
    let content_type = input.content_type.as_deref();
    accepts_what_it_signs(
        &verifier,
        own_id.unwrap_or("evt_fuzz"),
        input.body,
        content_type,
        now,
    );

    let mut headers = HeaderMap::new();
    let mut body = Cow::Borrowed(input.body);
    let mut query = input.query.clone();
    for step in &input.steps {
        match *step {
            Step::Sign { ref id, at: signed } => {
                let Some(signed) = at(signed.unwrap_or(now_secs)) else {
                    continue;
                };
                if let Ok(signed) = verifier.sign_request(id, signed, &body, content_type) {
                    for (name, value) in &signed.headers {
                        headers.insert(name.clone(), value.clone());
                    }
                    if signed.query.is_some() {
                        query = signed.query;
                    }
                    body = Cow::Owned(signed.body);
                }
            }
            Step::Append(name, value) | Step::Set(name, value) => {
                let (Ok(name), Ok(value)) =
                    (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
                else {
                    continue;
                };
                if matches!(step, Step::Set(..)) {
                    headers.insert(name, value);
                } else {
                    headers.append(name, value);
                }
            }
            Step::Drop(name) => {
                if let Ok(name) = HeaderName::from_bytes(name) {
                    headers.remove(name);
                }
            }
        }
    }
    check(&verifier, &headers, &body, query.as_deref(), now);
}

/// Whether the signature covers the body's bytes, so that any other bytes must be refused. Not
/// where [`Scheme::signs_body`] says so, nor for a Twilio form (a request without `bodySHA256`):
/// Twilio signs the form's distinct parameters, as its SDK checks them, so a repeated pair or
/// another encoding of the same parameters verifies.
fn covers_bytes(scheme: &Scheme, query: Option<&str>) -> bool {
    let twilio_form = matches!(scheme, Scheme::Twilio(_))
        && !query.is_some_and(|q| q.split('&').any(|p| p.starts_with("bodySHA256=")));
    scheme.signs_body() && !twilio_form
}

/// The bytes of `body` with one bit changed (or one byte added to an empty body).
fn tampered(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    match out.get_mut(body.len() / 2) {
        Some(b) => *b ^= 0x01,
        None => out.push(b'x'),
    }
    out
}

/// What the HTTP/1.1 transport does to a header value on its way to the gateway: hyper hands the
/// gateway each value without the whitespace around it.
fn as_received(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_bytes(value.as_bytes().trim_ascii()) {
            out.append(name.clone(), value);
        }
    }
    out
}

/// A delivery signed by [`Verifier::sign_request`] and sent over HTTP verifies: at worst its
/// event id is unusable (400), never its signature (401). Where the signature covers the body,
/// the same request with a tampered body is refused as a bad signature.
fn accepts_what_it_signs(
    verifier: &Verifier,
    id: &str,
    body: &[u8],
    content_type: Option<&str>,
    now: SystemTime,
) {
    let Ok(signed) = verifier.sign_request(id, now, body, content_type) else {
        return;
    };
    let headers = as_received(&signed.headers);
    let (body, query) = (signed.body.as_slice(), signed.query.as_deref());
    match verify(verifier, &headers, body, query, now) {
        Ok(v) => {
            if verifier.scheme().signs_timestamp() {
                assert_eq!(v.signed_at, Some(now), "signed_at of a fresh signature");
            }
        }
        Err(e) => assert_eq!(
            e.status(),
            400,
            "{}: a delivery signed by Verifier::sign is refused: {} ({e})",
            verifier.scheme(),
            e.kind()
        ),
    }
    if covers_bytes(verifier.scheme(), query) {
        let err = verify(verifier, &headers, &tampered(body), query, now).err();
        assert_eq!(
            err.as_ref().map(|e| e.kind()),
            Some("bad_signature"),
            "{}: a signed delivery with a tampered body: {err:?}",
            verifier.scheme()
        );
    }
}

const REFUSED: &[&str] = &[
    "missing_header",
    "malformed_header",
    "bad_signature",
    "stale_timestamp",
    "future_timestamp",
    "malformed_body",
    "bad_claim",
    "unknown_key",
    "untrusted_url",
    "bad_credentials",
];

/// Whether the signature covers the body: not Pub/Sub's, whose token authenticates the sender
/// only (TLS carries the body).
/// Verifies as the gateway does: the document the scheme names (SNS's certificate: the test
/// one, whatever the URL) passed in.
fn verify(
    verifier: &Verifier,
    headers: &HeaderMap,
    body: &[u8],
    query: Option<&str>,
    now: SystemTime,
) -> Result<idemgate_providers::Verified, VerifyError> {
    let delivery = Delivery::new(headers, body).with_query(query);
    match verifier.needs(&delivery)? {
        None => verifier.verify_delivery(&delivery, now),
        Some(needed) => verifier.verify_delivery(
            &delivery.with_document(&needed.url, SNS_CERT.as_bytes()),
            now,
        ),
    }
}
const UNUSABLE: &[&str] = &["missing_event_id", "invalid_event_id", "invalid_json"];

/// The properties of any answer to any request.
fn check(
    verifier: &Verifier,
    headers: &HeaderMap,
    body: &[u8],
    query: Option<&str>,
    now: SystemTime,
) {
    let scheme = verifier.scheme();
    match verify(verifier, headers, body, query, now) {
        Err(e) => {
            let kind = e.kind();
            match e.status() {
                401 => assert!(REFUSED.contains(&kind), "{scheme}: 401 with kind {kind}"),
                400 => assert!(UNUSABLE.contains(&kind), "{scheme}: 400 with kind {kind}"),
                other => panic!("{scheme}: status {other} ({kind})"),
            }
            assert!(
                !e.to_string().is_empty(),
                "{scheme}: {kind} displays as nothing"
            );
        }
        Ok(v) => {
            let id = v.event_id.as_str();
            assert!(
                idemgate_core::EventId::new(id).is_ok(),
                "{scheme}: accepted an invalid event id {id:?}"
            );
            match v.signed_at {
                Some(signed) => {
                    assert!(
                        scheme.signs_timestamp(),
                        "{scheme}: signed_at without a timestamp"
                    );
                    // SNS re-sends one signed message for an hour; a token's iat may be old
                    // while the token is valid (only its future is bounded).
                    let gap = match scheme {
                        Scheme::Pubsub(_) => signed.duration_since(now).unwrap_or_default(),
                        Scheme::Sns(_) => now
                            .duration_since(signed)
                            .map(|past| past.saturating_sub(idemgate_providers::sns::RETRY_PERIOD))
                            .unwrap_or_else(|e| e.duration()),
                        _ => now.duration_since(signed).unwrap_or_else(|e| e.duration()),
                    };
                    assert!(
                        gap <= verifier.tolerance(),
                        "{scheme}: accepted a timestamp {}s away, tolerance {}s",
                        gap.as_secs(),
                        verifier.tolerance().as_secs()
                    );
                }
                None => assert!(
                    !scheme.signs_timestamp(),
                    "{scheme}: accepted without a signed timestamp"
                ),
            }
            if covers_bytes(scheme, query) {
                // Every signature the request carries was made for this body: the same headers
                // on other bytes must not verify.
                let err = verify(verifier, headers, &tampered(body), query, now).err();
                assert_eq!(
                    err.as_ref().map(|e| e.kind()),
                    Some("bad_signature"),
                    "{scheme}: accepted, yet a tampered body gives {err:?}"
                );
            }
        }
    }
}
