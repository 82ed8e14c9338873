//! `[store]`: which engine holds the claims, and how it is tuned. Deserialized from the
//! gateway's TOML (or built in code), validated by [`StoreConfig::problems`].

use std::path::PathBuf;
use std::time::Duration;

use idemgate_core::sweep::SweepOptions;
use serde::Deserialize;

/// `[store.postgres]`, deserialized as the PostgreSQL store's own [`PgSettings`].
#[cfg(feature = "postgres")]
pub use idemgate_postgres::{ExpiryMode, PgSettings};

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
    /// `[store.postgres]`: PostgreSQL tuning and expiry, the store's own [`PgSettings`]. Its
    /// `sweep_batch` and `sweep_pause` apply to every engine ([`StoreConfig::sweep_options`]).
    #[cfg(feature = "postgres")]
    #[serde(default)]
    pub postgres: PgSettings,
    /// `[store.postgres]` in a build without the `postgres` feature: only the sweep keys are
    /// read (they apply to every engine); the rest is accepted and ignored.
    #[cfg(not(feature = "postgres"))]
    #[serde(default)]
    pub postgres: PostgresSweep,
    /// Redis: the store (`kind = "redis"`) or a tier in front of the SQL store.
    pub redis: Option<RedisSection>,
    /// How often expired dedup records are swept.
    #[serde(default = "default_sweep_interval", with = "humantime_serde")]
    pub sweep_interval: Duration,
    /// How long history is kept (PostgreSQL drops whole months past it; SQLite deletes in
    /// bounded batches). Never touches live dedup records.
    #[serde(default = "default_history_retention", with = "humantime_serde")]
    pub history_retention: Duration,
    /// How often history past its retention is removed.
    #[serde(default = "default_history_interval", with = "humantime_serde")]
    pub history_interval: Duration,
    /// History goes to an archive (`[history.archive]`) before it is dropped: the store then
    /// never drops history on its own (PostgreSQL's sweep keeps history partitions), and the
    /// gateway's retention job removes each day or partition only once the archive holds it.
    /// Set from the gateway's configuration, not written in `[store]`.
    #[serde(skip)]
    pub history_archived: bool,
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

    /// How each sweep run deletes: `[store.postgres]` sweep_batch, sweep_pause and sweep_pacing
    /// (they apply to every engine that deletes in batches).
    pub fn sweep_options(&self) -> SweepOptions {
        SweepOptions {
            batch: self.postgres.sweep_batch,
            pause: self.postgres.sweep_pause,
            pacing: self.postgres.sweep_pacing,
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            kind: StoreKind::default(),
            path: default_path(),
            url: None,
            postgres: Default::default(),
            redis: None,
            sweep_interval: default_sweep_interval(),
            history_retention: default_history_retention(),
            history_interval: default_history_interval(),
            history_archived: false,
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

fn default_history_retention() -> Duration {
    Duration::from_secs(400 * 86_400)
}

/// The sweep keys of `[store.postgres]`, in a build without the `postgres` feature (with it,
/// `idemgate_postgres::PgSettings` holds them). Other keys of the table are ignored.
#[cfg(not(feature = "postgres"))]
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct PostgresSweep {
    /// Rows per sweep batch. Default 5000.
    pub sweep_batch: std::num::NonZeroU32,
    /// The pause between sweep batches. Default 50 ms.
    #[serde(with = "humantime_serde")]
    pub sweep_pause: Duration,
    /// `adaptive` (default) or `fixed`.
    pub sweep_pacing: idemgate_core::sweep::Pacing,
}

#[cfg(not(feature = "postgres"))]
impl Default for PostgresSweep {
    fn default() -> Self {
        let SweepOptions {
            batch,
            pause,
            pacing,
        } = SweepOptions::default();
        Self {
            sweep_batch: batch,
            sweep_pause: pause,
            sweep_pacing: pacing,
        }
    }
}
