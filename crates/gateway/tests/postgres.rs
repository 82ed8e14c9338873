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
            .all(|o| ["forwarded", "in_flight", "duplicate"].contains(&o.as_str()))
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

/// A gateway on `schema` with one claim-API source, `jobs`, and the worker token
/// `worker-token-0123456789`.
async fn jobs_gateway(schema: &Schema) -> Gateway {
    let config = format!(
        "api_tokens = [\"worker-token-0123456789\"]\n[[source]]\nname = \"jobs\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_header = \"x-id\"\n{}",
        schema.store_toml()
    );
    Gateway::start_with(&config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_api_on_postgres() {
    let Some(schema) = Schema::new("api").await else {
        return;
    };
    let gw = jobs_gateway(&schema).await;
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

/// Renames the schema's dedup table away (every store call then fails) or back.
async fn break_store(schema: &str, broken: bool) {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let (from, to) = if broken {
        ("dedup", "dedup_away")
    } else {
        ("dedup_away", "dedup")
    };
    client
        .batch_execute(&format!("ALTER TABLE {schema}.{from} RENAME TO {to}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_the_store_missed_is_retried_and_the_event_never_forwarded_again() {
    let Some(schema) = Schema::new("lost_completion").await else {
        return;
    };
    // A downstream that takes the delivery, and at that very moment the store goes away; it
    // comes back a second later.
    let forwards = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let (forwards, name) = (forwards.clone(), schema.name.clone());
            move || {
                let (forwards, name) = (forwards.clone(), name.clone());
                async move {
                    if forwards.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                        break_store(&name, true).await;
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            break_store(&name, false).await;
                        });
                    }
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let down = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let config = format!(
        "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = \"{down}\"\nlease = \"2s\"\n{}",
        schema.store_toml()
    );
    let gw = Gateway::start_with(&config).await;
    let body = br#"{"id":"evt_lost","object":"event"}"#.to_vec();
    let at = SystemTime::now();
    let r = gw
        .post(
            "/hooks/stripe-live",
            sign(&gw, "stripe-live", "evt_lost", at, &body),
            body.clone(),
        )
        .await;
    // The downstream has it: the sender is told so.
    assert_eq!((r.status, r.outcome()), (200, "forwarded"));

    // While the store is away and the completion pending, a retry is answered as a duplicate by
    // the gateway itself: the event was processed.
    let r = gw
        .post(
            "/hooks/stripe-live",
            sign(&gw, "stripe-live", "evt_lost", at, &body),
            body.clone(),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"), "{:?}", r.body);
    assert_eq!(r.json()["completion"], "pending");

    // Well past the lease, every retry is a duplicate: the completion was retried until the store
    // took it, and the event was forwarded once.
    tokio::time::sleep(Duration::from_secs(4)).await;
    for _ in 0..3 {
        let r = gw
            .post(
                "/hooks/stripe-live",
                sign(&gw, "stripe-live", "evt_lost", SystemTime::now(), &body),
                body.clone(),
            )
            .await;
        assert_eq!((r.status, r.outcome()), (200, "duplicate"), "{:?}", r.body);
    }
    assert_eq!(forwards.load(std::sync::atomic::Ordering::SeqCst), 1);
    gw.stop().await;
    schema.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_answers_503_with_retry_after() {
    let Some(schema) = Schema::new("unavailable").await else {
        return;
    };
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!(
        "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = \"{}\"\n{}",
        down.url,
        schema.store_toml()
    );
    let gw = Gateway::start_with(&config).await;
    break_store(&schema.name, true).await;
    let body = br#"{"id":"evt_503","object":"event"}"#.to_vec();
    let r = gw
        .post(
            "/hooks/stripe-live",
            sign(&gw, "stripe-live", "evt_503", SystemTime::now(), &body),
            body.clone(),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (503, "store_unavailable"));
    assert_eq!(
        r.headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert_eq!(r.json()["type"], "urn:idemgate:problem:store_unavailable");
    break_store(&schema.name, false).await;
    let r = gw
        .post(
            "/hooks/stripe-live",
            sign(&gw, "stripe-live", "evt_503", SystemTime::now(), &body),
            body,
        )
        .await;
    assert_eq!(r.outcome(), "forwarded");
    assert_eq!(down.total(), 1);
    gw.stop().await;
    schema.drop().await;
}

/// Two gateways on one PostgreSQL share one inbox queue: deliveries spread across both, each
/// event delivered once (items are taken with SKIP LOCKED under a lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gateways_share_one_inbox_without_double_delivery() {
    let Some(schema) = Schema::new("inbox_shared").await else {
        return;
    };
    let down = Downstream::start(Behaviour::Slow(Duration::from_millis(20))).await;
    let config = |instance: &str| {
        format!(
            "instance = \"{instance}\"\n[[source]]\nname = \"shop\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n\
             mode = \"inbox\"\nforward_url = \"{}\"\n[source.dispatch]\nconcurrency = 4\n{}",
            down.url,
            schema.store_toml()
        )
    };
    let a = Gateway::start_with(&config("gw-a")).await;
    let b = Gateway::start_with(&config("gw-b")).await;
    const EVENTS: usize = 120;
    for i in 0..EVENTS {
        let gw = if i % 2 == 0 { &a } else { &b };
        let id = format!("evt_{i}");
        let body = format!("{{\"id\": \"{id}\"}}").into_bytes();
        let signed = sign(gw, "shop", &id, SystemTime::now(), &body);
        let r = gw.post("/hooks/shop", signed.clone(), body.clone()).await;
        assert_eq!((r.status, r.outcome()), (202, "queued"), "{:?}", r.body);
        // The other gateway sees the same store: a duplicate.
        let other = if i % 2 == 0 { &b } else { &a };
        let r = other.post("/hooks/shop", signed, body).await;
        assert_eq!(r.outcome(), "duplicate");
    }
    let started = std::time::Instant::now();
    while down.total() < EVENTS {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} of {EVENTS} delivered",
            down.total()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..EVENTS {
        assert_eq!(down.attempts(&format!("shop:evt_{i}")), [1], "evt_{i}");
    }
    let text = String::from_utf8_lossy(&a.get("/metrics").await.unwrap().body).into_owned();
    assert!(
        text.contains("idemgate_inbox_pending{source=\"shop\"} 0")
            || !text.contains("idemgate_inbox_pending{"),
        "{text}"
    );
    a.stop().await;
    b.stop().await;
    schema.drop().await;
}

/// The dashboard's page as text, and whether the gateway answered it within `limit` (a page
/// never waits for a count that cannot finish).
async fn dashboard(gw: &Gateway, limit: Duration) -> String {
    let page = tokio::time::timeout(limit, gw.get("/dashboard?refresh=off"))
        .await
        .unwrap_or_else(|_| panic!("/dashboard did not answer within {limit:?}"))
        .unwrap();
    assert_eq!(page.status, 200);
    String::from_utf8(page.body.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_or_a_lookup_that_takes_long_is_not_waited_for() {
    let Some(schema) = Schema::new("dash_count").await else {
        return;
    };
    let gw = jobs_gateway(&schema).await;
    let auth = headers(&[("authorization", "Bearer worker-token-0123456789")]);
    let body = serde_json::json!({"source": "jobs", "event_id": "j-1"}).to_string();
    assert_eq!(gw.post("/v1/claims", auth, body).await.status, 201);

    // Another session holds history locked: counting its rows waits for that session, and so
    // does everything else that reads history, a lookup too.
    let (locker, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let lock = format!(
        "BEGIN; LOCK TABLE {}.history IN ACCESS EXCLUSIVE MODE",
        schema.name
    );
    locker.batch_execute(&lock).await.unwrap();
    let page = dashboard(&gw, Duration::from_secs(10)).await;
    assert!(page.contains("data-stats-pending"), "{page}");
    assert!(page.contains("records are being counted"), "{page}");
    let store = &page[page.find("data-component=\"store\"").unwrap()..];
    assert!(
        store[..400].contains("FAILING")
            && store[..400].contains("a lookup had no answer within 1000 ms"),
        "{store}"
    );
    // So is /healthz: the store is down, not waited for.
    let health = tokio::time::timeout(Duration::from_secs(10), gw.get("/healthz"))
        .await
        .expect("/healthz did not answer within 10 s")
        .unwrap();
    assert_eq!(health.status, 503);
    let components = &health.json()["components"];
    assert_eq!(components[0]["status"], "down", "{components}");
    assert_eq!(
        components[0]["error"], "a lookup had no answer within 1000 ms",
        "{components}"
    );
    locker.batch_execute("COMMIT").await.unwrap();

    // Once the lock is gone the count behind the page ends; a reload shows its figures.
    let mut counted = String::new();
    for _ in 0..100 {
        counted = dashboard(&gw, Duration::from_secs(10)).await;
        if !counted.contains("data-stats-pending") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        counted.contains("live records <strong>1</strong>, expired not yet swept <strong>0</strong>, history rows <strong>1</strong>"),
        "{counted}"
    );

    // Figures older than a few seconds are counted again; while that waits, the page shows the
    // last ones and says how old they are.
    tokio::time::sleep(Duration::from_secs(6)).await;
    locker.batch_execute(&lock).await.unwrap();
    let page = dashboard(&gw, Duration::from_secs(10)).await;
    assert!(
        page.contains("live records <strong>1</strong>") && page.contains("ago; counting again)"),
        "{page}"
    );
    locker.batch_execute("COMMIT").await.unwrap();
    gw.stop().await;
    schema.drop().await;
}

/// A database that stops answering (packets held, not refused): deliveries get 503 with
/// `Retry-After` quickly (within a second once the store is known to fail), `/healthz` says so,
/// nothing is forwarded twice, and the gateway serves again once the database is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_blackholed_database_is_answered_503_fast_and_recovered_from() {
    use idemgate_postgres::testing::{FaultyLink, LinkMode};
    use std::time::Instant;
    let Some(schema) = Schema::new("blackhole").await else {
        return;
    };
    let pg: tokio_postgres::Config = url().parse().unwrap();
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    let upstream = tokio::net::lookup_host(("127.0.0.1", port))
        .await
        .unwrap()
        .next()
        .unwrap();
    let link = FaultyLink::start(upstream).await.unwrap();
    let linked_url = format!(
        "postgres://{}@{}/{}?sslmode=disable",
        pg.get_user().unwrap_or("root"),
        link.addr(),
        pg.get_dbname().unwrap_or("test")
    );
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!(
        "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = \"{}\"\n[store]\nkind = \"postgres\"\nurl = {:?}\n[store.postgres]\nschema = {:?}\n",
        down.url, linked_url, schema.name
    );
    let gw = Gateway::start_with(&config).await;
    let send = |id: &str| {
        let body = serde_json::to_vec(&serde_json::json!({"id": id})).unwrap();
        let signed = sign(&gw, "stripe-live", id, SystemTime::now(), &body);
        gw.post("/hooks/stripe-live", signed, body)
    };
    assert_eq!(send("evt_before").await.status, 200);

    link.set(LinkMode::Blackhole);
    let mut slowest_after_first = Duration::ZERO;
    for i in 0..6 {
        let started = Instant::now();
        let r = send(&format!("evt_during_{}", i % 2)).await;
        let took = started.elapsed();
        assert_eq!(
            (r.status, r.outcome()),
            (503, "store_unavailable"),
            "{:?}",
            r.body
        );
        assert!(r.headers.contains_key("retry-after"));
        assert!(took < Duration::from_secs(4), "{i}: {took:?}");
        if i > 0 {
            slowest_after_first = slowest_after_first.max(took);
        }
    }
    assert!(
        slowest_after_first < Duration::from_millis(1_500),
        "a store known to fail is answered within a second: {slowest_after_first:?}"
    );
    let started = Instant::now();
    let health = gw.get("/healthz").await.unwrap();
    assert_eq!(health.status, 503, "{:?}", health.body);
    assert!(started.elapsed() < Duration::from_secs(2));

    link.set(LinkMode::Forward);
    let started = Instant::now();
    let mut ok = 0;
    while started.elapsed() < Duration::from_secs(20) && ok < 2 {
        ok = 0;
        for i in 0..2 {
            let r = send(&format!("evt_during_{i}")).await;
            if r.status == 200 {
                ok += 1;
            }
        }
        if ok < 2 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    assert_eq!(ok, 2, "not recovered within 20 s");
    assert_eq!(gw.get("/healthz").await.unwrap().status, 200);
    for i in 0..2 {
        assert_eq!(
            down.attempts(&format!("stripe-live:evt_during_{i}")).len(),
            1,
            "forwarded once"
        );
    }
    gw.stop().await;
    schema.drop().await;
}
