//! `[[api]]`: the gateway as a sidecar in front of an API of the user's own, on SQLite. A keyed
//! request reaches the API once per key and its response is given back to every retry; a client
//! that hangs up does not leave its key unsettled; an API that cannot be reached gives the key
//! back; every other request streams through untouched; the outcomes are counted per api.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode};
use idemgate_tls::testing::TestCa;
use support::{Behaviour, Downstream, Gateway, headers, send, server_tls};
use tokio::io::AsyncWriteExt;

/// The user's API: `POST /payments` creates a payment per request it sees (slowly when the body
/// says `slow`); `GET /export` answers 1 MiB; `POST /echo` echoes its body.
#[derive(Clone, Default)]
struct Api {
    created: Arc<Mutex<HashMap<String, usize>>>,
}

impl Api {
    async fn start(&self) -> String {
        let created = self.created.clone();
        let app = axum::Router::new()
            .route(
                "/payments",
                axum::routing::post(move |headers: HeaderMap, body: String| {
                    let created = created.clone();
                    async move {
                        if body.contains("slow") {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                        let key = headers
                            .get("idempotency-key")
                            .map(|v| v.to_str().unwrap().to_owned())
                            .unwrap_or_default();
                        let n = {
                            let mut created = created.lock().unwrap();
                            *created.entry(key).or_default() += 1;
                            created.values().sum::<usize>()
                        };
                        (
                            StatusCode::CREATED,
                            [
                                ("content-type", "application/json"),
                                ("x-request-id", "req_1"),
                            ],
                            format!("{{\"id\":\"pay_{n}\"}}"),
                        )
                    }
                }),
            )
            .route(
                "/export",
                axum::routing::get(|| async { vec![b'x'; 1 << 20] }),
            )
            .route(
                "/echo",
                axum::routing::post(|body: Bytes| async move { body }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    fn created(&self, key: &str) -> usize {
        self.created.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

async fn free_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

async fn sidecar(upstream: &str) -> (Gateway, String) {
    let port = free_port().await;
    let gw = Gateway::start(&format!(
        "[[api]]\nname = \"payments\"\nlisten = \"127.0.0.1:{port}\"\nupstream = {upstream:?}\nroutes = [\"POST /payments\"]\nretry_window = \"1h\"\nupstream_timeout = \"5s\"\n"
    ))
    .await;
    (gw, format!("http://127.0.0.1:{port}"))
}

fn keyed(key: &str) -> HeaderMap {
    headers(&[
        ("idempotency-key", key),
        ("content-type", "application/json"),
    ])
}

#[tokio::test]
async fn a_keyed_request_reaches_the_api_once_and_its_retries_get_its_response() {
    let api = Api::default();
    let (gw, url) = sidecar(&api.start().await).await;
    let payments = format!("{url}/payments");
    let post = |key: &str, body: &'static str| {
        send(Method::POST, &payments, keyed(key), Bytes::from(body))
    };
    let first = post("pay-1", "{\"amount\":1}").await.unwrap();
    assert_eq!(first.status, 201);
    assert_eq!(first.headers["x-request-id"], "req_1");
    let retry = post("pay-1", "{\"amount\":1}").await.unwrap();
    assert_eq!((retry.status, &retry.body), (201, &first.body));
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(retry.headers["content-type"], "application/json");
    let reused = post("pay-1", "{\"amount\":2}").await.unwrap();
    assert_eq!(
        (reused.status, reused.outcome()),
        (422, "idempotency_key_reused")
    );
    let keyless = send(
        Method::POST,
        &format!("{url}/payments"),
        HeaderMap::new(),
        Bytes::from("{}"),
    )
    .await
    .unwrap();
    assert_eq!(
        (keyless.status, keyless.outcome()),
        (400, "missing_idempotency_key")
    );
    assert_eq!(api.created("pay-1"), 1);
    // On the dashboard like a source: its latest events, and the key's page.
    let page = gw.get("/dashboard").await.unwrap();
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("payments"));
    let route = "POST /payments".parse().unwrap();
    let id = idemgate::idempotency_key::request::event_id("", &route, &"pay-1".parse().unwrap());
    let event = gw
        .get(&format!("/dashboard/events/payments/{id}"))
        .await
        .unwrap();
    let html = String::from_utf8_lossy(&event.body);
    assert_eq!(event.status, 200, "{html}");
    assert!(
        html.contains("completed") && html.contains("duplicate"),
        "{html}"
    );
    // Counted per api, like a source's deliveries.
    let metrics = gw.get("/metrics").await.unwrap();
    let text = String::from_utf8_lossy(&metrics.body);
    for outcome in [
        "processed",
        "replayed",
        "idempotency_key_reused",
        "missing_idempotency_key",
    ] {
        let line = format!("source=\"payments\",outcome=\"{outcome}\"");
        assert!(
            text.lines().any(|l| l.contains(&line) && l.ends_with(" 1")),
            "{outcome} not counted once:\n{text}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_client_that_hangs_up_leaves_the_key_settled_by_the_apis_answer() {
    let api = Api::default();
    let (gw, url) = sidecar(&api.start().await).await;
    // A client that sends a slow request and goes away at once.
    let addr = url.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = "slow";
    tcp.write_all(
        format!(
            "POST /payments HTTP/1.1\r\nhost: {addr}\r\nidempotency-key: gone\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(tcp);
    // Its retry: 409 while the API works, then the API's answer.
    let mut answers = Vec::new();
    for _ in 0..100 {
        let retry = send(
            Method::POST,
            &format!("{url}/payments"),
            keyed("gone"),
            Bytes::from(body),
        )
        .await
        .unwrap();
        answers.push(retry.status);
        if retry.status != 409 {
            assert_eq!(retry.headers["idempotent-replayed"], "true");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answers.last(), Some(&201), "{answers:?}");
    assert_eq!(api.created("gone"), 1, "created once");
    gw.stop().await;
}

#[tokio::test]
async fn an_api_out_of_reach_gives_the_key_back() {
    // Nothing listens on the upstream's port.
    let port = free_port().await;
    let (gw, url) = sidecar(&format!("http://127.0.0.1:{port}")).await;
    for _ in 0..2 {
        let answer = send(
            Method::POST,
            &format!("{url}/payments"),
            keyed("k"),
            Bytes::from("{}"),
        )
        .await
        .unwrap();
        // Each attempt is tried (the key was released), never 409 or a replay.
        assert_eq!(
            (answer.status, answer.outcome()),
            (502, "upstream_unavailable")
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn every_other_request_streams_through_untouched() {
    let api = Api::default();
    let (gw, url) = sidecar(&api.start().await).await;
    let export = send(
        Method::GET,
        &format!("{url}/export"),
        HeaderMap::new(),
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!((export.status, export.body.len()), (200, 1 << 20));
    assert!(export.headers.get("idempotent-replayed").is_none());
    let echo = send(
        Method::POST,
        &format!("{url}/echo?x=1"),
        keyed("ignored"),
        Bytes::from("hello"),
    )
    .await
    .unwrap();
    assert_eq!((echo.status, &echo.body[..]), (200, &b"hello"[..]));
    // The API's own 404, as it wrote it.
    let missing = send(
        Method::GET,
        &format!("{url}/nowhere"),
        HeaderMap::new(),
        Bytes::new(),
    )
    .await
    .unwrap();
    assert_eq!((missing.status, missing.outcome()), (404, ""));
    gw.stop().await;
}

/// A sidecar in front of `upstream` (an `https://` URL), keying `POST /hook`, with `tls` as its
/// `[api.tls]`.
async fn https_sidecar(upstream: &str, tls: &str) -> (Gateway, String) {
    let port = free_port().await;
    let gw = Gateway::start(&format!(
        "[[api]]\nname = \"hooks\"\nlisten = \"127.0.0.1:{port}\"\nupstream = {upstream:?}\nroutes = [\"POST /hook\"]\nretry_window = \"1h\"\nupstream_timeout = \"5s\"\n[api.tls]\n{tls}\n"
    ))
    .await;
    (gw, format!("http://127.0.0.1:{port}/hook"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_trusted_through_api_tls_and_a_stranger_is_a_502_that_gives_the_key_back()
 {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("upstream CA");
    let ca_file = ca.write(dir.path(), "upstream");
    let stranger_file = TestCa::new("stranger CA").write(dir.path(), "stranger");
    let up = Downstream::start_https(
        Behaviour::Ok,
        server_tls(&ca.issue(&["127.0.0.1", "localhost"]), None),
    )
    .await;
    let upstream = up.url.trim_end_matches("/hook").to_owned();
    let trusting = |file: &std::path::Path| {
        format!(
            "ca_file = {:?}\nsystem_roots = false",
            file.display().to_string()
        )
    };
    // Its own CA: the keyed request reaches the upstream once, the retry gets its answer.
    let (gw, url) = https_sidecar(&upstream, &trusting(&ca_file)).await;
    let post = || send(Method::POST, &url, keyed("h-1"), Bytes::from("{}"));
    let first = post().await.unwrap();
    assert_eq!(first.status, 200, "{:?}", first.body);
    let retry = post().await.unwrap();
    assert_eq!(retry.status, 200);
    assert_eq!(retry.headers["idempotent-replayed"], "true");
    assert_eq!(up.attempts("h-1").len(), 1);
    assert_eq!(up.alpn(), [Some("http/1.1".to_owned())]);
    gw.stop().await;
    // Another CA: the handshake is refused, the client hears 502 naming why, and the key is
    // given back (the request did not reach the upstream).
    let (gw, url) = https_sidecar(&upstream, &trusting(&stranger_file)).await;
    let refused = send(Method::POST, &url, keyed("h-2"), Bytes::from("{}"))
        .await
        .unwrap();
    assert_eq!(
        (refused.status, refused.outcome()),
        (502, "upstream_unavailable"),
        "{:?}",
        refused.body
    );
    assert!(
        refused.json()["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("certificate"),
        "{:?}",
        refused.body
    );
    assert!(up.attempts("h-2").is_empty());
    gw.stop().await;
}
