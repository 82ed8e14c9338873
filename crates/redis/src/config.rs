//! Configuration of both modes.

use std::num::NonZeroUsize;
use std::time::Duration;

/// Where Redis is: one server, or the seed nodes of a Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://host:port[/db]` (or `redis+unix:///path`).
    Standalone(String),
    /// `redis://host:port` of one or more Cluster nodes; the client discovers the rest.
    Cluster(Vec<String>),
}

impl Target {
    /// Where the URLs point, for messages (never a password).
    pub fn describe(&self) -> String {
        fn strip(url: &str) -> &str {
            match url.rsplit_once('@') {
                Some((_, host)) => host,
                None => url.split_once("://").map_or(url, |(_, rest)| rest),
            }
        }
        match self {
            Self::Standalone(url) => strip(url).to_owned(),
            Self::Cluster(nodes) => {
                let nodes: Vec<_> = nodes.iter().map(|n| strip(n)).collect();
                format!("cluster {}", nodes.join(","))
            }
        }
    }

    fn validate(&self, key: &'static str) -> Result<(), ConfigError> {
        let urls: &[String] = match self {
            Self::Standalone(url) => std::slice::from_ref(url),
            Self::Cluster(nodes) if nodes.is_empty() => {
                return Err(ConfigError::NoClusterNodes { key });
            }
            Self::Cluster(nodes) => nodes,
        };
        for url in urls {
            redis::Client::open(url.as_str()).map_err(|source| ConfigError::Url {
                key,
                url: Self::Standalone(url.clone()).describe(),
                source,
            })?;
        }
        Ok(())
    }
}

/// Store mode: Redis as the only store.
///
/// Build one with [`RedisConfig::new`] (or [`RedisConfig::cluster`]) and adjust the public fields;
/// [`crate::RedisStore::connect`] validates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    pub target: Target,
    /// Prepended to every key. Default `idemgate:`. May not hold `{` or `}` (hash tags).
    pub key_prefix: String,
    /// Run even under an evicting `maxmemory-policy` (with a warning). Default `false`: an evicted
    /// record is a duplicate let through.
    pub allow_eviction: bool,
    /// History rows kept per event (the oldest are trimmed). Default 256, at most
    /// [`MAX_HISTORY_PER_EVENT`]. Whether an event was processed and when it was first received
    /// are kept apart from the rows, so trimming never hides a late duplicate.
    pub history_per_event: NonZeroUsize,
    /// How long an event's history is kept after its latest record was made (and at least as long
    /// as that record). Default 7 days: Redis memory is dear; long-term audit belongs in a SQL
    /// store.
    pub history_retention: Duration,
    /// Also append every outcome to a per-source stream capped at about this many entries
    /// (`XADD ... MAXLEN ~`), best-effort. Default 100 000; `None` writes no stream.
    pub source_stream_maxlen: Option<NonZeroUsize>,
    /// Connecting gives up after this long. Default 2 s.
    pub connect_timeout: Duration,
    /// A command gives up after this long. Default 2 s.
    pub response_timeout: Duration,
}

impl RedisConfig {
    /// The defaults, on one standalone server (`redis://127.0.0.1:6379`, say).
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::Standalone(url.into()))
    }

    /// The defaults, on a Cluster reached through `nodes`.
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::with_target(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    fn with_target(target: Target) -> Self {
        Self {
            target,
            key_prefix: "idemgate:".to_owned(),
            allow_eviction: false,
            history_per_event: NonZeroUsize::new(256).expect("non-zero"),
            history_retention: Duration::from_secs(7 * 86_400),
            source_stream_maxlen: NonZeroUsize::new(100_000),
            connect_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(2),
        }
    }

    /// Checks every key.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first key that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check(&StoreKeys::LIBRARY)
    }

    /// Checks every key, naming each as `keys` says.
    pub(crate) fn check(&self, keys: &StoreKeys) -> Result<(), ConfigError> {
        self.target.validate(keys.url)?;
        validate_prefix(keys.key_prefix, &self.key_prefix)?;
        if self.history_per_event.get() > MAX_HISTORY_PER_EVENT {
            return Err(ConfigError::TooMany {
                key: keys.history_per_event,
                value: self.history_per_event.get(),
                max: MAX_HISTORY_PER_EVENT,
            });
        }
        if self.history_retention < Duration::from_secs(1) {
            return Err(ConfigError::TooShort {
                key: keys.history_retention,
                value: self.history_retention,
            });
        }
        for (key, value) in [
            (keys.connect_timeout, self.connect_timeout),
            (keys.response_timeout, self.response_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::TooShort { key, value });
            }
        }
        Ok(())
    }
}

/// What [`RedisConfig`]'s errors call its keys: by field (`redis.url`) when it is built in code,
/// as written in the gateway's file (`store.redis.url`) when it comes from
/// [`crate::RedisSettings`].
#[derive(Debug)]
pub(crate) struct StoreKeys {
    pub(crate) url: &'static str,
    pub(crate) key_prefix: &'static str,
    pub(crate) history_per_event: &'static str,
    pub(crate) history_retention: &'static str,
    pub(crate) connect_timeout: &'static str,
    pub(crate) response_timeout: &'static str,
}

impl StoreKeys {
    const LIBRARY: Self = Self {
        url: "redis.url",
        key_prefix: "redis.key_prefix",
        history_per_event: "redis.history_per_event",
        history_retention: "redis.history_retention",
        connect_timeout: "redis.connect_timeout",
        response_timeout: "redis.response_timeout",
    };

    pub(crate) const SECTION: Self = Self {
        url: "store.redis.url",
        key_prefix: "store.redis.key_prefix",
        history_per_event: "store.redis.history_per_event",
        history_retention: "store.redis.history_retention",
        connect_timeout: "store.redis.connect_timeout",
        response_timeout: "store.redis.response_timeout",
    };
}

/// The most history rows kept per event: a lookup reads them in one command from a Lua script,
/// whose stack holds a few thousand values.
pub const MAX_HISTORY_PER_EVENT: usize = 4_096;

/// Tier mode: a cache of done records in front of a SQL store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierConfig {
    pub target: Target,
    /// Prepended to every key. Default `idemgate:`. May not hold `{` or `}`.
    pub key_prefix: String,
    /// A cached answer expires this long before its record (margin for the clock difference
    /// between the SQL server and Redis). Default 1 s.
    pub expiry_margin: Duration,
    /// After a Redis error, go straight to SQL for this long before trying Redis again, so an
    /// outage costs one timeout per period rather than one per claim. Default 1 s.
    pub retry_after: Duration,
    /// How long a release's tombstone keeps a concurrent read-through from caching the released
    /// record. Default 10 min.
    pub release_tombstone: Duration,
    /// Connecting gives up after this long. Default 250 ms: SQL answers anyway.
    pub connect_timeout: Duration,
    /// A command gives up after this long. Default 250 ms.
    pub response_timeout: Duration,
}

impl TierConfig {
    /// The defaults, on one standalone server.
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::Standalone(url.into()))
    }

    /// The defaults, on a Cluster reached through `nodes`.
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::with_target(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    fn with_target(target: Target) -> Self {
        Self {
            target,
            key_prefix: "idemgate:".to_owned(),
            expiry_margin: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
            release_tombstone: Duration::from_secs(600),
            connect_timeout: Duration::from_millis(250),
            response_timeout: Duration::from_millis(250),
        }
    }

    /// Checks every key.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first key that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.target.validate("store.redis.url")?;
        validate_prefix("store.redis.key_prefix", &self.key_prefix)?;
        for (key, value) in [
            ("store.redis.release_tombstone", self.release_tombstone),
            ("store.redis.connect_timeout", self.connect_timeout),
            ("store.redis.response_timeout", self.response_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::TooShort { key, value });
            }
        }
        Ok(())
    }
}

fn validate_prefix(key: &'static str, prefix: &str) -> Result<(), ConfigError> {
    if prefix.contains(['{', '}']) || prefix.chars().any(char::is_control) {
        return Err(ConfigError::Prefix {
            key,
            prefix: prefix.to_owned(),
        });
    }
    Ok(())
}

/// A configuration value that cannot work. Each names its key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{key}: {url:?} does not parse as a Redis URL")]
    Url {
        key: &'static str,
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("{key}: a Cluster needs at least one seed node")]
    NoClusterNodes { key: &'static str },
    #[error("{key}: set url (standalone) or cluster_nodes (Cluster), one of the two")]
    UrlOrClusterNodes { key: &'static str },
    #[error(
        "{key}: {prefix:?} may not hold '{{', '}}' or control characters (they would break hash tags)"
    )]
    Prefix { key: &'static str, prefix: String },
    #[error("{key}: {value:?} is too short")]
    TooShort { key: &'static str, value: Duration },
    #[error("{key}: {value} is more than {max}")]
    TooMany {
        key: &'static str,
        value: usize,
        max: usize,
    },
}

impl ConfigError {
    /// The key it names (`store.redis.url`).
    pub fn key(&self) -> &'static str {
        match self {
            Self::Url { key, .. }
            | Self::NoClusterNodes { key }
            | Self::UrlOrClusterNodes { key }
            | Self::Prefix { key, .. }
            | Self::TooShort { key, .. }
            | Self::TooMany { key, .. } => key,
        }
    }

    /// What is wrong, without the key (every message is `key: problem`).
    pub fn problem(&self) -> String {
        let text = self.to_string();
        match text
            .strip_prefix(self.key())
            .and_then(|t| t.strip_prefix(": "))
        {
            Some(problem) => problem.to_owned(),
            None => text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        RedisConfig::new("redis://127.0.0.1:6379")
            .validate()
            .unwrap();
        RedisConfig::cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"])
            .validate()
            .unwrap();
        TierConfig::new("redis://127.0.0.1:6379")
            .validate()
            .unwrap();
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut cfg = RedisConfig::new("redis://127.0.0.1:6379");
        cfg.key_prefix = "a{b}:".to_owned();
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .starts_with("redis.key_prefix")
        );
        let cfg = RedisConfig::new("http://nope");
        assert!(
            cfg.validate()
                .unwrap_err()
                .to_string()
                .starts_with("redis.url")
        );
        let mut cfg = RedisConfig::new("redis://127.0.0.1:6379");
        cfg.history_per_event = NonZeroUsize::new(MAX_HISTORY_PER_EVENT + 1).unwrap();
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "redis.history_per_event: 4097 is more than 4096"
        );
        let cfg = RedisConfig::cluster(Vec::<String>::new());
        assert!(matches!(
            cfg.validate(),
            Err(ConfigError::NoClusterNodes { .. })
        ));
    }

    #[test]
    fn describe_hides_passwords() {
        let t = Target::Standalone("redis://user:secret@host:6379/0".to_owned());
        assert_eq!(t.describe(), "host:6379/0");
        let t = Target::Cluster(vec!["redis://a:1".to_owned(), "redis://b:2".to_owned()]);
        assert_eq!(t.describe(), "cluster a:1,b:2");
    }
}
