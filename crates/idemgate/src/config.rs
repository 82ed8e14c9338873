//! `[store]`: which engine holds the claims, and how it is tuned. Deserialized from the
//! gateway's TOML (or built in code), validated by [`StoreConfig::problems`].

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::duration::human;

/// A store setting that cannot work, naming its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
pub struct StoreConfigError {
    /// The key, as written in the configuration (`store.url`).
    pub key: &'static str,
    /// What is wrong with it.
    pub why: String,
}

/// Which store holds the claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// The embedded SQLite store (the default): one file in `path`.
    #[default]
    Sqlite,
    /// PostgreSQL at `url`.
    Postgres,
    /// Redis (standalone or Cluster) as the only store, for scale-out; history is best-effort.
    Redis,
}

impl StoreKind {
    /// The kind as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Redis => "redis",
        }
    }
}

/// `[store.redis]`: with `kind = "redis"` the store itself; with another kind, a tier in front of
/// it that answers known duplicates from Redis (a Redis that forgets can only cost a round trip).
/// The Redis crate's own settings type: its keys, defaults and checks.
#[cfg(feature = "redis")]
pub type RedisSection = idemgate_redis::RedisSettings;

/// `[store.redis]` in a build without the `redis` feature: any table loads, and
/// `store.kind = "redis"` is refused at open as not built.
#[cfg(not(feature = "redis"))]
pub type RedisSection = serde::de::IgnoredAny;

/// `[store]`: which engine holds the claims, and how it is tuned and swept.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `sqlite` (default), `postgres` or `redis`.
    #[serde(default)]
    pub kind: StoreKind,
    /// The SQLite data directory.
    #[serde(default = "default_path")]
    pub path: PathBuf,
    /// The PostgreSQL URL (`kind = "postgres"`).
    pub url: Option<String>,
    /// PostgreSQL tuning and expiry.
    #[serde(default)]
    pub postgres: PostgresConfig,
    /// Redis: the store (`kind = "redis"`) or a tier in front of the SQL store.
    pub redis: Option<RedisSection>,
    /// How often expired dedup records are swept.
    #[serde(default = "default_sweep_interval", with = "human")]
    pub sweep_interval: Duration,
    /// How long history is kept (PostgreSQL drops whole months past it; SQLite deletes in
    /// bounded batches). Never touches live dedup records.
    #[serde(default = "default_history_retention", with = "human")]
    pub history_retention: Duration,
    /// How often history past its retention is removed.
    #[serde(default = "default_history_interval", with = "human")]
    pub history_interval: Duration,
}

impl StoreConfig {
    /// Everything about these settings that cannot work, each naming its key.
    pub fn problems(&self) -> Vec<StoreConfigError> {
        let mut problems = Vec::new();
        let mut refuse = |key, why: &str| {
            problems.push(StoreConfigError {
                key,
                why: why.to_owned(),
            })
        };
        #[cfg(feature = "redis")]
        if let Some(Err(e)) = self
            .redis
            .as_ref()
            .map(idemgate_redis::RedisSettings::target)
        {
            refuse(e.key(), &e.problem());
        }
        if self.kind == StoreKind::Redis && self.redis.is_none() {
            refuse("store.redis", "required when store.kind = \"redis\"");
        }
        if self.kind == StoreKind::Postgres && self.url.is_none() {
            refuse("store.url", "required when store.kind = \"postgres\"");
        }
        problems
    }

    /// How each sweep run deletes: `[store.postgres]` sweep_batch and sweep_pause (they apply to
    /// every engine that deletes in batches).
    pub fn sweep_options(&self) -> idemgate_core::sweep::SweepOptions {
        idemgate_core::sweep::SweepOptions {
            batch: std::num::NonZeroU32::new(self.postgres.sweep_batch)
                .unwrap_or(std::num::NonZeroU32::MIN),
            pause: self.postgres.sweep_pause,
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            kind: StoreKind::default(),
            path: default_path(),
            url: None,
            postgres: PostgresConfig::default(),
            redis: None,
            sweep_interval: default_sweep_interval(),
            history_retention: default_history_retention(),
            history_interval: default_history_interval(),
        }
    }
}

fn default_path() -> PathBuf {
    PathBuf::from("./idemgate-data")
}

fn default_sweep_interval() -> Duration {
    Duration::from_secs(60)
}

fn default_history_interval() -> Duration {
    Duration::from_secs(3_600)
}

/// How dedup records expire in PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExpiryMode {
    /// Bounded batched deletes of expired rows.
    #[default]
    Batched,
    /// Range partitions on `expires_at`, dropped whole.
    Partitioned,
}

/// `[store.postgres]`: the PostgreSQL store's tuning and expiry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// The schema holding idemgate's tables (created by the migrations).
    #[serde(default = "default_schema")]
    pub schema: String,
    /// Most claims in one group-committed statement.
    #[serde(default = "default_batch_max")]
    pub batch_max: u32,
    /// How long a batch waits for more claims.
    #[serde(default = "default_batch_linger", with = "human")]
    pub batch_linger: Duration,
    /// Connections in the pool.
    #[serde(default = "default_pool_size")]
    pub pool_size: u32,
    /// How expired records leave (fixed when the schema is created).
    #[serde(default)]
    pub expiry: ExpiryMode,
    /// Rows per sweep batch (`batched` expiry).
    #[serde(default = "default_sweep_batch")]
    pub sweep_batch: u32,
    /// Pause between sweep batches.
    #[serde(default = "default_sweep_pause", with = "human")]
    pub sweep_pause: Duration,
    /// Width of a dedup partition (`partitioned` expiry); must divide a day evenly.
    #[serde(default = "default_partition_width", with = "human")]
    pub partition_width: Duration,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            schema: default_schema(),
            batch_max: default_batch_max(),
            batch_linger: default_batch_linger(),
            pool_size: default_pool_size(),
            expiry: ExpiryMode::default(),
            sweep_batch: default_sweep_batch(),
            sweep_pause: default_sweep_pause(),
            partition_width: default_partition_width(),
        }
    }
}

fn default_schema() -> String {
    "idemgate".to_owned()
}
fn default_batch_max() -> u32 {
    256
}
fn default_batch_linger() -> Duration {
    Duration::from_micros(200)
}
fn default_pool_size() -> u32 {
    16
}
fn default_sweep_batch() -> u32 {
    5_000
}
fn default_sweep_pause() -> Duration {
    Duration::from_millis(50)
}
fn default_partition_width() -> Duration {
    Duration::from_secs(86_400)
}
fn default_history_retention() -> Duration {
    Duration::from_secs(400 * 86_400)
}
