//! The admin listener, `/livez` and `/readyz`: with `admin_listen` set, the operator's routes are
//! served there only and the public listener serves deliveries and the claim API's worker
//! routes; `/readyz` says when the store's schema is not the binary's, or a dispatcher does not
//! run.

mod support;

use std::time::SystemTime;

use axum::http::{HeaderMap, Method};
use bytes::Bytes;
use support::{Gateway, send, sign};

const TOKEN: &str = "admin-test-token-0123456789";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn get(url: &str, token: Option<&str>) -> support::Answer {
    let mut headers = HeaderMap::new();
    if let Some(token) = token {
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    send(Method::GET, url, headers, Bytes::new())
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_the_operators_routes_and_the_public_one_the_rest() {
    let admin = format!("127.0.0.1:{}", free_port());
    let gw = Gateway::start(&format!(
        "admin_listen = \"{admin}\"\napi_tokens = [\"{TOKEN}\"]\n\
         [[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n"
    ))
    .await;
    let public = |path: &str| gw.url(path);
    let on_admin = |path: &str| format!("http://{admin}{path}");

    // Deliveries and the worker routes on the public listener.
    let body = br#"{"id":"evt_a1","object":"event"}"#;
    let headers = sign(&gw, "stripe-live", "evt_a1", SystemTime::now(), body);
    let r = gw.post("/hooks/stripe-live", headers, &body[..]).await;
    assert_eq!((r.status, r.outcome()), (200, "accepted"), "{:?}", r.body);
    let r = get(&public("/v1/events/stripe-live/evt_a1"), Some(TOKEN)).await;
    assert_eq!(r.status, 200);
    assert!(r.json()["processed_at"].is_string(), "{}", r.json());
    // Not the operator's routes.
    for path in [
        "/healthz",
        "/livez",
        "/readyz",
        "/metrics",
        "/dashboard",
        "/openapi.json",
    ] {
        let r = get(&public(path), Some(TOKEN)).await;
        assert_eq!((r.status, r.outcome()), (404, "not_found"), "public {path}");
    }
    let r = send(
        Method::POST,
        &public("/v1/sources/stripe-live/replay"),
        HeaderMap::new(),
        Bytes::from_static(b"{}"),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 404, "replay is the admin listener's");

    // The operator's routes on the admin listener, and nothing else.
    let r = get(&on_admin("/livez"), None).await;
    assert_eq!((r.status, r.outcome()), (200, "live"));
    let r = get(&on_admin("/readyz"), None).await;
    assert_eq!((r.status, r.outcome()), (200, "ready"), "{}", r.json());
    let checks: Vec<String> = r.json()["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}={}",
                c["name"].as_str().unwrap(),
                c["status"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        checks,
        ["store=ok", "schema=ok", "verifiers=ok", "dispatchers=ok"]
    );
    assert_eq!(get(&on_admin("/healthz"), None).await.status, 200);
    let metrics = get(&on_admin("/metrics"), None).await;
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    for series in [
        "idemgate_deliveries_total{source=\"stripe-live\",outcome=\"accepted\"} 1",
        "idemgate_request_duration_seconds_count{source=\"stripe-live\"} 1",
        "idemgate_build_info{version=\"",
        "process_resident_memory_bytes ",
    ] {
        assert!(text.contains(series), "no {series} in\n{text}");
    }
    assert_eq!(get(&on_admin("/dashboard"), None).await.status, 200);
    assert_eq!(get(&on_admin("/openapi.json"), None).await.status, 200);
    let r = get(&on_admin("/hooks/stripe-live"), None).await;
    assert_eq!(r.status, 404, "deliveries are the public listener's");
    let r = get(&on_admin("/v1/events/stripe-live/evt_a1"), Some(TOKEN)).await;
    assert_eq!(r.status, 404);

    // A newer binary migrated the schema past this one's (a rolling upgrade): still ready, saying
    // so; one older than it needs (a restored backup): not ready.
    let db = gw.data_dir().join(idemgate_sqlite::DB_FILE);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let known: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let schema_check = |body: &serde_json::Value, field: &str| {
        body[field]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "schema")
            .unwrap()
            .clone()
    };
    conn.pragma_update(None, "user_version", known + 1).unwrap();
    let r = get(&on_admin("/readyz"), None).await;
    assert_eq!((r.status, r.outcome()), (200, "ready"), "{}", r.json());
    let schema = schema_check(&r.json(), "checks");
    assert_eq!(schema["status"], "newer", "{schema}");
    assert!(
        schema["error"]
            .as_str()
            .unwrap()
            .contains("rolling upgrade"),
        "{schema}"
    );
    conn.pragma_update(None, "user_version", known - 1).unwrap();
    let r = get(&on_admin("/readyz"), None).await;
    assert_eq!((r.status, r.outcome()), (503, "not_ready"), "{}", r.json());
    let body = r.json();
    assert!(
        body["detail"].as_str().unwrap().contains("schema"),
        "{body}"
    );
    let schema = schema_check(&body, "components");
    assert_eq!(schema["status"], "older", "{schema}");
    assert!(
        schema["error"]
            .as_str()
            .unwrap()
            .contains("run idemgate migrate"),
        "{schema}"
    );
    conn.pragma_update(None, "user_version", known).unwrap();
    assert_eq!(get(&on_admin("/readyz"), None).await.status, 200);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_source_without_its_dispatcher_is_not_ready() {
    use tower::ServiceExt;
    // The router alone, over an in-memory store, not served: nothing dispatches the inbox.
    let config = idemgate_gateway::Config::from_toml(
        "[[source]]\nname = \"jobs\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n\
         mode = \"inbox\"\nforward_url = \"http://127.0.0.1:9/\"\n",
    )
    .unwrap();
    let state =
        idemgate_gateway::AppState::new(&config, idemgate::AnyStore::memory(), None).unwrap();
    let answer = idemgate_gateway::app(state)
        .oneshot(
            axum::http::Request::get("/readyz")
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(answer.status(), 503);
    let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let dispatchers = body["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "dispatchers")
        .unwrap()
        .clone();
    assert_eq!(dispatchers["status"], "stopped", "{body}");
    assert!(
        dispatchers["error"].as_str().unwrap().contains("jobs"),
        "{body}"
    );
}
