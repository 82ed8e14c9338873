//! What the gateway does at the connection level, over raw TCP: an oversized body refused from
//! its `Content-Length` alone, keep-alive kept (or honestly ended) after an early answer, the
//! connection cap, the header timeout, and bytes that are not UTF-8 where an event id goes.

mod support;

use std::time::{Duration, Instant, SystemTime};

use support::{Behaviour, Downstream, Gateway, sign};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP/1.1 answer read off a raw connection.
#[derive(Debug)]
struct Raw {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Reads one answer (head and a `Content-Length` body) within `within`.
async fn read_answer(conn: &mut TcpStream, within: Duration) -> Result<Raw, String> {
    let mut buf = Vec::new();
    let deadline = Instant::now() + within;
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, conn.read(&mut chunk)).await {
            Err(_) => return Err(format!("no answer within {within:?}")),
            Ok(Ok(0)) => return Err("connection closed before an answer".into()),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(format!("read failed: {e}")),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, conn.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => body.extend_from_slice(&chunk[..n]),
            _ => return Err("the body did not arrive".into()),
        }
    }
    Ok(Raw { status, head, body })
}

/// Whether the peer closed the connection within `within` (reads nothing more).
async fn closed_within(conn: &mut TcpStream, within: Duration) -> bool {
    let mut chunk = [0u8; 1024];
    matches!(
        tokio::time::timeout(within, conn.read(&mut chunk)).await,
        Ok(Ok(0) | Err(_))
    )
}

const STRIPE: &str =
    "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_oversized_body_is_refused_before_it_is_sent() {
    let gw = Gateway::start(&format!(
        "api_tokens = [\"worker-token-0123456789\"]\n{STRIPE}"
    ))
    .await;
    for (path, length) in [
        ("/hooks/stripe-live", (1u64 << 20) + 1),
        ("/hooks/stripe-live", 1_000_000_000_000),
        ("/v1/claims", (1u64 << 20) + 1),
        ("/hooks/no-such-source", 1_000_000_000_000),
    ] {
        let mut conn = TcpStream::connect(gw.addr).await.unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
        );
        conn.write_all(request.as_bytes()).await.unwrap();
        // Only the headers were sent: the answer must not wait for the body.
        let answer = read_answer(&mut conn, Duration::from_secs(2))
            .await
            .unwrap_or_else(|e| panic!("{path} with content-length {length}: {e}"));
        assert_eq!(answer.status, 413, "{path}: {}", answer.head);
        assert_eq!(answer.header("idemgate-outcome"), Some("body_too_large"));
        assert_eq!(answer.header("connection"), Some("close"));
        assert_eq!(
            answer.header("content-type"),
            Some("application/problem+json")
        );
        assert_eq!(answer.json()["type"], "urn:idemgate:problem:body_too_large");
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_refusals_keep_the_connection_or_say_they_close_it() {
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&format!("{STRIPE}forward_url = \"{}\"\n", down.url)).await;
    let mut conn = TcpStream::connect(gw.addr).await.unwrap();
    let body = r#"{"id":"evt_1","object":"event"}"#;
    // Unknown source, then a missing signature, each with a small body: refused from the headers,
    // the small body read and dropped, so the connection carries on.
    for (path, expect, outcome) in [
        ("/hooks/no-such-source", 404, "unknown_source"),
        ("/hooks/stripe-live", 401, "missing_header"),
        ("/hooks/no-such-source", 404, "unknown_source"),
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        conn.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut conn, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(answer.status, expect, "{}", answer.head);
        assert_eq!(answer.header("idemgate-outcome"), Some(outcome));
        assert_ne!(answer.header("connection"), Some("close"), "{path}");
    }
    // Then a good delivery on the same connection.
    let signed = sign(
        &gw,
        "stripe-live",
        "evt_1",
        SystemTime::now(),
        body.as_bytes(),
    );
    let mut request = format!(
        "POST /hooks/stripe-live HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in &signed {
        request.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    conn.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut conn, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        (answer.status, answer.header("idemgate-outcome")),
        (200, Some("forwarded"))
    );

    // A route that answers without reading the body says so, and closes.
    let mut conn = TcpStream::connect(gw.addr).await.unwrap();
    conn.write_all(
        b"POST /no/such/route HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\npartial",
    )
    .await
    .unwrap();
    let answer = read_answer(&mut conn, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(answer.status, 404);
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(closed_within(&mut conn, Duration::from_secs(2)).await);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_utf8_event_id_header_is_a_bad_event_id() {
    let gw = Gateway::start(
        "api_tokens = [\"worker-token-0123456789\"]\n[[source]]\nname = \"bus\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_header = \"x-event-id\"\n",
    )
    .await;
    let mut conn = TcpStream::connect(gw.addr).await.unwrap();
    let request = b"POST /hooks/bus HTTP/1.1\r\nhost: x\r\nauthorization: Bearer worker-token-0123456789\r\ncontent-length: 2\r\nx-event-id: evt-\xff\xfe\r\n\r\n{}".to_vec();
    conn.write_all(&request).await.unwrap();
    let answer = read_answer(&mut conn, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(answer.status, 400, "{}", answer.head);
    assert_eq!(answer.header("idemgate-outcome"), Some("invalid_event_id"));
    assert!(
        answer.json()["detail"]
            .as_str()
            .unwrap()
            .contains("not UTF-8")
    );
    // Nothing was stored.
    use idemgate_core::store::Stats;
    let store = idemgate_sqlite::SqliteStore::open(gw.data_dir()).unwrap();
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.live, stats.history_rows), (0, 0));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_refused_at_once() {
    let gw = Gateway::start(&format!(
        "{STRIPE}[limits]\nmax_connections = 3\nheader_timeout = \"30s\"\n"
    ))
    .await;
    // Three idle connections hold every slot.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = TcpStream::connect(gw.addr).await.unwrap();
        conn.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut conn, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
        held.push(conn);
    }
    // A fourth is answered 503 without sending anything, and closed.
    let started = Instant::now();
    let mut extra = TcpStream::connect(gw.addr).await.unwrap();
    let answer = read_answer(&mut extra, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(answer.status, 503);
    assert_eq!(
        answer.header("idemgate-outcome"),
        Some("too_many_connections")
    );
    assert_eq!(answer.header("retry-after"), Some("1"));
    assert_eq!(
        answer.json()["type"],
        "urn:idemgate:problem:too_many_connections"
    );
    assert!(closed_within(&mut extra, Duration::from_secs(2)).await);
    // A held connection still works; once one closes, a new one is served.
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_answer(&mut held[0], Duration::from_secs(5))
            .await
            .unwrap()
            .status,
        200
    );
    drop(held.pop());
    let mut served = None;
    for _ in 0..50 {
        let mut conn = TcpStream::connect(gw.addr).await.unwrap();
        conn.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut conn, Duration::from_secs(5))
            .await
            .unwrap();
        if answer.status == 200 {
            served = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metrics = String::from_utf8(served.expect("a freed slot is used again").body).unwrap();
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("idemgate_connections_refused_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(refused >= 1, "{metrics}");
    drop(held);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_and_idle_connections_are_closed_after_the_header_timeout() {
    let gw = Gateway::start(&format!(
        "{STRIPE}[limits]\nheader_timeout = \"300ms\"\nrequest_timeout = \"30s\"\n"
    ))
    .await;
    // Half a request line, then nothing.
    let mut slow = TcpStream::connect(gw.addr).await.unwrap();
    slow.write_all(b"POST /hooks/stripe-live HTTP/1.1\r\nhost:")
        .await
        .unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut slow, Duration::from_secs(5)).await);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    // An idle keep-alive connection goes the same way after its answer.
    let mut idle = TcpStream::connect(gw.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(
        read_answer(&mut idle, Duration::from_secs(5))
            .await
            .unwrap()
            .status,
        200
    );
    assert!(closed_within(&mut idle, Duration::from_secs(5)).await);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_slower_than_the_request_timeout_gets_408_and_a_close() {
    let gw = Gateway::start(&format!("{STRIPE}[limits]\nrequest_timeout = \"300ms\"\n")).await;
    let mut conn = TcpStream::connect(gw.addr).await.unwrap();
    conn.write_all(
        b"POST /hooks/stripe-live HTTP/1.1\r\nhost: x\r\nstripe-signature: t=1,v1=00\r\ncontent-length: 50\r\n\r\n{\"id\":",
    )
    .await
    .unwrap();
    let answer = read_answer(&mut conn, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(answer.status, 408);
    assert_eq!(answer.header("idemgate-outcome"), Some("request_timeout"));
    assert_eq!(answer.header("connection"), Some("close"));
    assert_eq!(
        answer.json()["type"],
        "urn:idemgate:problem:request_timeout"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_pressure_new_connections_get_a_short_header_timeout() {
    let gw = Gateway::start(&format!(
        "{STRIPE}[limits]\nmax_connections = 4\nheader_timeout = \"30s\"\n"
    ))
    .await;
    let mut slow = Vec::new();
    for _ in 0..3 {
        let mut conn = TcpStream::connect(gw.addr).await.unwrap();
        conn.write_all(b"POST /hooks/stripe-live HTTP/1.1\r\nhost:")
            .await
            .unwrap();
        slow.push(conn);
    }
    // Three of four slots are taken: the next slow client has two seconds, not thirty.
    let mut pressed = TcpStream::connect(gw.addr).await.unwrap();
    pressed
        .write_all(b"POST /hooks/stripe-live HTTP/1.1\r\nhost:")
        .await
        .unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut pressed, Duration::from_secs(5)).await);
    assert!(started.elapsed() < Duration::from_secs(4));
    // The first ones, accepted before the pressure, keep their thirty seconds.
    assert!(!closed_within(&mut slow[0], Duration::from_millis(500)).await);
    drop(slow);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_an_outcome_and_every_error_a_problem() {
    let gw = Gateway::start(&format!(
        "api_tokens = [\"worker-token-0123456789\"]\n{STRIPE}"
    ))
    .await;
    let auth = "authorization: Bearer worker-token-0123456789\r\n";
    let big_header = format!("x-padding: {}\r\n", "a".repeat(600 * 1024));
    let cases: Vec<(String, u16, &str)> = vec![
        // Every route, as it answers a plain request.
        (
            "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n".into(),
            200,
            "healthy",
        ),
        (
            "GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n".into(),
            200,
            "metrics",
        ),
        (
            "GET /openapi.json HTTP/1.1\r\nhost: x\r\n\r\n".into(),
            200,
            "openapi",
        ),
        (
            "POST /hooks/stripe-live HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}".into(),
            401,
            "missing_header",
        ),
        (
            "POST /v1/claims HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}".into(),
            401,
            "unauthorized",
        ),
        (
            format!("POST /v1/claims HTTP/1.1\r\nhost: x\r\n{auth}content-length: 2\r\n\r\n{{}}"),
            400,
            "invalid_json",
        ),
        (
            format!(
                "POST /v1/claims/stripe-live/e1/complete HTTP/1.1\r\nhost: x\r\n{auth}content-length: 13\r\n\r\n{{\"token\":\"x\"}}"
            ),
            400,
            "invalid_token",
        ),
        (
            format!(
                "POST /v1/claims/stripe-live/e1/release HTTP/1.1\r\nhost: x\r\n{auth}content-length: 13\r\n\r\n{{\"token\":\"x\"}}"
            ),
            400,
            "invalid_token",
        ),
        (
            format!("GET /v1/events/stripe-live/e1 HTTP/1.1\r\nhost: x\r\n{auth}\r\n"),
            200,
            "lookup",
        ),
        // Unknown routes and methods.
        (
            "GET /nowhere HTTP/1.1\r\nhost: x\r\n\r\n".into(),
            404,
            "not_found",
        ),
        (
            "GET /hooks/stripe-live HTTP/1.1\r\nhost: x\r\n\r\n".into(),
            405,
            "method_not_allowed",
        ),
        (
            "DELETE /v1/claims HTTP/1.1\r\nhost: x\r\n\r\n".into(),
            405,
            "method_not_allowed",
        ),
        // A path that does not decode.
        (
            format!("GET /v1/events/%FF/e1 HTTP/1.1\r\nhost: x\r\n{auth}\r\n"),
            400,
            "invalid_path",
        ),
        // What hyper refuses before any route runs.
        ("NOT HTTP AT ALL\r\n\r\n".into(), 400, "malformed_request"),
        (
            "GET /healthz HTTP/1.1\r\nhost: x\r\nbad header line\r\n\r\n".into(),
            400,
            "malformed_request",
        ),
        (
            format!("GET /healthz HTTP/1.1\r\nhost: x\r\n{big_header}\r\n"),
            431,
            "headers_too_large",
        ),
    ];
    for (request, status, outcome) in cases {
        let mut conn = TcpStream::connect(gw.addr).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        let line = request
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect::<String>();
        let answer = read_answer(&mut conn, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(answer.status, status, "{line}: {}", answer.head);
        assert_eq!(answer.header("idemgate-outcome"), Some(outcome), "{line}");
        if status >= 400 {
            assert_eq!(
                answer.header("content-type"),
                Some("application/problem+json"),
                "{line}"
            );
            let problem = answer.json();
            assert_eq!(
                problem["type"],
                format!("urn:idemgate:problem:{outcome}"),
                "{line}"
            );
            assert_eq!(problem["status"], status, "{line}");
            assert!(
                problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
                "{line}"
            );
        }
    }
    gw.stop().await;
}

/// A client that writes its whole (too large) body before it reads anything, as Node's fetch
/// does: the gateway refuses it from its `Content-Length` at once, and reads and drops the rest
/// of the body for a while instead of closing on it, so the 413 reaches the client rather than a
/// reset connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_413_reaches_a_client_that_writes_its_whole_body_first() {
    let gw = Gateway::start(
        "[limits]\nbody_limit = 65536\n[[source]]\nname = \"s\"\nprovider = \"github\"\nsecrets = [\"x\"]\nbody_limit = 65536\n",
    )
    .await;
    let size = 8 << 20;
    let mut conn = TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST /hooks/s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-hub-signature-256: sha256=00\r\ncontent-length: {size}\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0;
    while sent < size {
        conn.write_all(&chunk)
            .await
            .unwrap_or_else(|e| panic!("the connection broke after {sent} bytes: {e}"));
        sent += chunk.len();
    }
    let raw = read_answer(&mut conn, Duration::from_secs(5))
        .await
        .expect("the answer, after the whole body was written");
    assert_eq!(raw.status, 413, "{}", raw.head);
    assert_eq!(raw.header("connection"), Some("close"));
    gw.stop().await;
}

/// Sends a request's head only (announcing `length` bytes of body), and reads the answer.
async fn head_only(gw: &Gateway, path: &str, extra: &str, length: usize) -> Result<Raw, String> {
    let mut conn = TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{extra}content-length: {length}\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    read_answer(&mut conn, Duration::from_secs(2)).await
}

/// What the headers already refuse is refused before a byte of the body is read (so nobody can
/// make the gateway hold bodies for a source that does not exist, or without the headers its
/// signature travels in): the answer comes while the body has not even been sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_are_not_read_for_what_the_headers_already_refuse() {
    let gw = Gateway::start(
        "api_tokens = [\"bus-token-0123456789\"]\n[[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"x\"]\n[[source]]\nname = \"bus\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_header = \"X-Event-Id\"\n[[source]]\nname = \"inside\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nallow_from = [\"10.9.8.0/24\"]\n",
    )
    .await;
    let length = 512 * 1024;
    for (path, extra, status, outcome) in [
        ("/hooks/nosuch", "", 404, "unknown_source"),
        ("/hooks/gh", "", 401, "missing_header"),
        ("/hooks/bus", "x-event-id: e-1\r\n", 401, "unauthorized"),
        (
            "/hooks/inside",
            "stripe-signature: t=1,v1=00\r\n",
            403,
            "forbidden_peer",
        ),
    ] {
        let raw = head_only(&gw, path, extra, length)
            .await
            .unwrap_or_else(|e| panic!("{path}: no answer before the body: {e}"));
        assert_eq!(raw.status, status, "{path}: {}", raw.head);
        assert_eq!(raw.header("idemgate-outcome"), Some(outcome), "{path}");
    }
    // With its signature header, the body is read (and the signature then checked).
    assert!(
        head_only(
            &gw,
            "/hooks/gh",
            "x-hub-signature-256: sha256=00\r\n",
            length
        )
        .await
        .is_err(),
        "answered before the body it must check"
    );
    gw.stop().await;
}

/// The bytes of bodies held at once are bounded across connections: a body that does not fit
/// in what the others hold is answered 503 at once, and fits again once they are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_held_at_once_are_bounded_by_the_budget() {
    let gw = Gateway::start(
        "[limits]\nbody_budget = 307200\n[[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"x\"]\nbody_limit = 262144\n",
    )
    .await;
    let sig = "x-hub-signature-256: sha256=00\r\nx-github-delivery: d-1\r\n";
    let length = 200 * 1024;
    // One body in progress holds 200 KiB of the 300 KiB.
    let mut first = TcpStream::connect(gw.addr).await.unwrap();
    first
        .write_all(
            format!("POST /hooks/gh HTTP/1.1\r\nhost: x\r\n{sig}content-length: {length}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    first.write_all(&vec![b' '; 1024]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A second does not fit: refused at once.
    let raw = head_only(&gw, "/hooks/gh", sig, length).await.unwrap();
    assert_eq!(raw.status, 503, "{}", raw.head);
    assert_eq!(raw.header("idemgate-outcome"), Some("body_budget"));
    assert!(raw.header("retry-after").is_some());
    // The first is done (its signature is wrong: 401): its share comes back.
    first.write_all(&vec![b' '; length - 1024]).await.unwrap();
    let done = read_answer(&mut first, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(done.status, 401, "{}", done.head);
    let mut again = TcpStream::connect(gw.addr).await.unwrap();
    again
        .write_all(
            format!("POST /hooks/gh HTTP/1.1\r\nhost: x\r\n{sig}content-length: {length}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    again.write_all(&vec![b' '; length]).await.unwrap();
    let raw = read_answer(&mut again, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(raw.status, 401, "read and checked: {}", raw.head);
    gw.stop().await;
}
