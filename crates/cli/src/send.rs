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
    // Signed with the first secret, as the sender signs before a rotation completes.
    let mut first = sc.clone();
    first.secrets.truncate(1);
    let signer = idemgate_gateway::verifier(&first).map_err(|e| Usage(e.to_string()))?;
    let bearer = (!signer.scheme().is_signed())
        .then(|| config.api_tokens.first().cloned())
        .flatten();

    let (event_id, body) = if signer.scheme().is_batch() {
        batch(&args)?
    } else {
        delivery(&args, signer.scheme().body_event_id())?
    };
    let base = match &args.url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => format!("http://{}", local(&config.listen)),
    };
    let url = format!("{base}/hooks/{}", sc.name);
    let uri: hyper::Uri = url
        .parse()
        .map_err(|e| Usage(format!("--url: {url:?} is not a URL: {e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(Usage(format!("--url: {url:?}: only http:// is supported")).into());
    }
    if url.contains('?') {
        return Err(Usage(format!(
            "--url: {url:?}: give the gateway's base URL, without a query"
        ))
        .into());
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
        let signed = signer
            .sign_request(&event_id, at, &body, Some(&args.content_type))
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

/// What the gateway said, in a few words: the attempt and the downstream's status, or the
/// problem's detail.
fn summary(answer: &Value) -> String {
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
    fn unspecified_listen_hosts_are_reached_on_loopback() {
        assert_eq!(local("0.0.0.0:8080"), "127.0.0.1:8080");
        assert_eq!(local("[::]:80"), "[::1]:80");
        assert_eq!(local("localhost:8080"), "localhost:8080");
    }
}
