//! The gateway with Redis: as a tier in front of SQLite, and as the store. Each test starts its
//! own `redis-server` on a free loopback port (the shared one on 6379 is never flushed).

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use support::{Behaviour, Downstream, Gateway, sign};

/// A private redis-server, stopped on drop.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let spawned = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run redis-server: {e}"));
        let child = idemgate_core::testkit::require_service(
            spawned,
            "install redis-server (Debian package redis-server)",
        )?;
        let url = format!("redis://127.0.0.1:{port}");
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Some(Self { child, url });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {port} did not come up");
    }

    fn cli(&self, args: &[&str]) {
        let port = self.url.rsplit(':').next().unwrap();
        let ok = Command::new("redis-cli")
            .args(["-p", port])
            .args(args)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "redis-cli {args:?}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn source(down: &Downstream) -> String {
    format!(
        "[[source]]\nname = \"gh\"\nprovider = \"github\"\nsecrets = [\"s3cret\"]\nforward_url = \"{}\"\n",
        down.url
    )
}

async fn deliver(gw: &Gateway, id: &str) -> String {
    let body = format!("{{\"id\":\"{id}\"}}").into_bytes();
    let h = sign(gw, "gh", id, SystemTime::now(), &body);
    gw.post("/hooks/gh", h, body).await.outcome().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flush_in_the_middle_never_lets_a_duplicate_through() {
    let Some(redis) = Server::start() else { return };
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!("{}[store.redis]\nurl = {:?}\n", source(&down), redis.url);
    let gw = std::sync::Arc::new(Gateway::start(&config).await);
    assert_eq!(
        gw.get("/healthz").await.unwrap().json()["store"],
        "sqlite+redis"
    );
    for round in 0..4 {
        let mut tasks = Vec::new();
        for i in 0..30 {
            let gw = gw.clone();
            tasks.push(tokio::spawn(async move {
                deliver(&gw, &format!("d-{i}")).await
            }));
        }
        for t in tasks {
            let outcome = t.await.unwrap();
            assert!(
                ["forwarded", "duplicate", "in_flight"].contains(&outcome.as_str()),
                "{outcome}"
            );
        }
        if round == 1 {
            redis.cli(&["FLUSHALL"]);
        }
    }
    for i in 0..30 {
        assert_eq!(
            down.attempts(&format!("gh:d-{i}")).len(),
            1,
            "d-{i} was forwarded once"
        );
    }
    let m = String::from_utf8(gw.get("/metrics").await.unwrap().body.to_vec()).unwrap();
    let hits: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("idemgate_redis_tier_total{result=\"hit\"} "))
        .expect("tier counters in /metrics")
        .parse()
        .unwrap();
    assert!(hits > 0, "duplicates were answered from Redis:\n{m}");
    // The dashboard shows the tier's hit rate from the same counters.
    let misses: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("idemgate_redis_tier_total{result=\"miss\"} "))
        .expect("tier misses in /metrics")
        .parse()
        .unwrap();
    let page = String::from_utf8(gw.get("/dashboard").await.unwrap().body.to_vec()).unwrap();
    let rate = format!(
        "{:.1}% ({hits} hits, {misses} misses)",
        hits as f64 * 100.0 / (hits + misses) as f64
    );
    assert!(
        page.contains(&format!("<dd id=\"tier-hit-rate\">{rate}</dd>")),
        "{rate} in\n{page}"
    );
    assert!(
        page.contains(&format!("answers; hit rate {rate}")),
        "{page}"
    );
    std::sync::Arc::into_inner(gw).unwrap().stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_down_at_start_still_serves_from_sql() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!(
        "{}[store.redis]\nurl = \"redis://{closed}\"\n",
        source(&down)
    );
    let gw = Gateway::start(&config).await;
    assert_eq!(deliver(&gw, "e-1").await, "forwarded");
    assert_eq!(deliver(&gw, "e-1").await, "duplicate");
    assert_eq!(down.attempts("gh:e-1").len(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_as_the_store() {
    let Some(redis) = Server::start() else { return };
    // The private server evicts nothing (noeviction is redis-server's default).
    let down = Downstream::start(Behaviour::Ok).await;
    let config = format!(
        "{}[store]\nkind = \"redis\"\n[store.redis]\nurl = {:?}\nkey_prefix = \"gw-test:\"\n",
        source(&down),
        redis.url
    );
    let gw = Gateway::start_with(&config).await;
    assert_eq!(gw.get("/healthz").await.unwrap().json()["store"], "redis");
    assert_eq!(deliver(&gw, "r-1").await, "forwarded");
    assert_eq!(deliver(&gw, "r-1").await, "duplicate");
    assert_eq!(down.attempts("gh:r-1").len(), 1);
    // The dashboard says what the Redis store cannot show, and that it needs no sweeper.
    let page = String::from_utf8(gw.get("/dashboard").await.unwrap().body.to_vec()).unwrap();
    assert!(
        page.contains("Deliveries over time are not available on this store"),
        "{page}"
    );
    assert!(page.contains("not needed: Redis expires its keys itself"));
    // An event's page answers on a store without an inbox (no queue items to show).
    let event = gw.get("/dashboard/events/gh/r-1").await.unwrap();
    assert_eq!(event.status, 200);
    let event = String::from_utf8(event.body.to_vec()).unwrap();
    assert!(event.contains("r-1"), "{event}");
    gw.stop().await;
}

#[test]
fn redis_config_errors_name_the_key() {
    use idemgate_gateway::Config;
    for (text, key) in [
        ("[store]\nkind = \"redis\"\n", "store.redis"),
        ("[store.redis]\n", "store.redis.url"),
        (
            "[store.redis]\nurl = \"redis://a\"\ncluster_nodes = [\"redis://b\"]\n",
            "store.redis.url",
        ),
        ("[store.redis]\nurl = \"redis://a\"\nttl = 3\n", "ttl"),
    ] {
        let err = Config::from_toml(text).expect_err(text).to_string();
        assert!(err.contains(key), "{err:?} should name {key:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_the_tier_apart_and_a_tier_down_is_degraded() {
    let Some(server) = Server::start() else {
        return;
    };
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&format!(
        "{}[store.redis]\nurl = \"{}\"\n",
        source(&down),
        server.url
    ))
    .await;
    let r = gw.get("/healthz").await.unwrap();
    let v = r.json();
    assert_eq!((r.status, r.outcome()), (200, "healthy"), "{v}");
    assert_eq!(v["status"], "ok");
    assert_eq!(v["components"][0]["name"], "store");
    assert_eq!(v["components"][0]["engine"], "sqlite+redis");
    assert_eq!(v["components"][1]["name"], "redis-tier");
    assert_eq!(v["components"][1]["status"], "ok");
    // store_ms is to the microsecond.
    let ms = v["store_ms"].as_f64().unwrap();
    assert_eq!((ms * 1000.0).round() / 1000.0, ms);

    // Redis goes away: still 200 (the store serves), but degraded, with the tier's reason.
    drop(server);
    let r = gw.get("/healthz").await.unwrap();
    let v = r.json();
    assert_eq!((r.status, r.outcome()), (200, "degraded"), "{v}");
    assert_eq!(v["status"], "degraded");
    assert_eq!(v["components"][0]["status"], "ok");
    assert_eq!(v["components"][1]["status"], "down");
    assert!(
        v["components"][1]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{v}"
    );
    // Deliveries still go through.
    assert_eq!(deliver(&gw, "evt_degraded").await, "forwarded");
    gw.stop().await;
}
