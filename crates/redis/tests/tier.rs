//! Tier mode: Redis in front of an inner store (here the in-memory store on the system clock).
//!
//! The conformance suite runs on the tier over the shared Redis (a key prefix per case). The
//! failure cases run on redis-servers the tests start themselves: a `FLUSHALL` in the middle of a
//! duplicate storm, a tiny `maxmemory` under `allkeys-lru`, and no Redis at all.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Cleanup, TestServer, WHAT_TO_INSTALL, WHAT_TO_START, redis_url, unique_prefix};
use idemgate_core::testkit::{self, Harness, RealTimeHarness, require_service};
use idemgate_core::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, Fingerprint, Identity, Key, MemoryStore,
    RESULT_LIMIT, RecordResult, StoreError, StoredResult,
};
use idemgate_redis::{TierConfig, TieredStore};

#[derive(Debug)]
struct TierHarness {
    inner: RealTimeHarness<TieredStore<MemoryStore>>,
    _cleanup: Cleanup,
}

impl testkit::Harness for TierHarness {
    type Store = TieredStore<MemoryStore>;
    fn store(&self) -> Self::Store {
        self.inner.store.clone()
    }
    async fn advance(&self, d: Duration) {
        self.inner.advance(d).await;
    }
}

/// Whether the shared Redis answers (the tier itself never fails for an absent Redis).
async fn shared_redis_up(url: &str) -> Result<(), redis::RedisError> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    redis::cmd("PING")
        .query_async::<String>(&mut con)
        .await
        .map(drop)
}

async fn tier_harness() -> Option<TierHarness> {
    let url = redis_url();
    require_service(shared_redis_up(&url).await, WHAT_TO_START)?;
    let prefix = unique_prefix();
    let mut cfg = TierConfig::new(url.clone());
    cfg.key_prefix = prefix.clone();
    let store = TieredStore::new(MemoryStore::new(), cfg).expect("tier config");
    Some(TierHarness {
        inner: RealTimeHarness { store },
        _cleanup: Cleanup { url, prefix },
    })
}

idemgate_core::conformance_tests!(tier_harness());
idemgate_core::instances_conformance_tests!(tier_harness());

const LEASE: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(600);

fn req(key: &Key) -> ClaimRequest {
    ClaimRequest::new(key.clone(), LEASE, TTL).fingerprint(Fingerprint([1; 32]))
}

fn tier_on(url: String) -> TieredStore<MemoryStore> {
    let mut cfg = TierConfig::new(url);
    cfg.key_prefix = unique_prefix();
    // Tests want Redis retried at once after a failure.
    cfg.retry_after = Duration::from_millis(20);
    TieredStore::new(MemoryStore::new(), cfg).expect("tier config")
}

/// `workers` tasks deliver every key `rounds` times in a shuffled order, completing what they
/// claim, while `disturb` runs beside them. Returns how often each key was processed (claimed).
async fn storm<F, Fut>(
    store: &TieredStore<MemoryStore>,
    keys: usize,
    workers: usize,
    rounds: usize,
    disturb: F,
) -> HashMap<Key, usize>
where
    F: FnOnce(Arc<AtomicBool>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let keys: Arc<Vec<Key>> = Arc::new(
        (0..keys)
            .map(|i| Key::parse("storm", &format!("evt-{i}")).unwrap())
            .collect(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let disturber = tokio::spawn(disturb(done.clone()));
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let store = store.clone();
            let keys = keys.clone();
            tokio::spawn(async move {
                let mut processed: HashMap<Key, usize> = HashMap::new();
                for round in 0..rounds {
                    for i in 0..keys.len() {
                        let key = &keys[(i * 7 + w * 13 + round * 31) % keys.len()];
                        match store.claim(req(key)).await.expect("claim") {
                            ClaimOutcome::Claimed { token, .. } => {
                                *processed.entry(key.clone()).or_default() += 1;
                                store.complete(&token).await.expect("complete");
                            }
                            ClaimOutcome::Duplicate { .. } | ClaimOutcome::InFlight { .. } => {}
                            other @ (ClaimOutcome::LateDuplicate { .. }
                            | ClaimOutcome::Conflict { .. }) => panic!("unexpected {other:?}"),
                        }
                    }
                }
                processed
            })
        })
        .collect();
    let mut total: HashMap<Key, usize> = HashMap::new();
    for t in tasks {
        for (k, n) in t.await.expect("worker") {
            *total.entry(k).or_default() += n;
        }
    }
    done.store(true, Ordering::Relaxed);
    disturber.await.expect("disturber");
    for k in keys.iter() {
        assert_eq!(
            total.get(k).copied(),
            Some(1),
            "{k} processed {:?} times",
            total.get(k)
        );
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_mid_run_lets_no_duplicate_through() {
    let Some(server) = require_service(TestServer::start(&[]), WHAT_TO_INSTALL) else {
        return;
    };
    let store = tier_on(server.url());
    let url = server.url();
    storm(&store, 200, 16, 6, move |done| async move {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let mut flushes = 0;
        while !done.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(15)).await;
            redis::cmd("FLUSHALL")
                .query_async::<()>(&mut con)
                .await
                .unwrap();
            flushes += 1;
        }
        assert!(flushes > 0);
    })
    .await;
    let c = store.counters();
    assert!(c.hits > 0, "the cache answered some duplicates: {c:?}");
    assert!(c.misses > 0, "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_redis_lets_no_duplicate_through() {
    let Some(server) = require_service(
        TestServer::start(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]),
        WHAT_TO_INSTALL,
    ) else {
        return;
    };
    let store = tier_on(server.url());
    let url = server.url();
    // Filler keys beside the storm keep the server at its memory limit, so it evicts.
    storm(&store, 300, 16, 6, move |done| async move {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let blob = vec![b'z'; 4096];
        let mut i = 0u64;
        while !done.load(Ordering::Relaxed) {
            let mut pipe = redis::pipe();
            for _ in 0..64 {
                pipe.cmd("SET")
                    .arg(format!("filler:{i}"))
                    .arg(&blob)
                    .ignore();
                i += 1;
            }
            pipe.query_async::<()>(&mut con).await.unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut server.sync_conn())
        .unwrap();
    let evicted: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    assert!(evicted > 0, "the server evicted keys during the run");
    let c = store.counters();
    assert!(c.hits > 0, "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_at_start_serves_from_the_inner_store() {
    let port = common::free_port();
    let store = tier_on(format!("redis://127.0.0.1:{port}"));
    let key = Key::parse("down", "evt-1").unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim(req(&key)).await.unwrap() else {
        panic!("expected Claimed");
    };
    store.complete(&token).await.unwrap();
    for _ in 0..5 {
        let outcome = store.claim(req(&key)).await.unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Duplicate { .. }),
            "{outcome:?}"
        );
    }
    let c = store.counters();
    assert_eq!(c.hits, 0);
    assert!(c.errors > 0, "{c:?}");
    // Releasing a claim that is not done needs no cache.
    let other = Key::parse("down", "evt-2").unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim(req(&other)).await.unwrap() else {
        panic!("expected Claimed");
    };
    store.release(&token).await.unwrap();
    assert!(matches!(
        store.claim(req(&other)).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_skip_the_inner_store_and_release_invalidates() {
    let Some(h) = tier_harness().await else {
        return;
    };
    let store = h.store();
    let key = Key::parse("hits", "evt-1").unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim(req(&key)).await.unwrap() else {
        panic!("expected Claimed");
    };
    store.complete(&token).await.unwrap();
    // The first duplicate asks the inner store and fills the cache; the rest are hits.
    for _ in 0..10 {
        assert!(matches!(
            store.claim(req(&key)).await.unwrap(),
            ClaimOutcome::Duplicate { .. }
        ));
    }
    let c = store.counters();
    assert_eq!((c.hits, c.misses, c.errors), (9, 2, 0), "{c:?}");
    let rows = store.inner().lookup(&key).await.unwrap().history.len();
    assert_eq!(
        rows, 3,
        "claimed, completed, one duplicate: hits write no history"
    );

    // Another fingerprint is not vouched for by the cache: the inner store says Conflict.
    let other = ClaimRequest::new(key.clone(), LEASE, TTL).fingerprint(Fingerprint([2; 32]));
    assert!(matches!(
        store.claim(other).await.unwrap(),
        ClaimOutcome::Conflict { .. }
    ));

    // A completed claim cannot be released: the cached Duplicate stays true.
    assert!(matches!(
        store.release(&token).await,
        Err(StoreError::Completed { .. })
    ));
    assert!(matches!(
        store.claim(req(&key)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));

    // A release of a claim marked done on receipt (its work failed) must not leave a cached
    // Duplicate behind.
    let key = Key::parse("hits", "evt-2").unwrap();
    let ClaimOutcome::Claimed { token, .. } = store
        .claim(req(&key).mode(ClaimMode::OnReceipt))
        .await
        .unwrap()
    else {
        panic!("expected Claimed");
    };
    for _ in 0..3 {
        assert!(matches!(
            store.claim(req(&key)).await.unwrap(),
            ClaimOutcome::Duplicate { .. }
        ));
    }
    store.release(&token).await.unwrap();
    assert!(matches!(
        store.claim(req(&key)).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
}

/// A SQLite store in a directory of its own, behind a tier on the shared Redis under `prefix`.
fn sqlite_tier(dir: &std::path::Path, prefix: &str) -> TieredStore<idemgate_sqlite::SqliteStore> {
    let mut cfg = TierConfig::new(redis_url());
    cfg.key_prefix = prefix.to_owned();
    TieredStore::new(idemgate_sqlite::SqliteStore::open(dir).expect("open"), cfg)
        .expect("tier config")
}

/// Claims and completes `key`, then sends its first duplicate (which fills the cache) and a second
/// (a hit).
async fn processed_and_cached<S: ClaimStore>(tier: &TieredStore<S>, key: &Key) {
    let ClaimOutcome::Claimed { token, .. } = tier.claim(req(key)).await.unwrap() else {
        panic!("expected Claimed");
    };
    tier.complete(&token).await.unwrap();
    for _ in 0..2 {
        assert!(matches!(
            tier.claim(req(key)).await.unwrap(),
            ClaimOutcome::Duplicate { .. }
        ));
    }
    assert_eq!(
        tier.counters().hits,
        1,
        "the second duplicate came from Redis"
    );
}

/// Two gateways on two databases, one Redis, one prefix: a duplicate in one store is news to the
/// other, and each keeps its own cache (no store's fill or release touches the other's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_sharing_one_redis_and_prefix_never_share_answers() {
    let url = redis_url();
    if require_service(shared_redis_up(&url).await, WHAT_TO_START).is_none() {
        return;
    }
    let prefix = unique_prefix();
    let _cleanup = Cleanup {
        url,
        prefix: prefix.clone(),
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (
        sqlite_tier(dir_a.path(), &prefix),
        sqlite_tier(dir_b.path(), &prefix),
    );
    assert_ne!(a.store_id(), b.store_id());
    assert_eq!(a.store_id(), a.inner().store_id());
    let key = Key::parse("shared", "evt-1").unwrap();
    processed_and_cached(&a, &key).await;

    // Store B never saw the event: it is B's to process, whatever A's cache holds.
    let ClaimOutcome::Claimed { token, .. } = b.claim(req(&key)).await.unwrap() else {
        panic!("store B answered from store A's cache");
    };
    assert_eq!(b.counters().hits, 0);
    // B's release (its tombstone) leaves A's cached answer alone.
    b.release(&token).await.unwrap();
    assert!(matches!(
        a.claim(req(&key)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    assert_eq!(a.counters().hits, 2);
}

/// A database deleted and created again is a new store: it answers nothing from the cache its
/// predecessor filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_database_does_not_answer_from_the_old_cache() {
    let url = redis_url();
    if require_service(shared_redis_up(&url).await, WHAT_TO_START).is_none() {
        return;
    }
    let prefix = unique_prefix();
    let _cleanup = Cleanup {
        url,
        prefix: prefix.clone(),
    };
    let dir = tempfile::tempdir().unwrap();
    let key = Key::parse("wiped", "evt-1").unwrap();
    let old_id = {
        let old = sqlite_tier(dir.path(), &prefix);
        processed_and_cached(&old, &key).await;
        old.store_id().to_owned()
    };
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let new = sqlite_tier(dir.path(), &prefix);
    assert_ne!(new.store_id(), old_id);
    assert!(
        matches!(
            new.claim(req(&key)).await.unwrap(),
            ClaimOutcome::Claimed { .. }
        ),
        "the new database never saw the event"
    );
    assert_eq!(new.counters().hits, 0);

    // Reopening the same database keeps its id, and its cache.
    let ClaimOutcome::Claimed { .. } = new
        .claim(req(&Key::parse("wiped", "evt-2").unwrap()))
        .await
        .unwrap()
    else {
        panic!("expected Claimed");
    };
    let other = Key::parse("wiped", "evt-3").unwrap();
    processed_and_cached(&new, &other).await;
    let id = new.store_id().to_owned();
    drop(new);
    let reopened = sqlite_tier(dir.path(), &prefix);
    assert_eq!(reopened.store_id(), id);
    assert!(matches!(
        reopened.claim(req(&other)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    assert_eq!(
        reopened.counters().hits,
        1,
        "answered from the cache it filled before"
    );
}

/// A result goes through to the inner store with the completion and is read from there: a
/// duplicate answered from Redis carries none, and nothing the tier writes to Redis holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_is_stored_in_the_inner_store_and_never_cached() {
    let Some(h) = tier_harness().await else {
        return;
    };
    let store = h.store();
    let key = Key::parse("api", "pay-1").unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim(req(&key)).await.unwrap() else {
        panic!("not claimed");
    };
    let marker = b"only-in-the-inner-store".to_vec();
    let result = StoredResult::new(201)
        .header("content-type", "text/plain")
        .body(marker.clone());
    store
        .complete_with(&token, &result, RESULT_LIMIT)
        .await
        .unwrap();
    let kept = RecordResult::Stored(result);
    let inner = store.inner().lookup(&key).await.unwrap().record.unwrap();
    assert_eq!(inner.result, kept);

    // The first duplicate asks the inner store and fills the cache; the next is a hit.
    for _ in 0..2 {
        assert!(matches!(
            store.claim(req(&key)).await.unwrap(),
            ClaimOutcome::Duplicate { .. }
        ));
    }
    assert_eq!(store.counters().hits, 1);
    let view = store.lookup(&key).await.unwrap();
    assert_eq!(view.record.unwrap().result, kept);

    // What Redis holds for the prefix: the cached answer, without the result.
    let client = redis::Client::open(h._cleanup.url.as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", h._cleanup.prefix))
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "the duplicate was cached");
    for k in keys {
        let value: Vec<u8> = redis::cmd("GET")
            .arg(&k)
            .query_async(&mut con)
            .await
            .unwrap();
        assert!(
            !value.windows(marker.len()).any(|w| w == marker),
            "{k} holds the result"
        );
    }
}
