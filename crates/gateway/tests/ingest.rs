//! Deliveries over real HTTP: every provider, duplicates, failures, concurrency, shutdown.

mod support;

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderValue};
use idemgate_core::store::ClaimStore;
use idemgate_core::{HistoryOutcome, Key};
use support::{Behaviour, Downstream, Gateway, headers, sign};

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// One source per provider, all forwarding to `downstream`.
fn every_provider(downstream: &Downstream) -> String {
    let mut out = String::new();
    for (name, provider, secret, extra) in [
        ("stripe-live", "stripe", "whsec_stripe_test_secret", ""),
        ("github-app", "github", "github-secret", ""),
        ("shop", "shopify", "shpss_secret", ""),
        ("slack-events", "slack", "slack-signing-secret", ""),
        ("std", "standard-webhooks", SW_SECRET, ""),
        ("clerk", "svix", SW_SECRET, ""),
        ("paddle", "paddle", "pdl_ntfset_secret", ""),
        (
            "orders-bus",
            "generic-hmac",
            "bus-secret",
            "retry_window = \"6h\"\nsignature_header = \"X-Signature\"\nsignature_prefix = \"sha256=\"\ntimestamp_header = \"X-Timestamp\"\nevent_id_pointer = \"/data/id\"\n",
        ),
    ] {
        out.push_str(&format!(
            "[[source]]\nname = \"{name}\"\nprovider = \"{provider}\"\nsecrets = [\"{secret}\"]\nforward_url = \"{}\"\n{extra}\n",
            downstream.url
        ));
    }
    out
}

/// A body carrying `id` wherever each provider reads it from the body.
fn body_for(source: &str, id: &str) -> Vec<u8> {
    let v = match source {
        "stripe-live" => serde_json::json!({"id": id, "type": "invoice.paid", "object": "event"}),
        "slack-events" => serde_json::json!({"event_id": id, "type": "event_callback"}),
        "paddle" => serde_json::json!({"event_id": id, "event_type": "transaction.completed"}),
        "orders-bus" => serde_json::json!({"data": {"id": id}, "kind": "order.created"}),
        _ => serde_json::json!({"message": "hello", "n": 1}),
    };
    serde_json::to_vec(&v).unwrap()
}

fn json_headers(mut h: HeaderMap) -> HeaderMap {
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h
}

async fn history(gw: &Gateway, source: &str, id: &str) -> Vec<HistoryOutcome> {
    // A second handle on the same SQLite file: reads go to their own connection.
    let store = idemgate_sqlite::SqliteStore::open(gw.data_dir()).unwrap();
    let view = store
        .lookup(&Key::parse(source, id).unwrap())
        .await
        .unwrap();
    view.history.iter().map(|h| h.outcome).collect()
}

/// The key the downstream sees in Idempotency-Key.
fn downstream_key(source: &str, id: &str) -> String {
    format!("{source}:{id}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_provider_forwards_a_signed_delivery_once() {
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&every_provider(&down)).await;
    for sc in gw.config.sources.clone() {
        let name = sc.name.as_str();
        let id = format!("evt_{name}_1");
        let body = body_for(name, &id);
        let signed = json_headers(sign(&gw, name, &id, SystemTime::now(), &body));
        let first = gw
            .post(&format!("/hooks/{name}"), signed.clone(), body.clone())
            .await;
        assert_eq!(
            (first.status, first.outcome()),
            (200, "forwarded"),
            "{name}: {}",
            String::from_utf8_lossy(&first.body)
        );
        let again = gw
            .post(&format!("/hooks/{name}"), signed.clone(), body.clone())
            .await;
        assert_eq!(
            (again.status, again.outcome()),
            (200, "duplicate"),
            "{name}"
        );
        // GitHub ids are scoped by hook id; without the header the delivery id stands alone.
        let key = downstream_key(name, &id);
        assert_eq!(
            down.attempts(&key),
            [1],
            "{name}: forwarded once with attempt 1"
        );

        // A tampered body: 401, nothing stored.
        let tampered_id = format!("evt_{name}_tampered");
        let body = body_for(name, &tampered_id);
        let signed = json_headers(sign(&gw, name, &tampered_id, SystemTime::now(), &body));
        let mut evil = body.clone();
        evil.extend_from_slice(b" ");
        let r = gw.post(&format!("/hooks/{name}"), signed, evil).await;
        assert_eq!((r.status, r.outcome()), (401, "bad_signature"), "{name}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert!(
            history(&gw, name, &tampered_id).await.is_empty(),
            "{name}: nothing stored"
        );
    }
    assert_eq!(down.total(), gw.config.sources.len());
    assert!(
        down.content_types().iter().all(|c| c == "application/json"),
        "the content type is forwarded"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_and_future_timestamps_are_refused() {
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&every_provider(&down)).await;
    for name in [
        "stripe-live",
        "slack-events",
        "std",
        "clerk",
        "paddle",
        "orders-bus",
    ] {
        for (offset, outcome) in [(-600i64, "stale_timestamp"), (600, "future_timestamp")] {
            let id = format!("evt_{name}_{offset}");
            let body = body_for(name, &id);
            let at = if offset < 0 {
                SystemTime::now() - Duration::from_secs(offset.unsigned_abs())
            } else {
                SystemTime::now() + Duration::from_secs(offset as u64)
            };
            let r = gw
                .post(
                    &format!("/hooks/{name}"),
                    sign(&gw, name, &id, at, &body),
                    body,
                )
                .await;
            assert_eq!((r.status, r.outcome()), (401, outcome), "{name} {offset}");
        }
    }
    assert_eq!(down.total(), 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rotated_secret_is_accepted() {
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!(
        "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_new\", \"whsec_old\"]\nforward_url = \"{}\"\n",
        down.url
    );
    let gw = Gateway::start(&config).await;
    let sc = gw.config.sources[0].clone();
    for (i, id) in [(0, "evt_new"), (1, "evt_old")] {
        let body = body_for("stripe-live", id);
        let h = support::signer(&sc, i)
            .sign(id, SystemTime::now(), &body)
            .unwrap();
        let r = gw.post("/hooks/stripe-live", h, body).await;
        assert_eq!((r.status, r.outcome()), (200, "forwarded"), "secret {i}");
    }
    // A secret not in the list is refused.
    let mut stranger = sc.clone();
    stranger.secrets = vec!["whsec_someone_else".into()];
    let body = body_for("stripe-live", "evt_x");
    let h = support::signer(&stranger, 0)
        .sign("evt_x", SystemTime::now(), &body)
        .unwrap();
    assert_eq!(gw.post("/hooks/stripe-live", h, body).await.status, 401);
    gw.stop().await;
}

fn one_source(down: &Downstream, extra: &str) -> String {
    format!(
        "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = \"{}\"\n{extra}\n",
        down.url
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_deliveries_are_forwarded_once() {
    let down = Downstream::start(Behaviour::Slow(Duration::from_millis(300))).await;
    let gw = std::sync::Arc::new(Gateway::start(&one_source(&down, "")).await);
    let body = body_for("stripe-live", "evt_storm");
    let signed = sign(&gw, "stripe-live", "evt_storm", SystemTime::now(), &body);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (gw, signed, body, barrier) =
                (gw.clone(), signed.clone(), body.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let r = gw.post("/hooks/stripe-live", signed, body).await;
                (
                    r.status,
                    r.outcome().to_owned(),
                    r.headers.get("retry-after").is_some(),
                )
            })
        })
        .collect();
    let mut forwarded = 0;
    for t in tasks {
        let (status, outcome, retry_after) = t.await.unwrap();
        match outcome.as_str() {
            "forwarded" => forwarded += 1,
            "in_flight" => assert!(status == 409 && retry_after, "409 with Retry-After"),
            "duplicate" => assert_eq!(status, 200),
            other => panic!("unexpected outcome {other} ({status})"),
        }
    }
    assert_eq!(forwarded, 1);
    assert_eq!(down.attempts("stripe-live:evt_storm"), [1]);
    let r = gw.post("/hooks/stripe-live", signed, body).await;
    assert_eq!(r.outcome(), "duplicate");
    let gw = std::sync::Arc::into_inner(gw).unwrap();
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_forward_is_released_and_the_retry_is_processed() {
    let down = Downstream::start(Behaviour::Fail).await;
    let gw = Gateway::start(&one_source(&down, "")).await;
    let body = body_for("stripe-live", "evt_retry");
    let signed = sign(&gw, "stripe-live", "evt_retry", SystemTime::now(), &body);
    let r = gw
        .post("/hooks/stripe-live", signed.clone(), body.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (502, "forward_failed"));
    down.set(Behaviour::Ok);
    let r = gw
        .post("/hooks/stripe-live", signed.clone(), body.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"));
    let r = gw.post("/hooks/stripe-live", signed, body).await;
    assert_eq!(r.outcome(), "duplicate");
    assert_eq!(
        down.attempts("stripe-live:evt_retry").len(),
        2,
        "forwarded twice"
    );
    let h = history(&gw, "stripe-live", "evt_retry").await;
    use HistoryOutcome::*;
    assert_eq!(h, [Claimed, Released, Claimed, Completed, Duplicate]);
    assert_eq!(
        h.iter().filter(|o| **o == Completed).count(),
        1,
        "completed once"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hanging_downstream_gets_503_and_the_next_retry_is_processed() {
    let down = Downstream::start(Behaviour::Hang).await;
    let gw = Gateway::start(&one_source(&down, "forward_timeout = \"300ms\"")).await;
    let body = body_for("stripe-live", "evt_hang");
    let signed = sign(&gw, "stripe-live", "evt_hang", SystemTime::now(), &body);
    let r = gw
        .post("/hooks/stripe-live", signed.clone(), body.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (503, "forward_timeout"));
    down.set(Behaviour::Ok);
    let r = gw.post("/hooks/stripe-live", signed, body).await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_downstream_gets_502_and_releases() {
    // A port nothing listens on.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let config = format!(
        "[[source]]\nname = \"s\"\nprovider = \"github\"\nsecrets = [\"x\"]\nforward_url = \"{url}\"\n"
    );
    let gw = Gateway::start(&config).await;
    let body = b"{}".to_vec();
    let r = gw
        .post(
            "/hooks/s",
            sign(&gw, "s", "d-1", SystemTime::now(), &body),
            body,
        )
        .await;
    assert_eq!((r.status, r.outcome()), (502, "forward_unreachable"));
    assert_eq!(
        history(&gw, "s", "d-1").await,
        [HistoryOutcome::Claimed, HistoryOutcome::Released]
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conflicts_follow_the_source_policy() {
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!(
        "{}[[source]]\nname = \"strict\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = \"{}\"\non_conflict = \"reject\"\n",
        one_source(&down, ""),
        down.url
    );
    let gw = Gateway::start(&config).await;
    for (source, status) in [("stripe-live", 200), ("strict", 409)] {
        let first = serde_json::to_vec(&serde_json::json!({"id": "evt_c", "amount": 1})).unwrap();
        let other = serde_json::to_vec(&serde_json::json!({"id": "evt_c", "amount": 2})).unwrap();
        let r = gw
            .post(
                &format!("/hooks/{source}"),
                sign(&gw, source, "evt_c", SystemTime::now(), &first),
                first,
            )
            .await;
        assert_eq!(r.outcome(), "forwarded");
        let r = gw
            .post(
                &format!("/hooks/{source}"),
                sign(&gw, source, "evt_c", SystemTime::now(), &other),
                other,
            )
            .await;
        assert_eq!((r.status, r.outcome()), (status, "conflict"), "{source}");
        assert_eq!(
            history(&gw, source, "evt_c").await.last(),
            Some(&HistoryOutcome::Conflict)
        );
    }
    assert_eq!(down.total(), 2, "a conflict is never forwarded");
    gw.stop().await;
}

/// Sends a signed delivery over a raw TCP connection and hangs up after `patience`, as a sender
/// whose own timeout (Slack's 3 s, Shopify's 5 s) is shorter than the downstream's answer.
async fn send_and_hang_up(gw: &Gateway, signed: &HeaderMap, body: &[u8], patience: Duration) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = format!(
        "POST /hooks/stripe-live HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        gw.addr,
        body.len()
    );
    for (name, value) in signed {
        head.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    head.push_str("\r\n");
    let mut tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(patience, tcp.read_to_end(&mut answer)).await;
    assert!(
        read.is_err(),
        "answered before the sender gave up: {answer:?}"
    );
    // Dropped: the connection closes with the forward still in flight.
}

/// Waits until the downstream has had `n` deliveries of `key`.
async fn delivered(down: &Downstream, key: &str, n: usize) {
    for _ in 0..500 {
        if down.attempts(key).len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{key}: {:?}, not {n} deliveries", down.attempts(key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sender_that_hangs_up_before_a_slow_downstream_answers_gets_it_forwarded_once() {
    let down = Downstream::start(Behaviour::Slow(Duration::from_millis(1_200))).await;
    let gw = Gateway::start(&one_source(&down, "forward_timeout = \"5s\"")).await;
    let body = body_for("stripe-live", "evt_hangup");
    let signed = sign(&gw, "stripe-live", "evt_hangup", SystemTime::now(), &body);
    send_and_hang_up(&gw, &signed, &body, Duration::from_millis(300)).await;
    delivered(&down, "stripe-live:evt_hangup", 1).await;
    // The sender's retry while the forward runs: in flight, not forwarded again.
    let r = gw
        .post("/hooks/stripe-live", signed.clone(), body.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (409, "in_flight"), "{:?}", r.body);
    assert!(r.headers.contains_key("retry-after"));
    // Once the downstream answers, the forward completes the claim by itself.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let r = gw.post("/hooks/stripe-live", signed, body).await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"), "{:?}", r.body);
    assert_eq!(
        down.attempts("stripe-live:evt_hangup"),
        [1],
        "forwarded once"
    );
    use HistoryOutcome::*;
    assert_eq!(
        history(&gw, "stripe-live", "evt_hangup").await,
        [Claimed, InFlight, Completed, Duplicate]
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_timeout_during_a_forward_leaves_the_forward_to_settle() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let down = Downstream::start(Behaviour::Slow(Duration::from_millis(800))).await;
    let config = format!(
        "{}[limits]\nrequest_timeout = \"1s\"\n",
        one_source(&down, "forward_timeout = \"900ms\"")
    );
    let gw = Gateway::start(&config).await;
    let body = body_for("stripe-live", "evt_timeout");
    let signed = sign(&gw, "stripe-live", "evt_timeout", SystemTime::now(), &body);
    // A sender on a slow link: half the body, a pause, the rest. The forward starts 500 ms into
    // the request and needs 800 ms: the request's 1 s runs out while it is in flight.
    let mut head = format!(
        "POST /hooks/stripe-live HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        gw.addr,
        body.len()
    );
    for (name, value) in &signed {
        head.push_str(&format!("{name}: {}\r\n", value.to_str().unwrap()));
    }
    head.push_str("\r\n");
    let mut tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (first, rest) = body.split_at(body.len() / 2);
    tcp.write_all(first).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    tcp.write_all(rest).await.unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // The forward settles itself: completed on the downstream's 2xx, so the retry is a
    // duplicate, never a second forward.
    delivered(&down, "stripe-live:evt_timeout", 1).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let r = gw.post("/hooks/stripe-live", signed, body).await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"), "{:?}", r.body);
    assert_eq!(down.attempts("stripe-live:evt_timeout"), [1]);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forward_timeout_not_shorter_than_the_request_timeout_is_refused() {
    let text = "[limits]\nrequest_timeout = \"10s\"\n[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nforward_url = \"http://127.0.0.1:9/hook\"\nforward_timeout = \"10s\"\n";
    let err = idemgate_gateway::Config::from_toml(text)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("forward_timeout") && err.contains("limits.request_timeout"),
        "{err}"
    );
    // Inbox sources' dispatch has its own timeout, apart from any request.
    let fine = text.replace("forward_timeout = \"10s\"", "forward_timeout = \"9s\"");
    idemgate_gateway::Config::from_toml(&fine).unwrap();
}

#[test]
fn a_late_duplicate_horizon_within_the_ttl_is_refused() {
    // Stripe's TTL: 3 days of retries plus the margins, about 3 days and 2 hours.
    let text = "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\nforward_url = \"http://127.0.0.1:9/hook\"\nlate_duplicate_horizon = \"2days\"\n";
    let err = idemgate_gateway::Config::from_toml(text)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("late_duplicate_horizon") && err.contains("TTL"),
        "{err}"
    );
    let fine = text.replace("2days", "10days");
    idemgate_gateway::Config::from_toml(&fine).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_lets_a_forward_in_flight_settle_itself() {
    let down = Downstream::start(Behaviour::Slow(Duration::from_millis(1_000))).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[limits]\nshutdown_grace = \"200ms\"\n[store]\npath = {:?}\n",
        one_source(&down, "forward_timeout = \"5s\""),
        dir.path().display().to_string()
    );
    let gw = Gateway::start_with(&config).await;
    let body = body_for("stripe-live", "evt_shutdown");
    let signed = sign(&gw, "stripe-live", "evt_shutdown", SystemTime::now(), &body);
    let url = gw.url("/hooks/stripe-live");
    let pending = tokio::spawn(async move {
        support::send(axum::http::Method::POST, &url, signed, body.into()).await
    });
    delivered(&down, "stripe-live:evt_shutdown", 1).await;
    tokio::time::timeout(Duration::from_secs(20), gw.stop())
        .await
        .expect("shutdown is bounded by the grace and the forward's timeout");
    // The sender saw its connection end without a 2xx, so it will retry: into a duplicate, as
    // the forward completed the claim after the grace.
    assert!(
        pending.await.unwrap().is_err(),
        "no answer for a dropped request"
    );
    let store = idemgate_sqlite::SqliteStore::open(dir.path()).unwrap();
    let view = store
        .lookup(&Key::parse("stripe-live", "evt_shutdown").unwrap())
        .await
        .unwrap();
    let outcomes: Vec<_> = view.history.iter().map(|h| h.outcome).collect();
    assert_eq!(
        outcomes,
        [HistoryOutcome::Claimed, HistoryOutcome::Completed],
        "the forward settled the claim: {:?}",
        view.record
    );
    assert_eq!(down.attempts("stripe-live:evt_shutdown"), [1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_releases_a_forward_that_times_out_after_the_grace() {
    let down = Downstream::start(Behaviour::Hang).await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[limits]\nshutdown_grace = \"200ms\"\n[store]\npath = {:?}\n",
        one_source(&down, "forward_timeout = \"700ms\""),
        dir.path().display().to_string()
    );
    let gw = Gateway::start_with(&config).await;
    let body = body_for("stripe-live", "evt_hung");
    let signed = sign(&gw, "stripe-live", "evt_hung", SystemTime::now(), &body);
    let url = gw.url("/hooks/stripe-live");
    let pending = tokio::spawn(async move {
        support::send(axum::http::Method::POST, &url, signed, body.into()).await
    });
    delivered(&down, "stripe-live:evt_hung", 1).await;
    tokio::time::timeout(Duration::from_secs(20), gw.stop())
        .await
        .expect("bounded");
    assert!(pending.await.unwrap().is_err());
    let store = idemgate_sqlite::SqliteStore::open(dir.path()).unwrap();
    let view = store
        .lookup(&Key::parse("stripe-live", "evt_hung").unwrap())
        .await
        .unwrap();
    assert!(view.record.is_none(), "released: {:?}", view.record);
    let outcomes: Vec<_> = view.history.iter().map(|h| h.outcome).collect();
    assert_eq!(
        outcomes,
        [HistoryOutcome::Claimed, HistoryOutcome::Released]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_source_without_forward_url_acknowledges_once_claimed() {
    let config = "api_tokens = [\"internal-token-0123456789\"]\n[[source]]\nname = \"bus\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_header = \"X-Event-Id\"\n";
    let gw = Gateway::start(config).await;
    let auth = [
        ("authorization", "Bearer internal-token-0123456789"),
        ("x-event-id", "m-1"),
    ];
    let r = gw.post("/hooks/bus", headers(&auth), "{}").await;
    assert_eq!((r.status, r.outcome()), (200, "accepted"));
    let r = gw.post("/hooks/bus", headers(&auth), "{}").await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"));
    let r = gw
        .post("/hooks/bus", headers(&[("x-event-id", "m-2")]), "{}")
        .await;
    assert_eq!(
        (r.status, r.outcome()),
        (401, "unauthorized"),
        "provider none needs the bearer token"
    );
    let r = gw.post("/hooks/bus", headers(&[auth[0]]), "{}").await;
    assert_eq!((r.status, r.outcome()), (400, "missing_event_id"));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_url_verification_is_answered_only_when_signed() {
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&every_provider(&down)).await;
    let body = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let r = gw
        .post(
            "/hooks/slack-events",
            sign(&gw, "slack-events", "", SystemTime::now(), body),
            &body[..],
        )
        .await;
    assert_eq!((r.status, r.outcome()), (200, "challenge"));
    assert_eq!(
        r.json()["challenge"],
        "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );
    let r = gw
        .post("/hooks/slack-events", headers(&[]), &body[..])
        .await;
    assert_eq!(r.status, 401, "an unsigned handshake is refused");
    assert_eq!(down.total(), 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_after_the_ttl_is_caught_under_each_policy() {
    let down = Downstream::start(Behaviour::Ok).await;
    let mut config = String::new();
    for policy in ["flag", "reject", "off"] {
        config.push_str(&format!(
            "[[source]]\nname = \"late-{policy}\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n\
             forward_url = \"{}\"\nretry_window = \"400ms\"\nqueue_lag = \"0s\"\nclock_skew = \"0s\"\n\
             replay_margin = \"0s\"\nlease = \"200ms\"\nlate_duplicates = \"{policy}\"\n",
            down.url
        ));
    }
    let gw = Gateway::start(&config).await;
    let deliver = |source: &'static str| {
        let body = body_for("stripe-live", "evt_late");
        let h = sign(&gw, source, "evt_late", SystemTime::now(), &body);
        let gw = &gw;
        async move { gw.post(&format!("/hooks/{source}"), h, body).await }
    };
    for source in ["late-flag", "late-reject", "late-off"] {
        assert_eq!(deliver(source).await.outcome(), "forwarded", "{source}");
    }
    // Past the 400 ms TTL: the records are gone, history remains.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let flag = deliver("late-flag").await;
    assert_eq!(
        (flag.status, flag.outcome()),
        (200, "forwarded"),
        "flag processes it again"
    );
    let reject = deliver("late-reject").await;
    assert_eq!(
        (reject.status, reject.outcome()),
        (200, "late_duplicate"),
        "reject acks it"
    );
    let off = deliver("late-off").await;
    assert_eq!((off.status, off.outcome()), (200, "forwarded"));

    assert_eq!(down.attempts("late-flag:evt_late").len(), 2);
    assert_eq!(
        down.attempts("late-reject:evt_late").len(),
        1,
        "a rejected late duplicate is not forwarded"
    );
    assert_eq!(down.attempts("late-off:evt_late").len(), 2);
    use HistoryOutcome::*;
    assert_eq!(
        history(&gw, "late-flag", "evt_late").await,
        [Claimed, Completed, LateDuplicate, Completed]
    );
    assert_eq!(
        history(&gw, "late-reject", "evt_late").await,
        [Claimed, Completed, LateDuplicate]
    );
    assert_eq!(
        history(&gw, "late-off", "evt_late").await,
        [Claimed, Completed, Claimed, Completed]
    );
    let m = String::from_utf8(gw.get("/metrics").await.unwrap().body.to_vec()).unwrap();
    assert!(
        m.contains("idemgate_late_duplicates_total{source=\"late-flag\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("idemgate_late_duplicates_total{source=\"late-reject\"} 1"),
        "{m}"
    );
    assert!(
        !m.contains("idemgate_late_duplicates_total{source=\"late-off\"}"),
        "{m}"
    );
    gw.stop().await;
}

/// GitHub signs neither its delivery id header nor a timestamp: a captured delivery replayed
/// with a new `X-GitHub-Delivery` would be a new event. With `dedupe_on_body` (GitHub's
/// default) the payload's fingerprint is claimed too, and the replay is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_under_a_new_unsigned_id_is_a_duplicate_with_dedupe_on_body() {
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!(
        "[[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"s\"]\nforward_url = \"{0}\"\n\
         [[source]]\nname = \"gh-ids\"\nprovider = \"github\"\nsecrets = [\"s\"]\nforward_url = \"{0}\"\ndedupe_on_body = false\n",
        down.url
    );
    let gw = Gateway::start(&config).await;
    let body = br#"{"action":"opened","number":7}"#.to_vec();
    for (source, replay) in [("gh", "duplicate"), ("gh-ids", "forwarded")] {
        let r = gw
            .post(
                &format!("/hooks/{source}"),
                sign(&gw, source, "d-1", SystemTime::now(), &body),
                body.clone(),
            )
            .await;
        assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{source}");
        // The same signed body, another id header.
        let r = gw
            .post(
                &format!("/hooks/{source}"),
                sign(&gw, source, "d-2", SystemTime::now(), &body),
                body.clone(),
            )
            .await;
        assert_eq!(
            (r.status, r.outcome()),
            (200, replay),
            "{source}: {:?}",
            r.body
        );
        // Another payload is another event.
        let other = br#"{"action":"closed","number":7}"#.to_vec();
        let r = gw
            .post(
                &format!("/hooks/{source}"),
                sign(&gw, source, "d-3", SystemTime::now(), &other),
                other,
            )
            .await;
        assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{source}");
    }
    assert!(
        down.attempts("gh:d-2").is_empty(),
        "the replay was not forwarded"
    );
    assert_eq!(down.attempts("gh-ids:d-2"), [1]);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_forward_releases_the_payloads_claim_too() {
    let down = Downstream::start(Behaviour::Fail).await;
    let config = format!(
        "[[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"s\"]\nforward_url = \"{}\"\n",
        down.url
    );
    let gw = Gateway::start(&config).await;
    let body = br#"{"action":"opened","number":8}"#.to_vec();
    let r = gw
        .post(
            "/hooks/gh",
            sign(&gw, "gh", "d-1", SystemTime::now(), &body),
            body.clone(),
        )
        .await;
    assert_eq!(r.status, 502);
    down.set(Behaviour::Ok);
    // GitHub's manual redelivery keeps the id; it is processed, the payload not in the way.
    let r = gw
        .post(
            "/hooks/gh",
            sign(&gw, "gh", "d-1", SystemTime::now(), &body),
            body,
        )
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    assert_eq!(down.attempts("gh:d-1").len(), 2);
    gw.stop().await;
}

/// What describes the body reaches the downstream with it: a compressed body is forwarded as it
/// came, so its `Content-Encoding` goes too; and the `Idempotency-Key` is printable ASCII
/// whatever the event id holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_body_travels_with_its_encoding_and_the_key_as_ascii() {
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!(
        "api_tokens = [\"bus-token-0123456789\"]\n\
         [[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"s\"]\nforward_url = \"{0}\"\n\
         [[source]]\nname = \"bus\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_pointer = \"/id\"\nforward_url = \"{0}\"\n",
        down.url
    );
    let gw = Gateway::start(&config).await;
    // Bytes as a gzip encoder would send them; GitHub signs the bytes, whatever they are.
    let body = vec![0x1f, 0x8b, 0x08, 0x00, 1, 2, 3, 4];
    let mut signed = sign(&gw, "gh", "d-gz", SystemTime::now(), &body);
    signed.insert("content-encoding", HeaderValue::from_static("gzip"));
    let r = gw.post("/hooks/gh", signed, body).await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    assert_eq!(down.content_encodings(), ["gzip"]);

    let auth = headers(&[
        ("authorization", "Bearer bus-token-0123456789"),
        ("content-type", "application/json"),
    ]);
    let r = gw
        .post("/hooks/bus", auth, r#"{"id":"évt 1%"}"#.as_bytes().to_vec())
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    assert!(
        down.keys().contains(&"bus:%C3%A9vt%201%25".to_owned()),
        "{:?}",
        down.keys()
    );
    gw.stop().await;
}
