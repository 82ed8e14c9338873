//! How store mode's Lua runs, on redis-servers this binary starts: the conformance suite on a
//! server without Functions (the scripts' fallback), a server that lost the function library,
//! the hash layout that keeps every value within a listpack, and events written by the layout
//! before it.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{PrefixHarness, TestServer, WHAT_TO_INSTALL, libraries, unique_prefix};
use idemgate_core::testkit::{RealTimeHarness, require_service};
use idemgate_core::{
    ClaimOutcome, ClaimRequest, ClaimStore, Fingerprint, HistoryOutcome, Holder, InstanceName,
    Instances, Key, RecordState,
};
use idemgate_redis::{RedisConfig, RedisStore};

/// A server whose `FUNCTION` command is gone (as before Redis 7.0, or on a service without it),
/// started by the first case that needs it and stopped when this process exits.
fn without_functions() -> Result<&'static TestServer, String> {
    static SERVER: OnceLock<Result<TestServer, String>> = OnceLock::new();
    SERVER
        .get_or_init(|| TestServer::start(&["--rename-command", "FUNCTION", ""]))
        .as_ref()
        .map_err(Clone::clone)
}

async fn scripts_harness() -> Option<PrefixHarness> {
    let server = require_service(without_functions(), WHAT_TO_INSTALL)?;
    let mut cfg = RedisConfig::new(server.url());
    cfg.key_prefix = unique_prefix();
    let store = RedisStore::connect(cfg)
        .await
        .expect("connect to the server without FUNCTION");
    Some(PrefixHarness {
        inner: RealTimeHarness { store },
        // The server goes away with the process.
        _cleanup: None,
    })
}

// Every operation as a script (EVALSHA), where the server refuses `FUNCTION LOAD`.
idemgate_core::conformance_tests!(scripts_harness());
idemgate_core::history_conformance_tests!(scripts_harness());
idemgate_core::instances_conformance_tests!(scripts_harness());

fn fp(byte: u8) -> Fingerprint {
    Fingerprint([byte; 32])
}

/// The store loads its library at connect; a server that lost it (`FUNCTION FLUSH`, a restart
/// without persistence) gets it again at the next call, which answers as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_lost_the_library_gets_it_again() {
    let Some(server) = require_service(TestServer::start(&[]), WHAT_TO_INSTALL) else {
        return;
    };
    let store = RedisStore::connect(RedisConfig::new(server.url()))
        .await
        .unwrap();
    let mut con = server.sync_conn();
    let loaded = libraries(&mut con);
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert!(loaded[0].starts_with("idemgate_"), "{loaded:?}");

    let key = Key::parse("src", "evt-lost").unwrap();
    let lease = Duration::from_secs(60);
    let req = || ClaimRequest::new(key.clone(), lease, lease * 10).fingerprint(fp(1));
    let ClaimOutcome::Claimed { token, .. } = store.claim(req()).await.unwrap() else {
        panic!("first claim");
    };
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query::<()>(&mut con)
        .unwrap();
    assert!(libraries(&mut con).is_empty());
    assert!(matches!(
        store.claim(req()).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    assert_eq!(libraries(&mut con), loaded);
    redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query::<()>(&mut con)
        .unwrap();
    store.complete(&token).await.unwrap();
    let view = store.lookup(&key).await.unwrap();
    assert_eq!(view.record.unwrap().state, RecordState::Done);
    assert_eq!(view.history.len(), 3, "{:?}", view.history);
}

/// With a fingerprint and a holder, every value of the event's hash stays within 64 bytes, so
/// the server keeps it a listpack (its default `hash-max-listpack-value`), through takeovers, a
/// conflict aside (its row holds the other fingerprint), and completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stays_a_listpack() {
    let Some(server) = require_service(TestServer::start(&[]), WHAT_TO_INSTALL) else {
        return;
    };
    let mut cfg = RedisConfig::new(server.url());
    cfg.key_prefix = "lp:".to_owned();
    let store = RedisStore::connect(cfg).await.unwrap();
    let mut con = server.sync_conn();
    let encoding = |con: &mut redis::Connection, id: &str| -> String {
        redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(format!("lp:{{src/{id}}}:e"))
            .query(con)
            .unwrap()
    };
    let holder = Holder {
        instance: InstanceName::new("gateway-eu-west-1a-7d9f8b6c4-x2x9z").unwrap(),
        boot: 12,
    };
    let key = Key::parse("src", "evt-lp").unwrap();
    let lease = Duration::from_millis(50);
    let req = || {
        ClaimRequest::new(key.clone(), lease, Duration::from_secs(600))
            .fingerprint(fp(7))
            .holder(holder.clone())
    };
    assert!(matches!(
        store.claim(req()).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    assert_eq!(encoding(&mut con, "evt-lp"), "listpack");
    tokio::time::sleep(lease * 2).await;
    let ClaimOutcome::Claimed { token, .. } = store.claim(req()).await.unwrap() else {
        panic!("takeover");
    };
    assert_eq!(token.attempt, 2);
    store.complete(&token).await.unwrap();
    assert!(matches!(
        store.claim(req()).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    assert_eq!(encoding(&mut con, "evt-lp"), "listpack");
    let view = store.lookup(&key).await.unwrap();
    let rec = view.record.unwrap();
    assert_eq!((rec.fingerprint, rec.holder), (Some(fp(7)), None));
    assert!(view.history.iter().all(|h| h.fingerprint == Some(fp(7))));

    // A conflict's row keeps the other fingerprint whole (and the hash a hash table).
    let other = Key::parse("src", "evt-conflict").unwrap();
    store
        .claim(ClaimRequest::new(other.clone(), lease, Duration::from_secs(600)).fingerprint(fp(1)))
        .await
        .unwrap();
    assert!(matches!(
        store
            .claim(
                ClaimRequest::new(other.clone(), lease, Duration::from_secs(600))
                    .fingerprint(fp(2))
            )
            .await
            .unwrap(),
        ClaimOutcome::Conflict { .. }
    ));
    let history = store.lookup(&other).await.unwrap().history;
    let prints: Vec<_> = history.iter().map(|h| (h.outcome, h.fingerprint)).collect();
    assert_eq!(
        prints,
        [
            (HistoryOutcome::Claimed, Some(fp(1))),
            (HistoryOutcome::Conflict, Some(fp(2)))
        ]
    );
}

/// An event written by the layout before this one (the fingerprint in the record and the rows,
/// the holder at the end of the record) reads as it was, answers by its fingerprint and holder,
/// and is written in the compact layout from its next change on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_the_earlier_layout_still_read() {
    let Some(server) = require_service(TestServer::start(&[]), WHAT_TO_INSTALL) else {
        return;
    };
    let mut cfg = RedisConfig::new(server.url());
    cfg.key_prefix = "old:".to_owned();
    let store = RedisStore::connect(cfg).await.unwrap();
    let mut con = server.sync_conn();
    let gw = InstanceName::new("gw-1").unwrap();
    let boot = || idemgate_core::BootRequest::new(gw.clone(), Duration::from_secs(60), "test-host");
    let first_boot = store.register_boot(&boot()).await.unwrap();
    let first = first_boot.holder.boot;
    let (secs, _): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
    let now = secs * 1_000;
    let hex = "ab".repeat(32);
    let hash = "old:{src/evt-old}:e";
    redis::cmd("HSET")
        .arg(hash)
        .arg("r")
        .arg(format!(
            "p|1|000000000000002a|{hex}|{now}|{}|{}|gw-1|{first}",
            now + 60_000,
            now + 600_000
        ))
        .arg("n")
        .arg(1)
        .arg("h1")
        .arg(format!("claimed|0|1|{now}||{hex}"))
        .arg("f")
        .arg(now)
        .query::<()>(&mut con)
        .unwrap();
    let key = Key::parse("src", "evt-old").unwrap();
    let view = store.lookup(&key).await.unwrap();
    let rec = view.record.unwrap();
    assert_eq!(
        (
            rec.nonce,
            rec.fingerprint,
            rec.holder.map(|h| (h.instance.to_string(), h.boot))
        ),
        (42, Some(fp(0xab)), Some(("gw-1".to_owned(), first)))
    );
    assert_eq!(view.history[0].fingerprint, Some(fp(0xab)));

    let lease = Duration::from_secs(60);
    let req = |print| ClaimRequest::new(key.clone(), lease, lease * 10).fingerprint(fp(print));
    assert!(matches!(
        store.claim(req(0xcd)).await.unwrap(),
        ClaimOutcome::Conflict { .. }
    ));
    assert!(matches!(
        store.claim(req(0xab)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    // A new boot of gw-1 frees it, and the takeover writes the compact layout.
    store.end_boot(&first_boot.holder).await.unwrap();
    assert_eq!(store.register_boot(&boot()).await.unwrap().freed, 1);
    let ClaimOutcome::Claimed { token, .. } = store.claim(req(0xab)).await.unwrap() else {
        panic!("takeover");
    };
    assert_eq!(token.attempt, 2);
    let (r, g): (String, String) = redis::cmd("HMGET")
        .arg(hash)
        .arg("r")
        .arg("g")
        .query(&mut con)
        .unwrap();
    assert!(r.split('|').nth(3) == Some("=") && g == hex, "{r} / {g}");
    store.complete(&token).await.unwrap();
    let view = store.lookup(&key).await.unwrap();
    let rec = view.record.unwrap();
    assert_eq!(
        (rec.state, rec.fingerprint, rec.holder),
        (RecordState::Done, Some(fp(0xab)), None)
    );
    let outcomes: Vec<_> = view
        .history
        .iter()
        .map(|h| (h.outcome, h.fingerprint))
        .collect();
    assert_eq!(
        outcomes,
        [
            (HistoryOutcome::Claimed, Some(fp(0xab))),
            (HistoryOutcome::Conflict, Some(fp(0xcd))),
            (HistoryOutcome::InFlight, Some(fp(0xab))),
            (HistoryOutcome::Abandoned, Some(fp(0xab))),
            (HistoryOutcome::Reclaimed, Some(fp(0xab))),
            (HistoryOutcome::Completed, Some(fp(0xab))),
        ]
    );
}

/// A server out of memory (`noeviction`) refuses claims, but still answers lookups: the lookup
/// function is declared `no-writes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_still_answers_lookups() {
    let Some(server) = require_service(
        TestServer::start(&["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"]),
        WHAT_TO_INSTALL,
    ) else {
        return;
    };
    let mut cfg = RedisConfig::new(server.url());
    cfg.source_stream_maxlen = None;
    let store = RedisStore::connect(cfg).await.unwrap();
    let key = Key::parse("src", "evt-full").unwrap();
    let lease = Duration::from_secs(60);
    assert!(matches!(
        store
            .claim(ClaimRequest::new(key.clone(), lease, lease * 10))
            .await
            .unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    // Far below what the server already uses: every write is refused from now on.
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(100_000)
        .query::<()>(&mut server.sync_conn())
        .unwrap();
    let other = Key::parse("src", "evt-refused").unwrap();
    let refused = store
        .claim(ClaimRequest::new(other, lease, lease * 10))
        .await
        .expect_err("a claim on a full server");
    assert!(format!("{refused:?}").contains("OOM"), "{refused:?}");
    let view = store.lookup(&key).await.unwrap();
    assert!(view.record.is_some());
    assert_eq!(view.history.len(), 1);
}
