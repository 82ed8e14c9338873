//! [`RedisSettings`]: the gateway's `[store.redis]` table, as this crate reads it.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::config::{ConfigError, RedisConfig, RedisTls, StoreKeys, Target, TierConfig};

/// `[store.redis]`: with `store.kind = "redis"` the store itself ([`Self::store_config`]); beside
/// a SQL store, a tier in front of it that answers known duplicates from Redis
/// ([`Self::tier_config`]). Every other setting keeps its default.
///
/// ```toml
/// [store.redis]
/// url = "redis://127.0.0.1:6379"      # or cluster_nodes = ["redis://10.0.0.1:7000", ...]
/// key_prefix = "idemgate:"
/// allow_eviction = false              # store mode
/// history_retention = "7d"            # store mode
/// # With rediss:// URLs (TLS), both modes:
/// tls_ca_file = "/etc/idemgate/redis-ca.pem"      # instead of the system's authorities
/// tls_client_cert = "/etc/idemgate/redis-client.crt"
/// tls_client_key = "/etc/idemgate/redis-client.key"
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSettings {
    /// A standalone server, `redis://host:port`.
    #[serde(default)]
    pub url: Option<String>,
    /// Or the seed nodes of a Redis Cluster.
    #[serde(default)]
    pub cluster_nodes: Vec<String>,
    /// Prefix of every key idemgate writes. Default `idemgate:`.
    #[serde(default = "default_key_prefix")]
    pub key_prefix: String,
    /// Store mode: run even under an evicting `maxmemory-policy` (an evicted record lets a
    /// duplicate through). Default `false`.
    #[serde(default)]
    pub allow_eviction: bool,
    /// Store mode: how long each event's history outlives its record in Redis (late-duplicate
    /// detection and `idemgate lookup` reach this far). Default [`RedisConfig`]'s, 7 days: Redis
    /// memory is dear. `store.history_retention` still trims the sources' history streams.
    #[serde(default, with = "humantime_serde")]
    pub history_retention: Option<Duration>,
    /// With `rediss://` URLs: a PEM file of the authorities that sign the servers' certificates,
    /// trusted instead of the system's ([`RedisTls::ca_file`]).
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// With `rediss://` URLs: a PEM client certificate, for servers that ask for one.
    #[serde(default)]
    pub tls_client_cert: Option<PathBuf>,
    /// The PEM private key of `tls_client_cert`.
    #[serde(default)]
    pub tls_client_key: Option<PathBuf>,
}

fn default_key_prefix() -> String {
    "idemgate:".to_owned()
}

/// The key [`RedisSettings::target`]'s error names.
const URL: &str = "store.redis.url";

impl RedisSettings {
    /// Where Redis is: `url` or `cluster_nodes`, exactly one of the two. Checks nothing else (the
    /// URLs are parsed by [`Self::store_config`] and [`Self::tier_config`]).
    ///
    /// # Errors
    /// [`ConfigError::UrlOrClusterNodes`] naming `store.redis.url` when both or neither are set.
    pub fn target(&self) -> Result<Target, ConfigError> {
        match (&self.url, self.cluster_nodes.is_empty()) {
            (Some(url), true) => Ok(Target::Standalone(url.clone())),
            (None, false) => Ok(Target::Cluster(self.cluster_nodes.clone())),
            (Some(_), false) | (None, true) => Err(ConfigError::UrlOrClusterNodes { key: URL }),
        }
    }

    /// The TLS files, as [`RedisTls`].
    pub fn tls(&self) -> RedisTls {
        RedisTls {
            ca_file: self.tls_ca_file.clone(),
            client_cert: self.tls_client_cert.clone(),
            client_key: self.tls_client_key.clone(),
        }
    }

    /// Store mode's settings (`store.kind = "redis"`), validated.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first `store.redis.*` key that is wrong.
    pub fn store_config(&self) -> Result<RedisConfig, ConfigError> {
        let mut cfg = RedisConfig::new("");
        cfg.target = self.target()?;
        cfg.tls = self.tls();
        cfg.key_prefix = self.key_prefix.clone();
        cfg.allow_eviction = self.allow_eviction;
        if let Some(retention) = self.history_retention {
            cfg.history_retention = retention;
        }
        cfg.check(&StoreKeys::SECTION)?;
        Ok(cfg)
    }

    /// Tier mode's settings (`[store.redis]` beside a SQL store), validated.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first `store.redis.*` key that is wrong.
    pub fn tier_config(&self) -> Result<TierConfig, ConfigError> {
        let mut cfg = TierConfig::new("");
        cfg.target = self.target()?;
        cfg.tls = self.tls();
        cfg.key_prefix = self.key_prefix.clone();
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<RedisSettings, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn todays_keys_and_defaults() {
        let s = parse(r#"{"url": "redis://127.0.0.1:6379"}"#).unwrap();
        assert_eq!(
            s,
            RedisSettings {
                url: Some("redis://127.0.0.1:6379".to_owned()),
                cluster_nodes: Vec::new(),
                key_prefix: "idemgate:".to_owned(),
                allow_eviction: false,
                history_retention: None,
                tls_ca_file: None,
                tls_client_cert: None,
                tls_client_key: None,
            }
        );
        let s = parse(
            r#"{"cluster_nodes": ["redis://a:1", "redis://b:2"], "key_prefix": "x:",
                "allow_eviction": true, "history_retention": "3d"}"#,
        )
        .unwrap();
        assert_eq!(s.cluster_nodes.len(), 2);
        assert_eq!(s.history_retention, Some(Duration::from_secs(3 * 86_400)));
        let cfg = s.store_config().unwrap();
        assert_eq!(
            cfg.target,
            Target::Cluster(vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()])
        );
        assert_eq!((cfg.key_prefix.as_str(), cfg.allow_eviction), ("x:", true));
        assert_eq!(cfg.history_retention, Duration::from_secs(3 * 86_400));
        // Without history_retention, the store's default.
        let s = parse(r#"{"url": "redis://h"}"#).unwrap();
        assert_eq!(
            s.store_config().unwrap().history_retention,
            RedisConfig::new("redis://h").history_retention
        );
        assert_eq!(s.tier_config().unwrap(), TierConfig::new("redis://h"));
    }

    #[test]
    fn tls_keys_reach_both_modes() {
        let s = parse(
            r#"{"url": "rediss://h:6380", "tls_ca_file": "/nonexistent/ca.pem",
                "tls_client_cert": "/c.crt", "tls_client_key": "/c.key"}"#,
        )
        .unwrap();
        let tls = RedisTls {
            ca_file: Some(PathBuf::from("/nonexistent/ca.pem")),
            client_cert: Some(PathBuf::from("/c.crt")),
            client_key: Some(PathBuf::from("/c.key")),
        };
        assert_eq!(s.tls(), tls);
        // Both modes read the files, and name the key when one cannot be read.
        for err in [s.store_config().unwrap_err(), s.tier_config().unwrap_err()] {
            assert_eq!(err.key(), "store.redis.tls_ca_file");
            assert!(err.problem().contains("/nonexistent/ca.pem"), "{err}");
        }
        let s = parse(r#"{"cluster_nodes": ["rediss://a:1", "redis://b:2"]}"#).unwrap();
        assert_eq!(
            s.store_config().unwrap_err().key(),
            "store.redis.cluster_nodes"
        );
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_refused() {
        let err = parse(r#"{"url": "redis://h", "ttl": 3}"#).unwrap_err();
        assert!(err.to_string().contains("ttl"), "{err}");
        let err = parse(r#"{"url": "redis://h", "history_retention": "soon"}"#).unwrap_err();
        assert!(err.to_string().contains("soon"), "{err}");
    }

    #[test]
    fn url_or_cluster_nodes_one_of_the_two() {
        for text in [
            r#"{"key_prefix": "x:"}"#,
            r#"{"url": "redis://a", "cluster_nodes": ["redis://b"]}"#,
        ] {
            let s = parse(text).unwrap();
            for err in [
                s.target().unwrap_err(),
                s.store_config().unwrap_err(),
                s.tier_config().unwrap_err(),
            ] {
                assert_eq!(err.key(), "store.redis.url");
                assert_eq!(
                    err.problem(),
                    "set url (standalone) or cluster_nodes (Cluster), one of the two"
                );
            }
        }
    }

    #[test]
    fn bad_values_name_their_key_in_the_section() {
        let mut s = parse(r#"{"url": "redis://h"}"#).unwrap();
        s.key_prefix = "a{b}".to_owned();
        assert_eq!(
            s.store_config().unwrap_err().key(),
            "store.redis.key_prefix"
        );
        assert_eq!(s.tier_config().unwrap_err().key(), "store.redis.key_prefix");
        let mut s = parse(r#"{"url": "http://h"}"#).unwrap();
        assert_eq!(s.store_config().unwrap_err().key(), "store.redis.url");
        s.url = Some("redis://h".to_owned());
        s.history_retention = Some(Duration::from_millis(10));
        assert_eq!(
            s.store_config().unwrap_err().to_string(),
            "store.redis.history_retention: 10ms is too short"
        );
    }
}
