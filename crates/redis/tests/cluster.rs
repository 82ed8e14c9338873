//! Store mode on a 3-master Redis Cluster that this test binary starts on free loopback ports
//! (once, shared by its cases) and that stops when the binary exits.

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use common::{PrefixHarness, TestCluster, WHAT_TO_INSTALL, libraries, unique_prefix};
use idemgate_core::testkit::{Harness, RealTimeHarness, require_service};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};
use idemgate_redis::{RedisConfig, RedisStore};

/// The cluster, started by the first case that needs it. Its servers' watchdogs stop them when
/// this process exits, so nothing needs to drop it.
fn cluster() -> Result<&'static TestCluster, String> {
    static CLUSTER: OnceLock<Result<TestCluster, String>> = OnceLock::new();
    CLUSTER
        .get_or_init(TestCluster::start)
        .as_ref()
        .map_err(Clone::clone)
}

async fn cluster_harness() -> Option<PrefixHarness> {
    let cluster = require_service(cluster(), WHAT_TO_INSTALL)?;
    let mut cfg = RedisConfig::cluster(cluster.urls());
    cfg.key_prefix = unique_prefix();
    let store = RedisStore::connect(cfg)
        .await
        .expect("connect to the test cluster");
    Some(PrefixHarness {
        inner: RealTimeHarness { store },
        // The whole cluster goes away with the process.
        _cleanup: None,
    })
}

idemgate_core::conformance_tests!(cluster_harness());
idemgate_core::history_conformance_tests!(cluster_harness());
idemgate_core::instances_conformance_tests!(cluster_harness());

/// A boot walks every master: claims spread over the Cluster are all freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_boot_frees_claims_on_every_master() {
    use idemgate_core::{InstanceName, Instances};
    let Some(h) = cluster_harness().await else {
        return;
    };
    let store = h.store();
    let name = InstanceName::new("gw-spread").unwrap();
    let boot =
        || idemgate_core::BootRequest::new(name.clone(), Duration::from_secs(60), "test-host");
    let first = store.register_boot(&boot()).await.unwrap();
    let lease = Duration::from_secs(60);
    let keys: Vec<Key> = (0..48)
        .map(|i| Key::parse("spread", &format!("boot-{i}")).unwrap())
        .collect();
    for key in &keys {
        let outcome = store
            .claim(ClaimRequest::new(key.clone(), lease, lease * 10).holder(first.holder.clone()))
            .await
            .unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Claimed { .. }),
            "{outcome:?}"
        );
    }
    store.end_boot(&first.holder).await.unwrap();
    let second = store.register_boot(&boot()).await.unwrap();
    assert_eq!((second.holder.boot, second.freed), (2, 48));
    for key in &keys {
        match store
            .claim(ClaimRequest::new(key.clone(), lease, lease * 10))
            .await
            .unwrap()
        {
            ClaimOutcome::Claimed { token, .. } => assert_eq!(token.attempt, 2),
            other => panic!("{key}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_records_and_history() {
    if let Some(h) = cluster_harness().await {
        common::cases::stats_count_records_and_history(&h).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_feed_observe_and_purge_trims_them() {
    if let Some(h) = cluster_harness().await {
        common::cases::streams_feed_observe_and_purge_trims_them(&h).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_spread_over_every_master() {
    let Some(h) = cluster_harness().await else {
        return;
    };
    let store = h.store();
    let lease = Duration::from_secs(60);
    for i in 0..64 {
        let key = Key::parse("spread", &format!("evt-{i}}}{{x")).unwrap();
        let outcome = store
            .claim(ClaimRequest::new(key, lease, lease))
            .await
            .unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Claimed { .. }),
            "{outcome:?}"
        );
    }
    let cluster = cluster().unwrap();
    for node in &cluster.nodes {
        let n: u64 = redis::cmd("DBSIZE").query(&mut node.sync_conn()).unwrap();
        assert!(n > 0, "node {} holds no key", node.port);
    }
}

/// The function library is loaded on every master at connect, and a master that lost it gets it
/// again at the next call that lands there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_has_the_function_library() {
    let Some(h) = cluster_harness().await else {
        return;
    };
    let cluster = cluster().unwrap();
    let ours = |node: &common::TestServer| {
        libraries(&mut node.sync_conn())
            .into_iter()
            .filter(|l| l.starts_with("idemgate_"))
            .count()
    };
    for node in &cluster.nodes {
        assert!(ours(node) > 0, "node {} has no idemgate library", node.port);
        redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query::<()>(&mut node.sync_conn())
            .unwrap();
    }
    let store = h.store();
    let lease = Duration::from_secs(60);
    for i in 0..64 {
        let key = Key::parse("lost", &format!("evt-{i}")).unwrap();
        let outcome = store
            .claim(ClaimRequest::new(key, lease, lease))
            .await
            .unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Claimed { .. }),
            "{outcome:?}"
        );
    }
    for node in &cluster.nodes {
        assert!(
            ours(node) > 0,
            "node {} did not get the library again",
            node.port
        );
    }
}
