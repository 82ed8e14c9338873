//! Store mode on the shared standalone Redis: the conformance suite (one key prefix per case,
//! deleted afterwards), key safety, and the start-up checks on servers the tests start.

mod common;

use std::time::Duration;

use common::{TestServer, WHAT_TO_INSTALL, standalone_harness};
use idemgate_core::testkit::{Harness, require_service};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};
use idemgate_redis::{RedisConfig, RedisError, RedisStore};

idemgate_core::conformance_tests!(standalone_harness());
idemgate_core::history_conformance_tests!(standalone_harness());

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
