//! Configuration of both modes.

use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use idemgate_tls::{ClientTls, TlsError, Verify};
use redis::{ConnectionAddr, IntoConnectionInfo, TlsCertificates};

pub use crate::tls::RedisTls;
use crate::tls::TlsKeys;

/// Where Redis is: one server, or the seed nodes of a Cluster.
///
/// `rediss://` URLs connect over TLS (see [`RedisTls`]); a Cluster's nodes are all `rediss://`
/// or none is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `redis://host:port[/db]`, `rediss://host:port[/db]` (TLS) or `redis+unix:///path`.
    Standalone(String),
    /// `redis://host:port` (or `rediss://`) of one or more Cluster nodes; the client discovers
    /// the rest.
    Cluster(Vec<String>),
}

impl Target {
    /// Where the URLs point, for messages (never a password).
    pub fn describe(&self) -> String {
        match self {
            Self::Standalone(url) => strip(url).to_owned(),
            Self::Cluster(nodes) => {
                let nodes: Vec<_> = nodes.iter().map(|n| strip(n)).collect();
                format!("cluster {}", nodes.join(","))
            }
        }
    }

    /// Checks that every URL parses and that they agree on TLS; answers whether they use it.
    fn check(&self, keys: &TargetKeys) -> Result<bool, ConfigError> {
        let (key, urls): (_, &[String]) = match self {
            Self::Standalone(url) => (keys.url, std::slice::from_ref(url)),
            Self::Cluster(nodes) if nodes.is_empty() => {
                return Err(ConfigError::NoClusterNodes {
                    key: keys.cluster_nodes,
                });
            }
            Self::Cluster(nodes) => (keys.cluster_nodes, nodes),
        };
        let mut first: Option<(&str, bool)> = None;
        for url in urls {
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|source| ConfigError::Url {
                    key,
                    url: strip(url).to_owned(),
                    source,
                })?;
            let tls = match info.addr() {
                ConnectionAddr::TcpTls { insecure: true, .. } => {
                    return Err(ConfigError::Insecure {
                        key,
                        url: strip(url).to_owned(),
                        ca_key: keys.tls.ca_file,
                    });
                }
                ConnectionAddr::TcpTls { .. } => true,
                _ => false,
            };
            match first {
                None => first = Some((url, tls)),
                Some((other, other_tls)) if other_tls != tls => {
                    let (plain, secure) = if tls {
                        (other, url.as_str())
                    } else {
                        (url.as_str(), other)
                    };
                    return Err(ConfigError::MixedTls {
                        key,
                        plain: strip(plain).to_owned(),
                        secure: strip(secure).to_owned(),
                    });
                }
                Some(_) => {}
            }
        }
        Ok(first.is_some_and(|(_, tls)| tls))
    }
}

/// A Redis URL without its scheme and password: `host:port[/db]`.
fn strip(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.rsplit_once('@').map_or(rest, |(_, host)| host)
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
    /// The CA file and client certificate of a `rediss://` target. Default none: the system's
    /// authorities, no client certificate.
    pub tls: RedisTls,
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
            tls: RedisTls::default(),
        }
    }

    /// Checks every key, reading the TLS files.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first key that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check(&StoreKeys::LIBRARY).map(drop)
    }

    /// Checks every key, naming each as `keys` says, and reads the TLS files (`None` when no
    /// file is set).
    pub(crate) fn check(&self, keys: &StoreKeys) -> Result<Option<TlsCertificates>, ConfigError> {
        let tls = self.target.check(&keys.target)?;
        let certificates = self.tls.certificates(tls, &keys.target)?;
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
        Ok(certificates)
    }
}

/// What the errors about a [`Target`] and its [`RedisTls`] call their keys.
#[derive(Debug)]
pub(crate) struct TargetKeys {
    pub(crate) url: &'static str,
    pub(crate) cluster_nodes: &'static str,
    pub(crate) tls: TlsKeys,
}

impl TargetKeys {
    /// As written in the gateway's `[store.redis]` table (both modes).
    pub(crate) const SECTION: Self = Self {
        url: "store.redis.url",
        cluster_nodes: "store.redis.cluster_nodes",
        tls: TlsKeys {
            ca_file: "store.redis.tls_ca_file",
            client_cert: "store.redis.tls_client_cert",
            client_key: "store.redis.tls_client_key",
        },
    };
}

/// What [`RedisConfig`]'s errors call its keys: by field (`redis.url`) when it is built in code,
/// as written in the gateway's file (`store.redis.url`) when it comes from
/// [`crate::RedisSettings`].
#[derive(Debug)]
pub(crate) struct StoreKeys {
    pub(crate) target: TargetKeys,
    pub(crate) key_prefix: &'static str,
    pub(crate) history_per_event: &'static str,
    pub(crate) history_retention: &'static str,
    pub(crate) connect_timeout: &'static str,
    pub(crate) response_timeout: &'static str,
}

impl StoreKeys {
    pub(crate) const LIBRARY: Self = Self {
        target: TargetKeys {
            url: "redis.url",
            cluster_nodes: "redis.cluster_nodes",
            tls: TlsKeys {
                ca_file: "redis.tls.ca_file",
                client_cert: "redis.tls.client_cert",
                client_key: "redis.tls.client_key",
            },
        },
        key_prefix: "redis.key_prefix",
        history_per_event: "redis.history_per_event",
        history_retention: "redis.history_retention",
        connect_timeout: "redis.connect_timeout",
        response_timeout: "redis.response_timeout",
    };

    pub(crate) const SECTION: Self = Self {
        target: TargetKeys::SECTION,
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
    /// The CA file and client certificate of a `rediss://` target. Default none.
    pub tls: RedisTls,
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
            tls: RedisTls::default(),
        }
    }

    /// Checks every key, reading the TLS files.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first key that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check().map(drop)
    }

    /// Checks every key and reads the TLS files (`None` when no file is set).
    pub(crate) fn check(&self) -> Result<Option<TlsCertificates>, ConfigError> {
        let keys = TargetKeys::SECTION;
        let tls = self.target.check(&keys)?;
        let certificates = self.tls.certificates(tls, &keys)?;
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
        Ok(certificates)
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
    #[error(
        "{key}: {url:?} asks (#insecure) not to check the server's certificate, which idemgate never does; trust the authority that signed it with {ca_key}"
    )]
    Insecure {
        key: &'static str,
        url: String,
        ca_key: &'static str,
    },
    #[error(
        "{key}: node {plain} is redis:// but {secure} is rediss://: a Cluster's nodes are all rediss:// (TLS) or none is"
    )]
    MixedTls {
        key: &'static str,
        plain: String,
        secure: String,
    },
    #[error(
        "{key}: set, but {url_key} is not a rediss:// URL, so nothing would use it (rediss:// connects over TLS)"
    )]
    TlsWithoutRediss {
        key: &'static str,
        url_key: &'static str,
    },
    #[error("{key}: required with {other} (a client certificate is a certificate and its key)")]
    HalfIdentity {
        key: &'static str,
        other: &'static str,
    },
    /// A TLS file that cannot be used; the message names the file and what is wrong with it.
    #[error("{key}: {error}")]
    Tls { key: &'static str, error: TlsError },
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
            | Self::Insecure { key, .. }
            | Self::MixedTls { key, .. }
            | Self::TlsWithoutRediss { key, .. }
            | Self::HalfIdentity { key, .. }
            | Self::Tls { key, .. }
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

impl RedisTls {
    /// Checks the files against a target that does (`tls`) or does not use TLS, and reads them
    /// for the redis crate: `None` when nothing is set (a `rediss://` target then trusts the
    /// system's authorities).
    fn certificates(
        &self,
        tls: bool,
        keys: &TargetKeys,
    ) -> Result<Option<TlsCertificates>, ConfigError> {
        let k = &keys.tls;
        let files = [
            (k.ca_file, &self.ca_file),
            (k.client_cert, &self.client_cert),
            (k.client_key, &self.client_key),
        ];
        let Some((first_set, _)) = files.iter().find(|(_, file)| file.is_some()) else {
            return Ok(None);
        };
        if !tls {
            return Err(ConfigError::TlsWithoutRediss {
                key: first_set,
                url_key: keys.url,
            });
        }
        let (client_cert, client_key) = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => (Some(cert), Some(key)),
            (Some(_), None) => {
                return Err(ConfigError::HalfIdentity {
                    key: k.client_key,
                    other: k.client_cert,
                });
            }
            (None, Some(_)) => {
                return Err(ConfigError::HalfIdentity {
                    key: k.client_cert,
                    other: k.client_key,
                });
            }
            (None, None) => (None, None),
        };
        // The files as rustls will take them: every CA certificate a trust anchor, the client
        // certificate and key parsed and matching.
        let check = ClientTls {
            ca_file: self.ca_file.clone(),
            system_roots: false,
            client_cert: client_cert.cloned(),
            client_key: client_key.cloned(),
            verify: if self.ca_file.is_some() {
                Verify::Full
            } else {
                Verify::EncryptOnly
            },
        };
        check.config().map_err(|error| {
            let key = match &error {
                TlsError::Read { what, .. } | TlsError::Pem { what, .. } => match *what {
                    "CA file" => k.ca_file,
                    "client key" => k.client_key,
                    _ => k.client_cert,
                },
                TlsError::Anchor { .. } | TlsError::NoRoots => k.ca_file,
                _ => k.client_cert,
            };
            ConfigError::Tls { key, error }
        })?;
        let read = |key: &'static str, what: &'static str, path: &Path| {
            std::fs::read(path).map_err(|io| ConfigError::Tls {
                key,
                error: TlsError::Read {
                    what,
                    path: path.to_owned(),
                    io,
                },
            })
        };
        let root_cert = match &self.ca_file {
            Some(path) => Some(read(k.ca_file, "CA file", path)?),
            None => None,
        };
        let client_tls = match (client_cert, client_key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read(k.client_cert, "client certificate", cert)?,
                client_key: read(k.client_key, "client key", key)?,
            }),
            _ => None,
        };
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
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
