//! `[store.redis]` loads in every feature combination: read by the Redis crate's own
//! `RedisSettings` with the `redis` feature, taken as it is without it (where `kind = "redis"`
//! is refused at open as not built).

use idemgate::config::{StoreConfig, StoreKind};

fn store(json: &str) -> StoreConfig {
    serde_json::from_str(json).expect(json)
}

#[test]
fn a_redis_table_loads() {
    let cfg = store(r#"{"kind": "redis", "redis": {"url": "redis://127.0.0.1:6379"}}"#);
    assert_eq!(cfg.kind, StoreKind::Redis);
    assert!(cfg.redis.is_some());
    assert_eq!(cfg.problems(), Vec::new());
    let cfg = store(r#"{"kind": "redis"}"#);
    let keys: Vec<_> = cfg.problems().into_iter().map(|p| p.key).collect();
    assert_eq!(keys, ["store.redis"]);
}

#[cfg(feature = "redis")]
#[test]
fn url_or_cluster_nodes_is_a_problem_naming_the_key() {
    for json in [
        r#"{"redis": {}}"#,
        r#"{"redis": {"url": "redis://a", "cluster_nodes": ["redis://b"]}}"#,
    ] {
        let problems = store(json).problems();
        assert_eq!(problems.len(), 1, "{json}");
        assert_eq!(
            problems[0].to_string(),
            "store.redis.url: set url (standalone) or cluster_nodes (Cluster), one of the two"
        );
    }
    let cfg = store(r#"{"redis": {"url": "redis://a", "history_retention": "3d"}}"#);
    let redis = cfg.redis.expect("a redis table");
    assert_eq!(
        redis.history_retention,
        Some(std::time::Duration::from_secs(3 * 86_400))
    );
    assert!(
        serde_json::from_str::<StoreConfig>(r#"{"redis": {"url": "redis://a", "ttl": 3}}"#)
            .is_err()
    );
}

#[cfg(not(feature = "redis"))]
#[tokio::test]
async fn kind_redis_without_the_feature_is_not_built() {
    let cfg = store(r#"{"kind": "redis", "redis": {"url": "redis://127.0.0.1:6379"}}"#);
    let err = idemgate::AnyStore::open(&cfg).await.expect_err("not built");
    assert!(
        matches!(
            err,
            idemgate::OpenError::NotBuilt {
                kind: "redis",
                feature: "redis"
            }
        ),
        "{err}"
    );
}
