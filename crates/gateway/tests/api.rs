//! The claim API, the admin endpoints, and bad input, over real HTTP.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use axum::http::Method;
use serde_json::json;
use support::{Gateway, headers, send, sign};

const TOKEN: &str = "worker-token-0123456789";

fn config() -> String {
    format!(
        "api_tokens = [\"{TOKEN}\"]\n[limits]\nbody_limit = 4096\nrequest_timeout = \"1s\"\n\
         [[source]]\nname = \"orders\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n"
    )
}

fn auth() -> axum::http::HeaderMap {
    headers(&[
        ("authorization", &format!("Bearer {TOKEN}")),
        ("content-type", "application/json"),
    ])
}

async fn claim(gw: &Gateway, body: serde_json::Value) -> support::Answer {
    gw.post("/v1/claims", auth(), body.to_string()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_api_round_trip_in_every_outcome() {
    let gw = Gateway::start(&config()).await;
    let fp_a = "a".repeat(64);
    let fp_b = "b".repeat(64);

    let r = claim(
        &gw,
        json!({"source": "orders", "event_id": "job/1", "fingerprint": fp_a}),
    )
    .await;
    assert_eq!((r.status, r.outcome()), (201, "claimed"), "{:?}", r.body);
    let claimed = r.json();
    assert_eq!(claimed["attempt"], 1);
    assert!(claimed["expires_at"].as_str().unwrap().ends_with('Z'));
    let token = claimed["token"].as_str().unwrap().to_owned();

    let r = claim(&gw, json!({"source": "orders", "event_id": "job/1"})).await;
    assert_eq!((r.status, r.outcome()), (409, "in_flight"));
    assert!(r.headers.contains_key("retry-after"));
    assert!(r.json()["retry_after_s"].as_u64().unwrap() >= 1);

    let r = claim(
        &gw,
        json!({"source": "orders", "event_id": "job/1", "fingerprint": fp_b}),
    )
    .await;
    assert_eq!((r.status, r.outcome()), (409, "conflict"));
    assert_eq!(r.json()["type"], "urn:idemgate:problem:conflict");

    // Ids travel percent-encoded in paths.
    let path = "/v1/claims/orders/job%2F1/complete";
    let r = gw
        .post(
            path,
            auth(),
            json!({"token": "1.0000000000000001"}).to_string(),
        )
        .await;
    assert_eq!(
        (r.status, r.outcome()),
        (409, "stale_token"),
        "a forged token is refused"
    );
    let r = gw
        .post(path, auth(), json!({"token": token}).to_string())
        .await;
    assert_eq!((r.status, r.outcome()), (200, "completed"), "{:?}", r.body);

    let r = claim(
        &gw,
        json!({"source": "orders", "event_id": "job/1", "fingerprint": fp_a}),
    )
    .await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"));
    assert_eq!(r.json()["state"], "done");

    // The token that completed the claim cannot undo it: the event stays processed.
    let r = gw
        .post(
            "/v1/claims/orders/job%2F1/release",
            auth(),
            json!({"token": token}).to_string(),
        )
        .await;
    assert_eq!(
        (r.status, r.outcome()),
        (409, "completed_claim"),
        "{:?}",
        r.body
    );
    assert_eq!(r.json()["type"], "urn:idemgate:problem:completed_claim");
    let r = claim(&gw, json!({"source": "orders", "event_id": "job/1"})).await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"));

    // Release: the next claim wins again.
    let r = claim(
        &gw,
        json!({"source": "orders", "event_id": "job-2", "lease_s": 5}),
    )
    .await;
    let token = r.json()["token"].as_str().unwrap().to_owned();
    let r = gw
        .post(
            "/v1/claims/orders/job-2/release",
            auth(),
            json!({"token": token}).to_string(),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (200, "released"));
    let r = gw
        .post(
            "/v1/claims/orders/job-2/release",
            auth(),
            json!({"token": token}).to_string(),
        )
        .await;
    assert_eq!(
        (r.status, r.outcome()),
        (409, "stale_token"),
        "a released token is stale"
    );
    let r = claim(&gw, json!({"source": "orders", "event_id": "job-2"})).await;
    assert_eq!(r.status, 201);

    // Did we process it, and when?
    let r = send(
        Method::GET,
        &gw.url("/v1/events/orders/job%2F1"),
        auth(),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["record"]["state"], "done");
    assert!(v["processed_at"].is_string());
    let outcomes: Vec<_> = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        outcomes,
        [
            "claimed",
            "in_flight",
            "conflict",
            "completed",
            "duplicate",
            "duplicate"
        ]
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_api_refuses_bad_requests() {
    let gw = Gateway::start(&config()).await;
    let cases: Vec<(axum::http::HeaderMap, String, u16, &str)> = vec![
        (
            headers(&[]),
            json!({"source": "orders", "event_id": "x"}).to_string(),
            401,
            "unauthorized",
        ),
        (
            headers(&[("authorization", "Bearer wrong-token-0123456789")]),
            json!({"source": "orders", "event_id": "x"}).to_string(),
            401,
            "unauthorized",
        ),
        (auth(), "{not json".into(), 400, "invalid_json"),
        (
            auth(),
            json!({"source": "orders", "event_id": "x", "extra": 1}).to_string(),
            400,
            "invalid_json",
        ),
        (
            auth(),
            json!({"source": "nope", "event_id": "x"}).to_string(),
            404,
            "unknown_source",
        ),
        (
            auth(),
            json!({"source": "orders", "event_id": ""}).to_string(),
            400,
            "invalid_event_id",
        ),
        (
            auth(),
            json!({"source": "orders", "event_id": "a\u{0}b"}).to_string(),
            400,
            "invalid_event_id",
        ),
        (
            auth(),
            json!({"source": "orders", "event_id": "x".repeat(256)}).to_string(),
            400,
            "invalid_event_id",
        ),
        (
            auth(),
            json!({"source": "orders", "event_id": "x", "fingerprint": "abc"}).to_string(),
            400,
            "invalid_fingerprint",
        ),
        (
            auth(),
            json!({"source": "orders", "event_id": "x", "lease_s": 0}).to_string(),
            400,
            "invalid_lease",
        ),
    ];
    for (h, body, status, outcome) in cases {
        let r = gw.post("/v1/claims", h, body.clone()).await;
        assert_eq!((r.status, r.outcome()), (status, outcome), "{body}");
        assert_eq!(r.headers["content-type"], "application/problem+json");
        assert_eq!(r.json()["type"], format!("urn:idemgate:problem:{outcome}"));
    }
    let r = gw
        .post(
            "/v1/claims/orders/x/complete",
            auth(),
            json!({"token": "garbage"}).to_string(),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (400, "invalid_token"));
    // Nothing of the refused requests was stored.
    let r = send(
        Method::GET,
        &gw.url("/v1/events/orders/x"),
        auth(),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.json()["history"], json!([]));
    // A source this gateway does not serve is 404 here too, as on the claim routes.
    let r = send(
        Method::GET,
        &gw.url("/v1/events/no-such-source/x"),
        auth(),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!((r.status, r.outcome()), (404, "unknown_source"));
    assert_eq!(r.json()["type"], "urn:idemgate:problem:unknown_source");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_describes_exactly_the_claim_api() {
    let gw = Gateway::start(&config()).await;
    let spec = gw.get("/openapi.json").await.unwrap().json();
    let mut described = BTreeSet::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            described.insert((method.clone(), path.clone()));
        }
    }
    let served: BTreeSet<_> = idemgate_gateway::api::ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(described, served);
    // Every described route is really routed: with no token each answers 401, not 404 or 405.
    for (method, path) in &described {
        let path = path
            .replace("{source}", "orders")
            .replace("{event_id}", "e1");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let r = send(method.clone(), &gw.url(&path), headers(&[]), "{}".into())
            .await
            .unwrap();
        assert_eq!(
            (r.status, r.outcome()),
            (401, "unauthorized"),
            "{method} {path}"
        );
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_metrics() {
    let gw = Gateway::start(&config()).await;
    let h = gw.get("/healthz").await.unwrap();
    assert_eq!(h.status, 200);
    assert_eq!(h.json()["store"], "sqlite");
    let body = br#"{"id":"evt_m"}"#;
    let r = gw
        .post(
            "/hooks/orders",
            sign(&gw, "orders", "evt_m", SystemTime::now(), body),
            &body[..],
        )
        .await;
    assert_eq!(r.outcome(), "accepted");
    gw.post(
        "/hooks/orders",
        sign(&gw, "orders", "evt_m", SystemTime::now(), body),
        &body[..],
    )
    .await;
    let m = String::from_utf8(gw.get("/metrics").await.unwrap().body.to_vec()).unwrap();
    for line in [
        "idemgate_deliveries_total{source=\"orders\",outcome=\"accepted\"} 1",
        "idemgate_deliveries_total{source=\"orders\",outcome=\"duplicate\"} 1",
        "idemgate_claim_duration_seconds_count{source=\"orders\"} 2",
        "idemgate_live_rows 1",
        "idemgate_sweeper_runs_total",
    ] {
        assert!(m.contains(line), "{line} missing from:\n{m}");
    }
    assert!(!m.contains("evt_m"), "event ids never appear in metrics");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_4xx_and_the_gateway_keeps_serving() {
    let gw = Gateway::start(&config()).await;
    let hook = "/hooks/orders";

    // Oversized: 413 (declared length, and streamed without one).
    let big = vec![b'x'; 5000];
    let r = gw
        .post(
            hook,
            sign(&gw, "orders", "evt_big", SystemTime::now(), &big),
            big.clone(),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (413, "body_too_large"));

    // JSON needed, not given: the signature is valid, the id cannot be read.
    let not_json = b"id=evt_1&type=x";
    let r = gw
        .post(
            hook,
            sign(&gw, "orders", "x", SystemTime::now(), not_json),
            &not_json[..],
        )
        .await;
    assert_eq!((r.status, r.outcome()), (400, "invalid_json"));
    let no_id = br#"{"type":"invoice.paid"}"#;
    let r = gw
        .post(
            hook,
            sign(&gw, "orders", "x", SystemTime::now(), no_id),
            &no_id[..],
        )
        .await;
    assert_eq!((r.status, r.outcome()), (400, "missing_event_id"));

    // A header value that is not UTF-8.
    let mut h = axum::http::HeaderMap::new();
    h.insert(
        "stripe-signature",
        axum::http::HeaderValue::from_bytes(b"t=1,v1=\xff\xfe").unwrap(),
    );
    let r = gw.post(hook, h, &br#"{"id":"evt_bin"}"#[..]).await;
    assert_eq!((r.status, r.outcome()), (401, "malformed_header"));

    // Ten thousand distinct unknown sources: each a 404, counted apart from the sources'
    // deliveries (no pseudo-source), with no label of their names.
    let mut tasks = tokio::task::JoinSet::new();
    let base = gw.url("/hooks/");
    for chunk in 0..16 {
        let base = base.clone();
        tasks.spawn(async move {
            for i in 0..625 {
                let r = send(
                    Method::POST,
                    &format!("{base}nope-{chunk}-{i}"),
                    Default::default(),
                    "{}".into(),
                )
                .await
                .unwrap();
                assert_eq!(r.status, 404);
            }
        });
    }
    while let Some(t) = tasks.join_next().await {
        t.unwrap();
    }
    let m = String::from_utf8(gw.get("/metrics").await.unwrap().body.to_vec()).unwrap();
    assert!(
        m.contains("idemgate_refused_requests_total{outcome=\"unknown_source\"} 10000"),
        "{m}"
    );
    assert!(!m.contains("nope-"), "unknown names never become labels");
    assert!(!m.contains("source=\"unknown\""), "no pseudo-source: {m}");
    // A path no route serves is refused apart too.
    let r = gw.get("/wp-login.php").await.unwrap();
    assert_eq!(r.status, 404);
    let m = String::from_utf8(gw.get("/metrics").await.unwrap().body.to_vec()).unwrap();
    assert!(
        m.contains("idemgate_refused_requests_total{outcome=\"not_found\"} 1"),
        "{m}"
    );
    assert!(!m.contains("source=\"unknown\""), "{m}");

    // A slow body: headers, then nothing: 408 after the request timeout, connection closed.
    let started = std::time::Instant::now();
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"POST /hooks/orders HTTP/1.1\r\nhost: x\r\nstripe-signature: t=1,v1=00\r\ncontent-length: 100\r\n\r\n{\"id\":")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() >= Duration::from_millis(900));

    // Nothing was stored for any of it, and the gateway still serves.
    let r = send(
        Method::GET,
        &gw.url("/v1/events/orders/evt_big"),
        auth(),
        Default::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.json()["history"], json!([]));
    let body = br#"{"id":"evt_ok"}"#;
    let r = gw
        .post(
            hook,
            sign(&gw, "orders", "evt_ok", SystemTime::now(), body),
            &body[..],
        )
        .await;
    assert_eq!((r.status, r.outcome()), (200, "accepted"));
    gw.stop().await;
}

#[test]
fn config_errors_name_the_key() {
    use idemgate_gateway::Config;
    let cases = [
        ("listen = \"127.0.0.1:1\"\nlisten_port = 3\n", "listen_port"),
        (
            "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"x\"]\ncolour = \"red\"\n",
            "colour",
        ),
        (
            "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"x\"]\nttl_override = \"1h\"\nttl_override_reason = \"short\"\n",
            "ttl_override",
        ),
        (
            "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"x\"]\nretry_window = \"soon\"\n",
            "retry_window",
        ),
        (
            "[[source]]\nname = \"Bad Name\"\nprovider = \"stripe\"\nsecrets = [\"x\"]\n",
            "name",
        ),
        (
            "[[source]]\nname = \"s\"\nprovider = \"mystery\"\nsecrets = [\"x\"]\n",
            "mystery",
        ),
        (
            "[[source]]\nname = \"s\"\nprovider = \"custom\"\nsecrets = [\"x\"]\n",
            "retry_window",
        ),
        (
            "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"x\"]\nforward_url = \"ftp://x\"\n",
            "forward_url",
        ),
        (
            "[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"x\"]\nreplay_margin = \"200d\"\n",
            "replay_margin",
        ),
        ("[store]\nkind = \"postgres\"\n", "store.url"),
        ("[store]\nkind = \"oracle\"\n", "oracle"),
    ];
    for (text, key) in cases {
        let err = Config::from_toml(text).expect_err(text).to_string();
        assert!(err.contains(key), "{err:?} should name {key:?}");
    }
    // A source that fails only when its verifier is built: at start, naming it.
    let config = Config::from_toml(
        "[[source]]\nname = \"sv\"\nprovider = \"svix\"\nsecrets = [\"not-whsec\"]\n",
    )
    .unwrap();
    let store = idemgate_gateway::AnyStore::memory();
    let err = idemgate_gateway::AppState::new(&config, store, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"sv\"") && err.contains("secrets"), "{err}");
    // The shipped example parses, and is refused only for its placeholders (tests/config.rs
    // fills them in).
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../idemgate.example.toml");
    let err = Config::load(Some(&example), "").unwrap_err().to_string();
    assert!(err.contains("placeholder"), "idemgate.example.toml: {err}");
}
