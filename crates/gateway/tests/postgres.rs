//! The gateway on PostgreSQL: deliveries, concurrency and the claim API against a real server.
//!
//! Reads `IDEMGATE_TEST_POSTGRES` (default `postgres://root@localhost/test`); each test runs in a
//! schema of its own, dropped afterwards. Unreachable: fails with `CI` set, else skips.

mod support;

use std::time::{Duration, SystemTime};

use support::{Behaviour, Downstream, Gateway, headers, sign};

const START: &str = "start PostgreSQL on 127.0.0.1:5432 (trust auth) or set IDEMGATE_TEST_POSTGRES";

fn url() -> String {
    std::env::var("IDEMGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@localhost/test".into())
}

/// A schema name of this test's own, and a guard that drops it.
struct Schema {
    name: String,
}

impl Schema {
    async fn new(test: &str) -> Option<Self> {
        let connected = tokio::time::timeout(
            Duration::from_secs(5),
            tokio_postgres::connect(&url(), tokio_postgres::NoTls),
        )
        .await
        .map_err(|_| "timed out connecting to PostgreSQL".to_owned())
        .and_then(|r| r.map_err(|e| format!("cannot connect to PostgreSQL at {}: {e}", url())));
        let (client, conn) = idemgate_core::testkit::require_service(connected, START)?;
        tokio::spawn(conn);
        let name = format!("gw_{test}_{}", std::process::id());
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
            .await
            .unwrap();
        Some(Self { name })
    }

    async fn drop(self) {
        let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
            .await
            .unwrap();
    }

    fn store_toml(&self) -> String {
        format!(
            "[store]\nkind = \"postgres\"\nurl = {:?}\n[store.postgres]\nschema = {:?}\n",
            url(),
            self.name
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deliveries_and_duplicates_on_postgres() {
    let Some(schema) = Schema::new("deliveries").await else {
        return;
    };
    let down = Downstream::start(Behaviour::Slow(Duration::from_millis(200))).await;
    let config = format!(
        "[[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"s3cret\"]\nforward_url = \"{}\"\n{}",
        down.url,
        schema.store_toml()
    );
    let gw = std::sync::Arc::new(Gateway::start_with(&config).await);
    assert_eq!(
        gw.get("/healthz").await.unwrap().json()["store"],
        "postgres"
    );
    let body = br#"{"action":"opened"}"#.to_vec();
    let signed = sign(&gw, "gh", "delivery-1", SystemTime::now(), &body);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (gw, signed, body) = (gw.clone(), signed.clone(), body.clone());
            tokio::spawn(async move {
                gw.post("/hooks/gh", signed, body)
                    .await
                    .outcome()
                    .to_owned()
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.unwrap());
    }
    assert_eq!(
        outcomes.iter().filter(|o| *o == "forwarded").count(),
        1,
        "{outcomes:?}"
    );
    assert!(
        outcomes
            .iter()
            .all(|o| ["forwarded", "in-flight", "duplicate"].contains(&o.as_str()))
    );
    assert_eq!(down.attempts("gh:delivery-1"), [1]);
    let r = gw.post("/hooks/gh", signed, body).await;
    assert_eq!(r.outcome(), "duplicate");

    // A failed forward is released; the retry is processed.
    down.set(Behaviour::Fail);
    let body = br#"{"action":"closed"}"#.to_vec();
    let signed = sign(&gw, "gh", "delivery-2", SystemTime::now(), &body);
    assert_eq!(
        gw.post("/hooks/gh", signed.clone(), body.clone())
            .await
            .status,
        502
    );
    down.set(Behaviour::Ok);
    assert_eq!(
        gw.post("/hooks/gh", signed, body).await.outcome(),
        "forwarded"
    );

    std::sync::Arc::into_inner(gw).unwrap().stop().await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_api_on_postgres() {
    let Some(schema) = Schema::new("api").await else {
        return;
    };
    let config = format!(
        "api_tokens = [\"worker-token-0123456789\"]\n[[source]]\nname = \"jobs\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_header = \"x-id\"\n{}",
        schema.store_toml()
    );
    let gw = Gateway::start_with(&config).await;
    let auth = headers(&[("authorization", "Bearer worker-token-0123456789")]);
    let body = serde_json::json!({"source": "jobs", "event_id": "j-1"}).to_string();
    let r = gw.post("/v1/claims", auth.clone(), body.clone()).await;
    assert_eq!(r.status, 201, "{:?}", r.body);
    let token = r.json()["token"].as_str().unwrap().to_owned();
    assert_eq!(
        gw.post("/v1/claims", auth.clone(), body.clone())
            .await
            .status,
        409
    );
    let done = gw
        .post(
            "/v1/claims/jobs/j-1/complete",
            auth.clone(),
            serde_json::json!({"token": token}).to_string(),
        )
        .await;
    assert_eq!(done.outcome(), "completed");
    let r = gw.post("/v1/claims", auth.clone(), body).await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"));
    let r = support::send(
        axum::http::Method::GET,
        &gw.url("/v1/events/jobs/j-1"),
        auth,
        Default::default(),
    )
    .await
    .unwrap();
    let history: Vec<_> = r.json()["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(history, ["claimed", "in_flight", "completed", "duplicate"]);
    gw.stop().await;
    schema.drop().await;
}
