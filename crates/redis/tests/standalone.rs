//! Store mode on the shared standalone Redis: the conformance suite (one key prefix per case,
//! deleted afterwards), key safety, and the start-up checks on servers the tests start.

mod common;

use std::time::Duration;

use common::{Cleanup, TestServer, WHAT_TO_INSTALL, standalone_harness};
use idemgate_core::testkit::{Harness, require_service};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};
use idemgate_redis::{RedisConfig, RedisError, RedisStore};

idemgate_core::conformance_tests!(standalone_harness());
idemgate_core::history_conformance_tests!(standalone_harness());
idemgate_core::instances_conformance_tests!(standalone_harness());

/// The store id lives under the prefix: every store on it reads the one the first created; another
/// prefix is another store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_id_lives_under_the_prefix() {
    use idemgate_core::Identity;
    let Some(h) = standalone_harness().await else {
        return;
    };
    let id = h.store().store_id().to_owned();
    assert_eq!(id.len(), 32, "{id}");
    let mut same = RedisConfig::new(common::redis_url());
    same.key_prefix = h.store().config().key_prefix.clone();
    assert_eq!(RedisStore::connect(same).await.unwrap().store_id(), id);
    let Some(other) = standalone_harness().await else {
        return;
    };
    assert_ne!(other.store().store_id(), id);
}

/// Records written before holders existed (7 fields) still read, as held by nobody, and a new
/// boot leaves them alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_without_a_holder_field_still_read() {
    use idemgate_core::{InstanceName, Instances};
    let Some(h) = standalone_harness().await else {
        return;
    };
    let store = h.store();
    let key = Key::parse("src", "evt-old").unwrap();
    let prefix = store.config().key_prefix.clone();
    let mut con = redis::Client::open(common::redis_url())
        .unwrap()
        .get_connection()
        .unwrap();
    let (secs, _): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let now = secs * 1_000;
    redis::cmd("HSET")
        .arg(format!("{prefix}{{src/evt-old}}:e"))
        .arg("r")
        .arg(format!(
            "p|1|000000000000002a||{now}|{}|{}",
            now + 60_000,
            now + 600_000
        ))
        .arg("n")
        .arg(0)
        .query::<()>(&mut con)
        .unwrap();
    let rec = store.lookup(&key).await.unwrap().record.unwrap();
    assert_eq!((rec.nonce, rec.holder), (42, None));
    let boot = store
        .register_boot(&idemgate_core::BootRequest::new(
            InstanceName::new("gw-1").unwrap(),
            Duration::from_secs(60),
            "test-host",
        ))
        .await
        .unwrap();
    assert_eq!(boot.freed, 0);
    assert!(matches!(
        store
            .claim(ClaimRequest::new(
                key,
                Duration::from_secs(60),
                Duration::from_secs(600)
            ))
            .await
            .unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_records_and_history() {
    if let Some(h) = standalone_harness().await {
        common::cases::stats_count_records_and_history(&h).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_feed_observe_and_purge_trims_them() {
    if let Some(h) = standalone_harness().await {
        common::cases::streams_feed_observe_and_purge_trims_them(&h).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_that_look_like_key_syntax_stay_apart() {
    let Some(h) = standalone_harness().await else {
        return;
    };
    let store = h.store();
    let ids = [
        "a}b",
        "{a}b",
        "a%7Db",
        "a b",
        "évènement",
        "x}:h",
        "x",
        "{",
        "}",
    ];
    let lease = Duration::from_secs(60);
    let ttl = Duration::from_secs(600);
    for id in ids {
        let key = Key::parse("src", id).unwrap();
        let outcome = store
            .claim(ClaimRequest::new(key.clone(), lease, ttl))
            .await
            .unwrap();
        let ClaimOutcome::Claimed { token, .. } = outcome else {
            panic!("{id:?}: expected Claimed, got {outcome:?}");
        };
        store.complete(&token).await.unwrap();
    }
    for id in ids {
        let key = Key::parse("src", id).unwrap();
        let view = store.lookup(&key).await.unwrap();
        assert_eq!(view.history.len(), 2, "{id:?}: {:?}", view.history);
        assert!(view.record.is_some(), "{id:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_an_evicting_policy_unless_allowed() {
    let Some(server) = require_service(
        TestServer::start(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]),
        WHAT_TO_INSTALL,
    ) else {
        return;
    };
    let err = RedisStore::connect(RedisConfig::new(server.url()))
        .await
        .expect_err("allkeys-lru must be refused");
    match &err {
        RedisError::EvictingPolicy { policy, .. } => assert_eq!(policy, "allkeys-lru"),
        other => panic!("expected EvictingPolicy, got {other:?}"),
    }
    assert!(err.to_string().contains("allow_eviction"), "{err}");

    let mut cfg = RedisConfig::new(server.url());
    cfg.allow_eviction = true;
    let store = RedisStore::connect(cfg).await.expect("allowed explicitly");
    let key = Key::parse("src", "e1").unwrap();
    let req = ClaimRequest::new(key, Duration::from_secs(60), Duration::from_secs(60));
    assert!(matches!(
        store.claim(req).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volatile_policies_are_evicting_too() {
    let Some(server) = require_service(
        TestServer::start(&["--maxmemory-policy", "volatile-ttl"]),
        WHAT_TO_INSTALL,
    ) else {
        return;
    };
    let err = RedisStore::connect(RedisConfig::new(server.url()))
        .await
        .unwrap_err();
    assert!(matches!(err, RedisError::EvictingPolicy { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_a_connect_error() {
    let port = common::free_port();
    let mut cfg = RedisConfig::new(format!("redis://127.0.0.1:{port}"));
    cfg.connect_timeout = Duration::from_millis(200);
    let err = RedisStore::connect(cfg).await.unwrap_err();
    assert!(matches!(err, RedisError::Connect { .. }), "{err:?}");
}

/// A store on the shared Redis under its own prefix, with `tune` applied to its configuration.
async fn tuned_store(tune: impl FnOnce(&mut RedisConfig)) -> Option<(RedisStore, Cleanup)> {
    let url = common::redis_url();
    let prefix = common::unique_prefix();
    let mut cfg = RedisConfig::new(url.clone());
    cfg.key_prefix = prefix.clone();
    tune(&mut cfg);
    let store = require_service(RedisStore::connect(cfg).await, common::WHAT_TO_START)?;
    Some((store, Cleanup { url, prefix }))
}

fn raw_conn() -> redis::Connection {
    redis::Client::open(common::redis_url())
        .unwrap()
        .get_connection()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_duplicates_outlive_a_short_retention_and_a_small_cap() {
    // The history is kept past the record by the retention (1 s) even though the TTL (1.5 s) is
    // longer, and the two duplicates push the completion out of a 2-row cap.
    let Some((store, _cleanup)) = tuned_store(|cfg| {
        cfg.history_retention = Duration::from_secs(1);
        cfg.history_per_event = std::num::NonZeroUsize::new(2).unwrap();
    })
    .await
    else {
        return;
    };
    let key = Key::parse("src", "late-1").unwrap();
    let req = || {
        ClaimRequest::new(
            key.clone(),
            Duration::from_secs(60),
            Duration::from_millis(1_500),
        )
    };
    let ClaimOutcome::Claimed { token, .. } = store.claim(req()).await.unwrap() else {
        panic!("first claim");
    };
    store.complete(&token).await.unwrap();
    for _ in 0..2 {
        let dup = store.claim(req()).await.unwrap();
        assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");
    }
    assert_eq!(
        store.lookup(&key).await.unwrap().history.len(),
        2,
        "the cap holds"
    );
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let late = store
        .claim(req().late_duplicates(idemgate_core::LateDuplicates::Reject))
        .await
        .unwrap();
    assert!(
        matches!(late, ClaimOutcome::LateDuplicate { .. }),
        "expected LateDuplicate, got {late:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_stepped_back_gives_a_zero_gap_not_an_unreadable_row() {
    let Some((store, cleanup)) = tuned_store(|_| {}).await else {
        return;
    };
    // A done record first received a minute from now by this server's clock, as after a
    // failover to a server whose clock is behind.
    let mut con = raw_conn();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let now = secs * 1_000 + micros / 1_000;
    let (ahead, expires) = (now + 60_000, now + 600_000);
    let event = format!("{}{{src/ahead}}:e", cleanup.prefix);
    redis::cmd("HSET")
        .arg(&event)
        .arg("r")
        .arg(format!("d|1|0000000000000001||{ahead}||{expires}"))
        .arg("n")
        .arg(1)
        .arg("h1")
        .arg(format!("claimed|1|1|{ahead}||"))
        .arg("f")
        .arg(ahead)
        .arg("p")
        .arg(1)
        .query::<()>(&mut con)
        .unwrap();
    redis::cmd("PEXPIREAT")
        .arg(&event)
        .arg(expires)
        .query::<()>(&mut con)
        .unwrap();
    let key = Key::parse("src", "ahead").unwrap();
    let dup = store
        .claim(ClaimRequest::new(
            key.clone(),
            Duration::from_secs(60),
            Duration::from_secs(600),
        ))
        .await
        .unwrap();
    assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");
    let view = store.lookup(&key).await.expect("history stays readable");
    assert_eq!(view.history.last().unwrap().gap, Some(Duration::ZERO));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_stream_that_fails_never_fails_the_claim() {
    let Some((store, cleanup)) = tuned_store(|_| {}).await else {
        return;
    };
    // Something else holds the stream's key, so every XADD to it fails.
    let mut con = raw_conn();
    let stream = format!("{}{{src}}:s", cleanup.prefix);
    redis::cmd("SET")
        .arg(&stream)
        .arg("not a stream")
        .query::<()>(&mut con)
        .unwrap();
    let key = Key::parse("src", "streamless").unwrap();
    let req = ClaimRequest::new(
        key.clone(),
        Duration::from_secs(60),
        Duration::from_secs(600),
    );
    let ClaimOutcome::Claimed { token, .. } = store.claim(req).await.unwrap() else {
        panic!("the claim must win");
    };
    let event = format!("{}{{src/streamless}}:e", cleanup.prefix);
    let ttl: i64 = redis::cmd("PTTL").arg(&event).query(&mut con).unwrap();
    assert!(ttl > 600_000, "the event keeps its expiry: {ttl}");
    store.complete(&token).await.unwrap();
    let view = store.lookup(&key).await.unwrap();
    assert_eq!(view.history.len(), 2);
}

/// A completed record's result lives under its own key beside the event's hash, and expires with
/// the record rather than with the history the hash keeps: its expiry is the record's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_key_expires_at_its_records_expiry() {
    use idemgate_core::{RESULT_LIMIT, StoredResult};
    let Some(h) = standalone_harness().await else {
        return;
    };
    let store = h.store();
    let key = Key::parse("api", "pay-9").unwrap();
    let ClaimOutcome::Claimed {
        token, expires_at, ..
    } = store
        .claim(ClaimRequest::new(
            key.clone(),
            Duration::from_secs(30),
            Duration::from_secs(600),
        ))
        .await
        .unwrap()
    else {
        panic!("not claimed");
    };
    store
        .complete_with(
            &token,
            &StoredResult::new(200).body(b"ok".to_vec()),
            RESULT_LIMIT,
        )
        .await
        .unwrap();
    let prefix = store.config().key_prefix.clone();
    let mut con = redis::Client::open(common::redis_url())
        .unwrap()
        .get_connection()
        .unwrap();
    let result_at: i64 = redis::cmd("PEXPIRETIME")
        .arg(format!("{prefix}{{api/pay-9}}:r"))
        .query(&mut con)
        .unwrap();
    assert_eq!(result_at, expires_at.as_millis());
    let event_at: i64 = redis::cmd("PEXPIRETIME")
        .arg(format!("{prefix}{{api/pay-9}}:e"))
        .query(&mut con)
        .unwrap();
    assert!(event_at > result_at, "the history outlives the record");
}
