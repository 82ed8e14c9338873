//! `idemgate send SOURCE`: a delivery signed exactly as the source's sender would sign it, sent to
//! a running gateway. The way to try a configuration in one line.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idemgate_gateway::Config;
use serde_json::{Value, json};

use crate::Usage;

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// The source to send to (a `[[source]]` name in the config).
    source: String,
    /// The configuration file (its sources, their secrets and `listen`) [default: the demo's].
    #[arg(long, env = "IDEMGATE_CONFIG")]
    config: Option<PathBuf>,
    /// The gateway's base URL [default: http:// and the config's `listen`].
    #[arg(long)]
    url: Option<String>,
    /// The path posted to, after the base URL [default: /hooks/SOURCE, the gateway's]. For an
    /// app of your own that receives the source elsewhere (the library's `IdempotencyLayer`).
    #[arg(long, value_name = "/PATH")]
    path: Option<String>,
    /// Sign with this secret instead of the source's first one: to try a rotation (the new
    /// secret, before or after the config lists it) or a wrong secret (the gateway answers 401).
    #[arg(long, value_name = "SECRET")]
    secret: Option<String>,
    /// The event id [default: a new one]. Where the sender puts ids in the body, it is written
    /// there (a --body must already hold it, or hold the same).
    #[arg(long)]
    event_id: Option<String>,
    /// The body: a file, or - for standard input [default: a small JSON event].
    #[arg(long, value_name = "FILE|-")]
    body: Option<PathBuf>,
    /// The body's content type. Twilio signs an `application/x-www-form-urlencoded` body by its
    /// parameters and any other by a `bodySHA256` parameter added to the URL's query.
    #[arg(long, default_value = "application/json")]
    content_type: String,
    /// Send it this many times (each signed afresh, as senders do on a retry).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    repeat: u32,
    /// Print one JSON object per answer.
    #[arg(long)]
    json: bool,
    /// pubsub and sns: the test signing key (RSA, PKCS#8 PEM) standing in for Google's or
    /// Amazon's, whose public half the source trusts (a key of its `jwks_file`, or the
    /// certificate at --signing-cert-url).
    #[arg(long, value_name = "FILE")]
    signing_key: Option<PathBuf>,
    /// pubsub: the token's key id (`kid`) [default: the first key's in the source's `jwks_file`].
    #[arg(long)]
    key_id: Option<String>,
    /// sns: the `SigningCertURL` the message names: the certificate of --signing-key, served
    /// over https on a host the source's `cert_hosts` allow.
    #[arg(long, value_name = "URL")]
    signing_cert_url: Option<String>,
}

pub(crate) async fn send(args: SendArgs) -> anyhow::Result<()> {
    let config = Config::load(args.config.as_deref(), crate::serve::DEMO)
        .map_err(|e| Usage(e.to_string()))?;
    let Some(sc) = config.sources.iter().find(|s| s.name == args.source) else {
        let known: Vec<_> = config.sources.iter().map(|s| s.name.as_str()).collect();
        return Err(Usage(format!(
            "no source {:?} in the config (configured: {})",
            args.source,
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ))
        .into());
    };
    // Signed with the first secret, as the sender signs before a rotation completes, or with
    // the one given.
    let mut first = sc.clone();
    first.secrets.truncate(1);
    let mut signer = idemgate_gateway::verifier(&first).map_err(|e| Usage(e.to_string()))?;
    if let Some(secret) = &args.secret {
        if secret.trim().is_empty() {
            return Err(Usage("--secret: empty; give the secret to sign with".to_owned()).into());
        }
        let scheme = signer.scheme();
        if !scheme.is_signed() {
            return Err(Usage(format!(
                "--secret: source {:?} ({}) takes unsigned deliveries from holders of an API \
                 token; there is nothing to sign",
                sc.name, sc.provider
            ))
            .into());
        }
        if matches!(
            scheme,
            idemgate::Scheme::Pubsub(_) | idemgate::Scheme::Sns(_)
        ) {
            return Err(Usage(format!(
                "--secret: source {:?} ({}) is signed with the sender's own key: give a test \
                 key with --signing-key FILE instead",
                sc.name, sc.provider
            ))
            .into());
        }
        first.secrets = vec![secret.clone()];
        signer = idemgate_gateway::verifier(&first)
            .map_err(|e| Usage(format!("--secret cannot sign for {:?}: {e}", sc.name)))?;
    }
    // A `none` source's senders present a token with the `send` scope.
    let bearer = (!signer.scheme().is_signed())
        .then(|| {
            config
                .api_tokens
                .iter()
                .find(|t| t.allows(idemgate_gateway::config::Scope::Send))
                .map(|t| t.token.clone())
        })
        .flatten();

    // Pub/Sub and SNS sign with keys no verifier holds: a test key stands in for the sender's.
    let external = match signer.scheme() {
        idemgate::Scheme::Pubsub(_) | idemgate::Scheme::Sns(_) => {
            Some(External::new(&args, sc).map_err(Usage)?)
        }
        _ => None,
    };
    let (event_id, body) = if signer.scheme().is_batch() {
        batch(&args)?
    } else if external.is_some() {
        // The id goes into the envelope the sender wraps the payload in.
        delivery(&args, None)?
    } else {
        delivery(&args, signer.scheme().body_event_id())?
    };
    let base = match &args.url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("http://{}", local(&config.listen)),
    };
    if base.contains('?') {
        return Err(Usage(format!(
            "--url: {base:?}: give the gateway's base URL, without a query"
        ))
        .into());
    }
    let path = match &args.path {
        Some(path) => checked_path(path).map_err(Usage)?,
        None => format!("/hooks/{}", sc.name),
    };
    let url = format!("{base}{path}");
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| Usage(format!("--url: {url:?} is not a URL: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(Usage(format!("--url: {url:?}: only http:// is supported")).into());
    }

    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    // Mailgun resends the first attempt's signature block on a retry; every other sender signs
    // each attempt afresh.
    let first_attempt = SystemTime::now();
    let resigns = !matches!(signer.scheme(), idemgate::Scheme::Mailgun(_));
    let mut failed = 0;
    for n in 1..=args.repeat {
        let at = if resigns {
            SystemTime::now()
        } else {
            first_attempt
        };
        // The whole request: Twilio signs a query parameter the URL must carry, Mailgun writes
        // its signature into the body.
        let signed = match &external {
            // A retry carries the first attempt's envelope (its publishTime or Timestamp).
            Some(external) => external.sign(&event_id, at, first_attempt, &body),
            None => signer.sign_request(&event_id, at, &body, Some(&args.content_type)),
        }
        .map_err(|e| Usage(format!("cannot sign for {:?}: {e}", sc.name)))?;
        let target = match &signed.query {
            Some(query) => format!("{url}?{query}")
                .parse::<hyper::Uri>()
                .map_err(|e| Usage(format!("cannot send to {url}?{query}: {e}")))?,
            None => uri.clone(),
        };
        let mut req = Request::post(target).header("content-type", args.content_type.as_str());
        for (name, value) in &signed.headers {
            req = req.header(name, value);
        }
        if let Some(token) = &bearer {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let req = req.body(Full::new(Bytes::from(signed.body)))?;
        let response = tokio::time::timeout(Duration::from_secs(60), client.request(req))
            .await
            .with_context(|| format!("no answer from {url} within 60 s"))?
            .with_context(|| format!("cannot send to {url} (is `idemgate serve` running?)"))?;
        let status = response.status().as_u16();
        let outcome = response
            .headers()
            .get("idemgate-outcome")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        let bytes = response.into_body().collect().await?.to_bytes();
        let answer: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        if !(200..300).contains(&status) {
            failed += 1;
        }
        if args.json {
            outln!(
                "{}",
                json!({ "n": n, "event_id": event_id, "status": status, "outcome": outcome, "answer": answer })
            );
        } else {
            outln!("{n:>3}  {status} {outcome:<16} {}", summary(&answer));
        }
    }
    if !args.json {
        outln!("event {event_id} to {url}");
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} answers were not 2xx", args.repeat);
    }
    Ok(())
}

/// A Pub/Sub push or an SNS notification, signed with a test key standing in for the sender's.
enum External {
    Pubsub {
        key: Vec<u8>,
        kid: String,
        audience: String,
        email: Option<String>,
    },
    Sns {
        key: Vec<u8>,
        cert_url: String,
    },
}

impl External {
    /// The signing key and what the source expects of the message, from the flags and the
    /// source's config; a missing flag is named.
    fn new(args: &SendArgs, sc: &idemgate_gateway::config::SourceConfig) -> Result<Self, String> {
        let Some(path) = &args.signing_key else {
            return Err(format!(
                "source {:?} ({}) is signed with the sender's own key: give a test key with \
                 --signing-key FILE (RSA, PKCS#8 PEM) whose public half the source trusts",
                sc.name, sc.provider
            ));
        };
        let key =
            std::fs::read(path).map_err(|e| format!("--signing-key {}: {e}", path.display()))?;
        if sc.kind() == Some(idemgate::Provider::Sns) {
            let Some(cert_url) = args.signing_cert_url.clone() else {
                return Err(format!(
                    "source {:?} (sns) fetches the certificate the message names: give \
                     --signing-cert-url https://... (the certificate of --signing-key, on a host \
                     its cert_hosts allow)",
                    sc.name
                ));
            };
            return Ok(Self::Sns { key, cert_url });
        }
        let kid = match (&args.key_id, &sc.jwks_file) {
            (Some(kid), _) => kid.clone(),
            (None, Some(file)) => first_kid(file)?,
            (None, None) => {
                return Err(format!(
                    "source {:?} has no jwks_file to take a key id from: give --key-id",
                    sc.name
                ));
            }
        };
        Ok(Self::Pubsub {
            key,
            kid,
            audience: sc.audience.clone().unwrap_or_default(),
            email: sc.service_account.clone(),
        })
    }

    /// The delivery of `payload` as event `id`, first published at `first` and sent at `at`:
    /// Pub/Sub signs a fresh token for each attempt around the same message, SNS resends the same
    /// signed message.
    fn sign(
        &self,
        id: &str,
        at: SystemTime,
        first: SystemTime,
        payload: &[u8],
    ) -> Result<idemgate_providers::Signed, idemgate_providers::SignError> {
        use base64::Engine as _;
        let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let time = humantime::format_rfc3339_millis(first).to_string();
        let mut headers = http::HeaderMap::new();
        let header = |v: &str| {
            http::HeaderValue::from_str(v).map_err(|_| idemgate_providers::SignError::Message {
                why: format!("{v:?} cannot be sent in a header"),
            })
        };
        let body = match self {
            Self::Pubsub {
                key,
                kid,
                audience,
                email,
            } => {
                let mut claims = json!({
                    "aud": audience, "iss": "https://accounts.google.com", "sub": "idemgate-send",
                    "iat": secs, "exp": secs + 3600,
                });
                if let Some(email) = email {
                    claims["email"] = json!(email);
                    claims["email_verified"] = json!(true);
                }
                let token = idemgate_providers::pubsub::sign_token(key, kid, &claims)?;
                headers.insert(
                    http::header::AUTHORIZATION,
                    header(&format!("Bearer {token}"))?,
                );
                json!({
                    "message": {
                        "data": base64::engine::general_purpose::STANDARD.encode(payload),
                        "messageId": id,
                        "publishTime": time,
                        "attributes": {},
                    },
                    "subscription": "projects/idemgate/subscriptions/idemgate-send",
                })
            }
            Self::Sns { key, cert_url } => {
                let topic = "arn:aws:sns:us-east-1:000000000000:idemgate-send";
                let message: serde_json::Map<String, Value> = [
                    ("Type", json!("Notification")),
                    ("MessageId", json!(id)),
                    ("TopicArn", json!(topic)),
                    ("Message", json!(String::from_utf8_lossy(payload))),
                    ("Timestamp", json!(time)),
                    ("SignatureVersion", json!("2")),
                    ("SigningCertURL", json!(cert_url)),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
                headers.insert("x-amz-sns-message-type", header("Notification")?);
                headers.insert("x-amz-sns-message-id", header(id)?);
                headers.insert("x-amz-sns-topic-arn", header(topic)?);
                Value::Object(idemgate_providers::sns::sign(key, &message)?)
            }
        };
        Ok(idemgate_providers::Signed::new(
            headers,
            serde_json::to_vec(&body).expect("a JSON value serializes"),
        ))
    }
}

/// The `kid` of the first key in a JWKS file.
fn first_kid(file: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read(file).map_err(|e| format!("jwks_file {}: {e}", file.display()))?;
    let doc: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("jwks_file {}: not JSON: {e}", file.display()))?;
    doc.pointer("/keys/0/kid")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| {
            format!(
                "jwks_file {}: its first key has no kid: give --key-id",
                file.display()
            )
        })
}

/// What the gateway said, in a few words: the attempt and the downstream's status, or the
/// problem's detail; an answer that is not JSON (an app's own), its first line.
fn summary(answer: &Value) -> String {
    if let Value::String(text) = answer {
        let line = text.lines().next().unwrap_or_default();
        return match line.char_indices().nth(80) {
            Some((end, _)) => format!("{}...", &line[..end]),
            None => line.to_owned(),
        };
    }
    let mut parts = Vec::new();
    for key in ["attempt", "downstream_status", "first_seen", "completion"] {
        if let Some(v) = answer.get(key).filter(|v| !v.is_null()) {
            parts.push(format!(
                "{key}={}",
                v.as_str().map_or(v.to_string(), str::to_owned)
            ));
        }
    }
    if let Some(detail) = answer.get("detail").and_then(Value::as_str) {
        parts.push(detail.to_owned());
    }
    parts.join(" ")
}

/// The event id and body to send.
fn delivery(args: &SendArgs, pointer: Option<&str>) -> anyhow::Result<(String, Vec<u8>)> {
    let given = match &args.body {
        None => None,
        Some(path) if path.as_os_str() == "-" => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("reading the body from stdin")?;
            Some(buf)
        }
        Some(path) => Some(
            std::fs::read(path).map_err(|e| Usage(format!("--body {}: {e}", path.display())))?,
        ),
    };
    let fresh = || {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("evt_send_{nanos:x}")
    };
    match (given, pointer) {
        // The id travels in a header: any body goes.
        (Some(body), None) => Ok((args.event_id.clone().unwrap_or_else(fresh), body)),
        (None, None) => {
            let id = args.event_id.clone().unwrap_or_else(fresh);
            let body = json!({ "type": "idemgate.test", "sent_by": "idemgate send" });
            Ok((id, serde_json::to_vec(&body)?))
        }
        // The id is in the body: read it from a given body.
        (Some(body), Some(pointer)) => {
            let doc: Value = serde_json::from_slice(&body).map_err(|e| {
                Usage(format!(
                    "--body is not JSON ({e}); this source reads its event id at {pointer}"
                ))
            })?;
            let found = match doc.pointer(pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                _ => {
                    return Err(Usage(format!(
                        "--body has no event id at {pointer}, where this source reads it"
                    ))
                    .into());
                }
            };
            match &args.event_id {
                Some(id) if *id != found => Err(Usage(format!(
                    "--event-id {id:?} differs from the body's {found:?} at {pointer}"
                ))
                .into()),
                _ => Ok((found, body)),
            }
        }
        // The id is in the body: write it there.
        (None, Some(pointer)) => {
            let id = args.event_id.clone().unwrap_or_else(fresh);
            let mut doc = json!({ "type": "idemgate.test", "sent_by": "idemgate send" });
            set_pointer(&mut doc, pointer, Value::String(id.clone()));
            Ok((id, serde_json::to_vec(&doc)?))
        }
    }
}

/// A batch source's delivery (SendGrid: a JSON array of events, each with its `sg_event_id`):
/// `--body` as given, or one event with `--event-id` (or a fresh id).
fn batch(args: &SendArgs) -> anyhow::Result<(String, Vec<u8>)> {
    if args.body.is_some() {
        let (_, body) = delivery(args, None)?;
        return Ok(("(the batch's own)".to_owned(), body));
    }
    let (id, _) = delivery(args, None)?;
    let events = json!([{ "event": "processed", "sg_event_id": id, "sent_by": "idemgate send" }]);
    Ok((id, serde_json::to_vec(&events)?))
}

/// Writes `value` at an RFC 6901 `pointer`, creating objects on the way.
fn set_pointer(doc: &mut Value, pointer: &str, value: Value) {
    let mut at = doc;
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    for (i, part) in parts.iter().enumerate() {
        if !at.is_object() {
            *at = json!({});
        }
        let map = at.as_object_mut().expect("an object");
        if i + 1 == parts.len() {
            map.insert(part.clone(), value);
            return;
        }
        at = map.entry(part.clone()).or_insert_with(|| json!({}));
    }
}

/// `--path` as given, if it is one: it starts with `/` and has no query, fragment or spaces.
fn checked_path(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!(
            "--path {path:?}: a path starts with / (such as /webhooks/stripe)"
        ));
    }
    if path.contains(['?', '#']) {
        return Err(format!(
            "--path {path:?}: give the path alone, without a query or fragment"
        ));
    }
    match path.parse::<http::uri::PathAndQuery>() {
        Ok(_) => Ok(path.to_owned()),
        Err(e) => Err(format!(
            "--path {path:?}: not a URL path ({e}); percent-encode what it needs"
        )),
    }
}

/// A listen address as a client reaches it: an unspecified host becomes loopback.
fn local(listen: &str) -> String {
    match listen.rsplit_once(':') {
        Some(("0.0.0.0", port)) => format!("127.0.0.1:{port}"),
        Some(("[::]", port)) => format!("[::1]:{port}"),
        _ => listen.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_are_written_through_nested_objects() {
        let mut doc = json!({ "type": "x" });
        set_pointer(&mut doc, "/data/object/id", json!("evt_1"));
        assert_eq!(doc.pointer("/data/object/id"), Some(&json!("evt_1")));
        set_pointer(&mut doc, "/a~1b", json!(2));
        assert_eq!(doc["a/b"], 2);
    }

    #[test]
    fn a_path_starts_with_a_slash_and_carries_no_query() {
        assert_eq!(
            checked_path("/webhooks/stripe").unwrap(),
            "/webhooks/stripe"
        );
        assert_eq!(checked_path("/").unwrap(), "/");
        let no_slash = checked_path("webhooks/stripe").unwrap_err();
        assert!(no_slash.contains("starts with /"), "{no_slash}");
        let query = checked_path("/hook?x=1").unwrap_err();
        assert!(query.contains("without a query"), "{query}");
        let space = checked_path("/a b").unwrap_err();
        assert!(space.contains("not a URL path"), "{space}");
    }

    #[test]
    fn an_answer_that_is_not_json_is_summed_up_by_its_first_line() {
        assert_eq!(summary(&json!("ok")), "ok");
        assert_eq!(summary(&json!("Not Found\nmore")), "Not Found");
        let long = "é".repeat(100);
        assert_eq!(summary(&json!(long)), format!("{}...", "é".repeat(80)));
        assert_eq!(
            summary(&json!({ "attempt": 1, "detail": "why" })),
            "attempt=1 why"
        );
    }

    #[test]
    fn unspecified_listen_hosts_are_reached_on_loopback() {
        assert_eq!(local("0.0.0.0:8080"), "127.0.0.1:8080");
        assert_eq!(local("[::]:80"), "[::1]:80");
        assert_eq!(local("localhost:8080"), "localhost:8080");
    }
}

#[cfg(test)]
mod external_tests {
    use std::time::{Duration, SystemTime};

    use idemgate_providers::sns::Sns;
    use idemgate_providers::{Delivery, Scheme, Verifier};

    use super::External;

    /// Copies of idemgate-providers' fixtures, kept identical by `.ci/package`: the crate is
    /// packaged alone.
    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sns");

    /// An SNS notification signed with the test key verifies against its certificate as the
    /// gateway checks it, and a retry resends the same message.
    #[test]
    fn an_sns_notification_signed_with_a_test_key_verifies_and_its_retry_is_the_same() {
        let key = std::fs::read(format!("{FIXTURES}/signing-key.pem")).unwrap();
        let cert = std::fs::read(format!("{FIXTURES}/signing-cert.pem")).unwrap();
        let cert_url = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-test.pem";
        let external = External::Sns {
            key,
            cert_url: cert_url.to_owned(),
        };
        let first = SystemTime::now();
        let signed = external
            .sign("msg-1", first, first, br#"{"order":1}"#)
            .unwrap();
        let verifier = Verifier::new(
            Scheme::Sns(Sns::default()),
            vec![],
            Verifier::DEFAULT_TOLERANCE,
        )
        .unwrap();
        let delivery = Delivery::new(&signed.headers, &signed.body);
        let needed = verifier.needs(&delivery).unwrap().expect("the certificate");
        assert_eq!(needed.url, cert_url);
        let verified = verifier
            .verify_delivery(&delivery.with_document(&needed.url, &cert), first)
            .unwrap();
        assert_eq!(verified.event_id.as_str(), "msg-1");

        let retry = external
            .sign(
                "msg-1",
                first + Duration::from_secs(30),
                first,
                br#"{"order":1}"#,
            )
            .unwrap();
        assert_eq!(retry.body, signed.body);

        // Another body under the same signature is refused.
        let mut tampered: serde_json::Value = serde_json::from_slice(&signed.body).unwrap();
        tampered["Message"] = serde_json::json!("{\"order\":2}");
        let tampered = serde_json::to_vec(&tampered).unwrap();
        let delivery = Delivery::new(&signed.headers, &tampered);
        let err = verifier
            .verify_delivery(&delivery.with_document(cert_url, &cert), first)
            .unwrap_err();
        assert_eq!(err.kind(), "bad_signature", "{err}");
    }
}
