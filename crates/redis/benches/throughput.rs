//! Throughput beside raw Redis, in one run (not a timed test):
//!
//! - tier mode: duplicate answers/s (every claim a cache hit) beside raw `GET`s;
//! - store mode: claims/s (every claim a first receipt) beside a raw `SET NX PX` loop,
//!   with the per-source history stream on (the default) and off;
//!
//! each at 16 and 64 concurrent tasks on one multiplexed connection, against
//! `IDEMGATE_TEST_REDIS` (default `redis://127.0.0.1:6379`), under a fresh key prefix deleted at
//! the end.
//!
//! ```text
//! cargo bench -p idemgate-redis --bench throughput
//! IDEMGATE_BENCH_SECS=5 cargo bench -p idemgate-redis --bench throughput
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Fingerprint, Key, MemoryStore};
use idemgate_redis::{RedisConfig, RedisStore, TierConfig, TieredStore};
use redis::AsyncCommands;
use redis::aio::ConnectionManager;

const LEASE: Duration = Duration::from_secs(60);
const TTL: Duration = Duration::from_secs(600);
/// Distinct events the duplicate path cycles over.
const HOT_KEYS: usize = 1_000;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

/// Runs `op(task, i)` from `tasks` tasks for `secs`; returns operations per second.
async fn rate<F, Fut>(tasks: usize, secs: Duration, op: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (op, stop, count) = (op.clone(), stop.clone(), count.clone());
            tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    op(t, i).await;
                    i += 1;
                }
                count.fetch_add(i, Ordering::Relaxed);
            })
        })
        .collect();
    tokio::time::sleep(secs).await;
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.await.expect("task");
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn hot_key(i: u64) -> Key {
    Key::parse("bench", &format!("hot-{}", i as usize % HOT_KEYS)).expect("key")
}

fn req(key: Key) -> ClaimRequest {
    ClaimRequest::new(key, LEASE, TTL).fingerprint(Fingerprint([7; 32]))
}

async fn run() {
    let url = std::env::var("IDEMGATE_TEST_REDIS")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let secs = Duration::from_secs_f64(
        std::env::var("IDEMGATE_BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2.0),
    );
    let prefix = format!("idemgate-bench:{}:", std::process::id());
    let client = redis::Client::open(url.as_str()).expect("url");
    let raw = match ConnectionManager::new(client).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "cannot reach Redis at {url}: {e}; start redis-server or set IDEMGATE_TEST_REDIS"
            );
            return;
        }
    };

    // Tier mode: every event completed and its duplicate cached before measuring.
    let mut tier_cfg = TierConfig::new(url.clone());
    tier_cfg.key_prefix = format!("{prefix}tier:");
    let tier = TieredStore::new(MemoryStore::new(), tier_cfg).expect("tier");
    for i in 0..HOT_KEYS as u64 {
        if let ClaimOutcome::Claimed { token, .. } = tier.claim(req(hot_key(i))).await.unwrap() {
            tier.complete(&token).await.unwrap();
        }
        tier.claim(req(hot_key(i))).await.unwrap(); // fills the cache
    }
    let mut con = raw.clone();
    for i in 0..HOT_KEYS {
        let _: () = con
            .set(format!("{prefix}raw:hot-{i}"), "d|1|2|")
            .await
            .unwrap();
    }

    let mut store_cfg = RedisConfig::new(url.clone());
    store_cfg.key_prefix = format!("{prefix}store:");
    let store = RedisStore::connect(store_cfg.clone()).await.expect("store");
    store_cfg.key_prefix = format!("{prefix}nostream:");
    store_cfg.source_stream_maxlen = None;
    let store_nostream = RedisStore::connect(store_cfg).await.expect("store");

    println!(
        "{:<44} {:>6} {:>12} {:>8}",
        "path", "tasks", "ops/s", "vs raw"
    );
    for tasks in [16usize, 64] {
        let raw_get = {
            let (raw, prefix) = (raw.clone(), prefix.clone());
            rate(tasks, secs, move |_, i| {
                let mut con = raw.clone();
                let key = format!("{prefix}raw:hot-{}", i as usize % HOT_KEYS);
                async move {
                    let _: Option<String> = con.get(key).await.unwrap();
                }
            })
            .await
        };
        let tier_dup = {
            let tier = tier.clone();
            rate(tasks, secs, move |_, i| {
                let tier = tier.clone();
                async move {
                    let outcome = tier.claim(req(hot_key(i))).await.unwrap();
                    debug_assert!(matches!(outcome, ClaimOutcome::Duplicate { .. }));
                }
            })
            .await
        };
        let raw_setnx = {
            let (raw, prefix) = (raw.clone(), prefix.clone());
            rate(tasks, secs, move |t, i| {
                let mut con = raw.clone();
                let key = format!("{prefix}raw:new-{tasks}-{t}-{i}");
                async move {
                    let _: Option<String> = redis::cmd("SET")
                        .arg(key)
                        .arg("p|1|0000000000000001||1||1")
                        .arg("NX")
                        .arg("PX")
                        .arg(600_000)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                }
            })
            .await
        };
        // The floor of any script: one SET NX PX inside EVALSHA.
        let lua_setnx = {
            let (raw, prefix) = (raw.clone(), prefix.clone());
            let script = Arc::new(redis::Script::new(
                "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])",
            ));
            rate(tasks, secs, move |t, i| {
                let mut con = raw.clone();
                let script = script.clone();
                let key = format!("{prefix}raw:lua-{tasks}-{t}-{i}");
                async move {
                    let _: Option<String> = script
                        .key(key)
                        .arg("p|1|0000000000000001||1||1")
                        .arg(600_000)
                        .invoke_async(&mut con)
                        .await
                        .unwrap();
                }
            })
            .await
        };
        let mut claims = Vec::new();
        for s in [&store, &store_nostream] {
            let s = s.clone();
            claims.push(
                rate(tasks, secs, move |t, i| {
                    let s = s.clone();
                    let key = Key::parse("bench", &format!("new-{tasks}-{t}-{i}")).unwrap();
                    async move {
                        let outcome = s.claim(req(key)).await.unwrap();
                        debug_assert!(matches!(outcome, ClaimOutcome::Claimed { .. }));
                    }
                })
                .await,
            );
        }
        let c = tier.counters();
        assert_eq!(c.errors, 0, "{c:?}");
        let row = |name: &str, ops: f64, base: f64| {
            println!("{name:<44} {tasks:>6} {ops:>12.0} {:>7.2}x", ops / base);
        };
        row("raw GET", raw_get, raw_get);
        row("tier: duplicate answered from Redis", tier_dup, raw_get);
        row("raw SET NX PX", raw_setnx, raw_setnx);
        row(
            "EVALSHA of a one-line SET NX PX script",
            lua_setnx,
            raw_setnx,
        );
        row(
            "store: claim (Lua, writes the source stream)",
            claims[0],
            raw_setnx,
        );
        row("store: claim (Lua), no source stream", claims[1], raw_setnx);
    }

    // Clean up everything under the prefix.
    let mut con = raw.clone();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(5_000)
            .query_async(&mut con)
            .await
            .unwrap();
        if !keys.is_empty() {
            let _: () = redis::cmd("UNLINK")
                .arg(&keys)
                .query_async(&mut con)
                .await
                .unwrap();
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}
