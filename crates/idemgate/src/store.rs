//! The store the gateway runs on, chosen at start: an [`Engine`] (one enum over the engines, so
//! handlers stay generic-free and each engine keeps its own crate), optionally behind a Redis tier
//! that answers known duplicates without touching SQL.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::HistoryRetention;
use idemgate_core::advise::Observation;
use idemgate_core::inbox::{
    DeadLetter, Failure, Inbox, InboxStats, ItemRef, QueueEntry, QueuedItem, ReplayFilter, Taken,
};
use idemgate_core::store::{
    Boot, BootRequest, ClaimStore, HistoryQuery, Identity, Instances, Stats, StoreError,
    StoreStats, Sweep, Timeline, TimelineCounts,
};
use idemgate_core::sweep::{SweepOptions, SweepReport};
use idemgate_core::{
    ClaimOutcome, ClaimRequest, ClaimToken, EventView, Holder, Key, MemoryStore, SourceName,
    Timestamp,
};

#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(unused_imports)
)]
use crate::config::{StoreConfig as Config, StoreKind as Kind};

/// One of the engines.
#[derive(Debug, Clone)]
pub enum Engine {
    /// In memory: for tests and trying things out; nothing survives the process.
    Memory(MemoryStore),
    /// The embedded SQLite store (feature `sqlite`).
    #[cfg(feature = "sqlite")]
    Sqlite(idemgate_sqlite::SqliteStore),
    /// PostgreSQL (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(idemgate_postgres::PgStore),
    /// Redis or Redis Cluster as the store (feature `redis`).
    #[cfg(feature = "redis")]
    Redis(idemgate_redis::RedisStore),
}

/// The store the gateway uses: an engine, or an engine behind a Redis tier.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// An engine on its own.
    Plain(Engine),
    /// An engine behind a Redis tier that answers known duplicates (feature `redis`).
    #[cfg(feature = "redis")]
    Tiered(idemgate_redis::TieredStore<Engine>),
}

impl AnyStore {
    /// An in-memory store.
    pub fn memory() -> Self {
        Self::Plain(Engine::Memory(MemoryStore::new()))
    }
}

/// Why the configured store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// SQLite refused (the directory, the file, a newer schema).
    #[error("cannot open the SQLite store in {path}")]
    Sqlite {
        /// The data directory.
        path: String,
        /// Why.
        #[source]
        source: StoreError,
    },
    #[cfg(feature = "postgres")]
    #[error("cannot open the PostgreSQL store")]
    /// PostgreSQL refused (unreachable, a schema of another mode, ...).
    Postgres(#[source] idemgate_postgres::PgError),
    #[cfg(feature = "redis")]
    #[error("cannot open the Redis store")]
    /// Redis refused (unreachable, an evicting policy, ...).
    Redis(#[source] idemgate_redis::RedisError),
    #[error("{key}: {why}")]
    /// A setting that cannot work.
    Config {
        /// The key, as written in the configuration.
        key: &'static str,
        /// What is wrong with it.
        why: String,
    },
    #[error("store.kind = {kind:?} needs the {feature:?} feature, which this build lacks")]
    /// The store kind's feature is not compiled in.
    NotBuilt {
        /// The configured kind.
        kind: &'static str,
        /// The cargo feature it needs.
        feature: &'static str,
    },
}

impl AnyStore {
    /// Opens the store `config` describes (migrating it if needed), behind a Redis tier when
    /// `[store.redis]` is set and the kind is not `redis`.
    ///
    /// # Errors
    /// [`OpenError`] naming the store.
    pub async fn open(config: &Config) -> Result<Self, OpenError> {
        Self::open_as(config, false).await
    }

    /// Opens the store `config` describes only if it exists at the current schema,
    /// creating and migrating nothing (for the tools that read or sweep; only `migrate` and
    /// `serve` create or upgrade a schema).
    ///
    /// # Errors
    /// [`OpenError`] naming the store; a missing or older schema says to run `idemgate migrate`.
    pub async fn open_existing(config: &Config) -> Result<Self, OpenError> {
        Self::open_as(config, true).await
    }

    async fn open_as(config: &Config, existing: bool) -> Result<Self, OpenError> {
        let engine = Engine::open(config, existing).await?;
        match (&config.redis, config.kind) {
            #[cfg(feature = "redis")]
            (Some(redis), kind) if kind != Kind::Redis => {
                let tier = redis.tier_config().map_err(redis_config_error)?;
                idemgate_redis::TieredStore::new(engine, tier)
                    .map(Self::Tiered)
                    .map_err(OpenError::Redis)
            }
            _ => Ok(Self::Plain(engine)),
        }
    }

    /// Whether [`Stats::stats`] is cheap enough for every `/metrics` scrape: the Redis store
    /// counts by walking its keyspace, so it leaves the row gauges out.
    pub fn counts_cheaply(&self) -> bool {
        match self {
            #[cfg(feature = "redis")]
            Self::Plain(Engine::Redis(_)) => false,
            _ => true,
        }
    }

    /// One source's deliveries over time ([`Timeline::timeline`]), from the store of record
    /// (behind a tier, the engine beneath it). `None` on the Redis store: its history is a
    /// stream per event, which it cannot count by time without reading every one.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    pub async fn timeline(
        &self,
        source: &SourceName,
        bucket_secs: NonZeroU32,
        buckets: NonZeroU32,
    ) -> Result<Option<TimelineCounts>, StoreError> {
        let engine = match self {
            Self::Plain(e) => e,
            #[cfg(feature = "redis")]
            Self::Tiered(t) => t.inner(),
        };
        match engine {
            Engine::Memory(s) => s.timeline(source, bucket_secs, buckets).await.map(Some),
            #[cfg(feature = "sqlite")]
            Engine::Sqlite(s) => s.timeline(source, bucket_secs, buckets).await.map(Some),
            #[cfg(feature = "postgres")]
            Engine::Postgres(s) => s.timeline(source, bucket_secs, buckets).await.map(Some),
            #[cfg(feature = "redis")]
            Engine::Redis(_) => Ok(None),
        }
    }

    /// `source`'s most recent history rows, newest first ([`Timeline::recent`]), from the store
    /// of record; `None` on the Redis store (its history is a stream per event).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    pub async fn recent(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
    ) -> Result<Option<Vec<idemgate_core::Recent>>, StoreError> {
        match self.engine_of_record() {
            Engine::Memory(s) => s.recent(source, limit).await.map(Some),
            #[cfg(feature = "sqlite")]
            Engine::Sqlite(s) => s.recent(source, limit).await.map(Some),
            #[cfg(feature = "postgres")]
            Engine::Postgres(s) => s.recent(source, limit).await.map(Some),
            #[cfg(feature = "redis")]
            Engine::Redis(_) => Ok(None),
        }
    }

    /// How far the host's wall clock is ahead of the store's (ms; negative: behind), for the
    /// embedded stores, which keep their own steady time ([`idemgate_core::SteadyClock`]): a
    /// wall-clock step shows here. `None` for the stores on a server's clock.
    pub fn clock_divergence_ms(&self) -> Option<i64> {
        let engine = match self {
            Self::Plain(e) => e,
            #[cfg(feature = "redis")]
            Self::Tiered(t) => t.inner(),
        };
        match engine {
            Engine::Memory(m) => m.clock().wall_divergence_ms(),
            #[cfg(feature = "sqlite")]
            Engine::Sqlite(s) => s.clock().wall_divergence_ms(),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The engine's name, for logs and `/healthz` (`sqlite+redis` behind a tier).
    pub fn engine(&self) -> &'static str {
        match self {
            Self::Plain(e) => e.name(),
            #[cfg(feature = "redis")]
            Self::Tiered(t) => match t.inner() {
                Engine::Memory(_) => "memory+redis",
                #[cfg(feature = "sqlite")]
                Engine::Sqlite(_) => "sqlite+redis",
                #[cfg(feature = "postgres")]
                Engine::Postgres(_) => "postgres+redis",
                Engine::Redis(_) => "redis+redis",
            },
        }
    }

    /// The Redis tier's hits, misses, errors and bypasses, when there is a tier.
    #[cfg(feature = "redis")]
    pub fn tier_counters(&self) -> Option<idemgate_redis::TierCounters> {
        match self {
            Self::Tiered(t) => Some(t.counters()),
            Self::Plain(_) => None,
        }
    }

    /// A real round trip to the Redis tier, when there is one (`None` without a tier).
    pub async fn ping_tier(&self) -> Option<Result<(), String>> {
        match self {
            #[cfg(feature = "redis")]
            Self::Tiered(t) => Some(
                t.ping_tier()
                    .await
                    .map_err(|e| crate::ErrorChain(&e).to_string()),
            ),
            Self::Plain(_) => None,
        }
    }

    /// The store of record's schema version now and the newest this build knows, for the
    /// engines with a schema (SQLite, PostgreSQL); `None` for the others.
    ///
    /// # Errors
    /// The store's error.
    pub async fn schema_version(&self) -> Result<Option<(i64, i64)>, StoreError> {
        match self.engine_of_record() {
            #[cfg(feature = "sqlite")]
            Engine::Sqlite(s) => s.schema_version().await.map(Some),
            #[cfg(feature = "postgres")]
            Engine::Postgres(s) => s.schema_version().await.map(Some).map_err(StoreError::from),
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }

    /// A real round trip to the store of record: a lookup of a key no sender can use.
    ///
    /// # Errors
    /// The store's error.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let key = Key::parse("idemgate.health", "ping").expect("a valid key");
        match self {
            Self::Plain(s) => s.lookup(&key).await.map(drop),
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.lookup(&key).await.map(drop),
        }
    }
}

impl Engine {
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(unused_variables)
    )]
    async fn open(config: &Config, existing: bool) -> Result<Self, OpenError> {
        match config.kind {
            #[cfg(feature = "sqlite")]
            Kind::Sqlite => if existing {
                idemgate_sqlite::SqliteStore::open_existing(&config.path, Default::default())
            } else {
                idemgate_sqlite::SqliteStore::open(&config.path)
            }
            .map(Self::Sqlite)
            .map_err(|source| OpenError::Sqlite {
                path: config.path.display().to_string(),
                source,
            }),
            #[cfg(feature = "postgres")]
            Kind::Postgres => if existing {
                idemgate_postgres::PgStore::open_existing(pg_config(config)).await
            } else {
                idemgate_postgres::PgStore::connect(pg_config(config)).await
            }
            .map(Self::Postgres)
            .map_err(OpenError::Postgres),
            #[cfg(feature = "redis")]
            Kind::Redis => {
                let redis = config.redis.as_ref().ok_or(OpenError::Config {
                    key: "store.redis",
                    why: "required when store.kind = \"redis\"".into(),
                })?;
                let cfg = redis.store_config().map_err(redis_config_error)?;
                idemgate_redis::RedisStore::connect(cfg)
                    .await
                    .map(Self::Redis)
                    .map_err(OpenError::Redis)
            }
            #[allow(unreachable_patterns)]
            kind => Err(OpenError::NotBuilt {
                kind: kind.name(),
                feature: kind.name(),
            }),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => "postgres",
            #[cfg(feature = "redis")]
            Self::Redis(_) => "redis",
        }
    }
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migrated {
    /// The SQLite store, at the current schema (created or upgraded if it was not).
    Sqlite {
        /// The database file.
        path: std::path::PathBuf,
    },
    /// The PostgreSQL schema: the versions applied now (none when it was up to date).
    Postgres {
        /// Versions applied by this call, oldest first.
        applied: Vec<i64>,
        /// The schema's version now.
        version: i64,
    },
    /// Redis keeps no schema.
    Redis,
}

/// Creates or upgrades the store's schema (PostgreSQL: under an advisory lock, all or nothing),
/// as `serve` does at start; `idemgate migrate`.
///
/// # Errors
/// [`OpenError`] naming the store.
pub async fn migrate(config: &Config) -> Result<Migrated, OpenError> {
    match config.kind {
        #[cfg(feature = "sqlite")]
        Kind::Sqlite => idemgate_sqlite::SqliteStore::open(&config.path)
            .map(|s| Migrated::Sqlite {
                path: s.path().to_owned(),
            })
            .map_err(|source| OpenError::Sqlite {
                path: config.path.display().to_string(),
                source,
            }),
        #[cfg(feature = "postgres")]
        Kind::Postgres => idemgate_postgres::migrate(&pg_config(config))
            .await
            .map(|r| Migrated::Postgres {
                applied: r.applied,
                version: r.version,
            })
            .map_err(OpenError::Postgres),
        Kind::Redis => Ok(Migrated::Redis),
        #[allow(unreachable_patterns)]
        kind => Err(OpenError::NotBuilt {
            kind: kind.name(),
            feature: kind.name(),
        }),
    }
}

/// The PostgreSQL store's configuration: `[store.postgres]` on `store.url`, with
/// `store.history_retention`.
#[cfg(feature = "postgres")]
pub(crate) fn pg_config(config: &Config) -> idemgate_postgres::PgConfig {
    let mut pg = idemgate_postgres::PgConfig::from_settings(
        config.url.clone().unwrap_or_default(),
        &config.postgres,
    );
    pg.history_retention = config.history_retention;
    pg.history_archived = config.history_archived;
    pg
}

impl ClaimStore for Engine {
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        match self {
            Self::Memory(s) => s.claim(req).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.claim(req).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.claim(req).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.claim(req).await,
        }
    }
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        match self {
            Self::Memory(s) => s.complete(token).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.complete(token).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.complete(token).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.complete(token).await,
        }
    }
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        match self {
            Self::Memory(s) => s.release(token).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.release(token).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.release(token).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.release(token).await,
        }
    }
    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        match self {
            Self::Memory(s) => s.renew(token, lease).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.renew(token, lease).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.renew(token, lease).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.renew(token, lease).await,
        }
    }
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        match self {
            Self::Memory(s) => s.lookup(key).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.lookup(key).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.lookup(key).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.lookup(key).await,
        }
    }
}

impl Identity for Engine {
    fn store_id(&self) -> &str {
        match self {
            Self::Memory(s) => s.store_id(),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.store_id(),
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.store_id(),
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.store_id(),
        }
    }
}

impl Instances for Engine {
    async fn register_boot(&self, req: &BootRequest) -> Result<Boot, StoreError> {
        match self {
            Self::Memory(s) => s.register_boot(req).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.register_boot(req).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.register_boot(req).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.register_boot(req).await,
        }
    }

    async fn heartbeat(&self, holder: &Holder, lease: Duration) -> Result<Timestamp, StoreError> {
        match self {
            Self::Memory(s) => s.heartbeat(holder, lease).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.heartbeat(holder, lease).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.heartbeat(holder, lease).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.heartbeat(holder, lease).await,
        }
    }

    async fn end_boot(&self, holder: &Holder) -> Result<(), StoreError> {
        match self {
            Self::Memory(s) => s.end_boot(holder).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.end_boot(holder).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.end_boot(holder).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.end_boot(holder).await,
        }
    }
}

impl Stats for Engine {
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        match self {
            Self::Memory(s) => s.stats().await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.stats().await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.stats().await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.stats().await,
        }
    }
}

impl Sweep for Engine {
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        match self {
            // Redis expires its keys itself.
            #[cfg(feature = "redis")]
            Self::Redis(_) => Ok(0),
            Self::Memory(s) => s.sweep_expired(batch).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.sweep_expired(batch).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.sweep_expired(batch).await,
        }
    }

    async fn sweep_run<P, F>(
        &self,
        opts: SweepOptions,
        pause: P,
        on_batch: impl FnMut(u64) + Send,
    ) -> Result<SweepReport, StoreError>
    where
        P: FnMut(Duration) -> F + Send,
        F: Future<Output = bool> + Send,
    {
        match self {
            // Redis expires its keys itself.
            #[cfg(feature = "redis")]
            Self::Redis(_) => Ok(SweepReport::default()),
            Self::Memory(s) => s.sweep_run(opts, pause, on_batch).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.sweep_run(opts, pause, on_batch).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.sweep_run(opts, pause, on_batch).await,
        }
    }
}

impl HistoryQuery for Engine {
    async fn has_source(&self, source: &idemgate_core::SourceName) -> Result<bool, StoreError> {
        match self {
            Self::Memory(s) => s.has_source(source).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.has_source(source).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.has_source(source).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.has_source(source).await,
        }
    }
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        match self {
            Self::Memory(s) => s.observe(period).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.observe(period).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.observe(period).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.observe(period).await,
        }
    }
}

impl HistoryRetention for Engine {
    async fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        match self {
            Self::Memory(s) => s.purge_history(retention, batch).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.purge_history(retention, batch).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.purge_history(retention, batch).await,
            #[cfg(feature = "redis")]
            Self::Redis(s) => s.purge_history(retention, batch).await,
        }
    }
}

impl ClaimStore for AnyStore {
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        match self {
            Self::Plain(s) => s.claim(req).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.claim(req).await,
        }
    }
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        match self {
            Self::Plain(s) => s.complete(token).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.complete(token).await,
        }
    }
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        match self {
            Self::Plain(s) => s.release(token).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.release(token).await,
        }
    }
    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        match self {
            Self::Plain(s) => s.renew(token, lease).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.renew(token, lease).await,
        }
    }
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        match self {
            Self::Plain(s) => s.lookup(key).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.lookup(key).await,
        }
    }
}

impl Identity for AnyStore {
    fn store_id(&self) -> &str {
        match self {
            Self::Plain(s) => s.store_id(),
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.store_id(),
        }
    }
}

impl Instances for AnyStore {
    async fn register_boot(&self, req: &BootRequest) -> Result<Boot, StoreError> {
        match self {
            Self::Plain(s) => s.register_boot(req).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.register_boot(req).await,
        }
    }

    async fn heartbeat(&self, holder: &Holder, lease: Duration) -> Result<Timestamp, StoreError> {
        match self {
            Self::Plain(s) => s.heartbeat(holder, lease).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.heartbeat(holder, lease).await,
        }
    }

    async fn end_boot(&self, holder: &Holder) -> Result<(), StoreError> {
        match self {
            Self::Plain(s) => s.end_boot(holder).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.end_boot(holder).await,
        }
    }
}

impl Stats for AnyStore {
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        match self {
            Self::Plain(s) => s.stats().await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.stats().await,
        }
    }
}

impl Sweep for AnyStore {
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        match self {
            Self::Plain(s) => s.sweep_expired(batch).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.sweep_expired(batch).await,
        }
    }

    async fn sweep_run<P, F>(
        &self,
        opts: SweepOptions,
        pause: P,
        on_batch: impl FnMut(u64) + Send,
    ) -> Result<SweepReport, StoreError>
    where
        P: FnMut(Duration) -> F + Send,
        F: Future<Output = bool> + Send,
    {
        match self {
            Self::Plain(s) => s.sweep_run(opts, pause, on_batch).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.sweep_run(opts, pause, on_batch).await,
        }
    }
}

impl HistoryQuery for AnyStore {
    async fn has_source(&self, source: &idemgate_core::SourceName) -> Result<bool, StoreError> {
        match self {
            Self::Plain(s) => s.has_source(source).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.has_source(source).await,
        }
    }
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        match self {
            Self::Plain(s) => s.observe(period).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.observe(period).await,
        }
    }
}

impl HistoryRetention for AnyStore {
    async fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        match self {
            Self::Plain(s) => s.purge_history(retention, batch).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.purge_history(retention, batch).await,
        }
    }
}

impl idemgate_core::HistoryExport for Engine {
    async fn history_days(
        &self,
        source: Option<&SourceName>,
        since: Timestamp,
        until: Timestamp,
    ) -> Result<idemgate_core::HistoryDays, StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.history_days(source, since, until).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.history_days(source, since, until).await,
            other => Err(no_export(other)),
        }
    }

    async fn history_rows(
        &self,
        source: &SourceName,
        from: Timestamp,
        until: Timestamp,
        after: Option<idemgate_core::HistoryCursor>,
        limit: NonZeroU32,
    ) -> Result<Vec<idemgate_core::HistoryRow>, StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.history_rows(source, from, until, after, limit).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.history_rows(source, from, until, after, limit).await,
            other => Err(no_export(other)),
        }
    }

    async fn history_past(
        &self,
        retention: Duration,
    ) -> Result<Vec<idemgate_core::RetentionUnit>, StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.history_past(retention).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.history_past(retention).await,
            other => Err(no_export(other)),
        }
    }

    async fn drop_history(
        &self,
        unit: &idemgate_core::RetentionUnit,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        match self {
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.drop_history(unit, retention, batch).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.drop_history(unit, retention, batch).await,
            other => Err(no_export(other)),
        }
    }
}

/// The engines whose history cannot be archived say so.
fn no_export(engine: &Engine) -> StoreError {
    let which = match engine {
        Engine::Memory(_) => "the in-memory store",
        #[cfg(feature = "redis")]
        Engine::Redis(_) => "the Redis store",
        #[allow(unreachable_patterns)]
        _ => "this store",
    };
    StoreError::NoStore {
        what: format!(
            "{which} cannot export its history to an archive: history archives come from SQLite or PostgreSQL"
        ),
    }
}

impl idemgate_core::HistoryExport for AnyStore {
    async fn history_days(
        &self,
        source: Option<&SourceName>,
        since: Timestamp,
        until: Timestamp,
    ) -> Result<idemgate_core::HistoryDays, StoreError> {
        match self {
            Self::Plain(s) => s.history_days(source, since, until).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.inner().history_days(source, since, until).await,
        }
    }

    async fn history_rows(
        &self,
        source: &SourceName,
        from: Timestamp,
        until: Timestamp,
        after: Option<idemgate_core::HistoryCursor>,
        limit: NonZeroU32,
    ) -> Result<Vec<idemgate_core::HistoryRow>, StoreError> {
        match self {
            Self::Plain(s) => s.history_rows(source, from, until, after, limit).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => {
                s.inner()
                    .history_rows(source, from, until, after, limit)
                    .await
            }
        }
    }

    async fn history_past(
        &self,
        retention: Duration,
    ) -> Result<Vec<idemgate_core::RetentionUnit>, StoreError> {
        match self {
            Self::Plain(s) => s.history_past(retention).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.inner().history_past(retention).await,
        }
    }

    async fn drop_history(
        &self,
        unit: &idemgate_core::RetentionUnit,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        match self {
            Self::Plain(s) => s.drop_history(unit, retention, batch).await,
            #[cfg(feature = "redis")]
            Self::Tiered(s) => s.inner().drop_history(unit, retention, batch).await,
        }
    }
}

/// A `[store.redis]` setting that cannot work, as the other settings' errors are.
#[cfg(feature = "redis")]
fn redis_config_error(e: idemgate_redis::ConfigError) -> OpenError {
    OpenError::Config {
        key: e.key(),
        why: e.problem(),
    }
}

/// Inbox mode's queue on whichever engine this is; the Redis store keeps none (an inbox source
/// on it is refused at start: its queue must be written in the claim's transaction).
impl Inbox for Engine {
    async fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> Result<ClaimOutcome, StoreError> {
        match self {
            Self::Memory(s) => s.enqueue(req, item).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.enqueue(req, item).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.enqueue(req, item).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Err(no_inbox()),
        }
    }
    async fn requeue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        match self {
            Self::Memory(s) => s.requeue(req, item, reason).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.requeue(req, item, reason).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.requeue(req, item, reason).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Err(no_inbox()),
        }
    }
    async fn take(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&Holder>,
    ) -> Result<Vec<Taken>, StoreError> {
        match self {
            Self::Memory(s) => s.take(source, limit, lease, holder).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.take(source, limit, lease, holder).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.take(source, limit, lease, holder).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Err(no_inbox()),
        }
    }
    async fn delivered(&self, item: ItemRef) -> Result<(), StoreError> {
        match self {
            Self::Memory(s) => s.delivered(item).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.delivered(item).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.delivered(item).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Err(no_inbox()),
        }
    }
    async fn retry_later(
        &self,
        item: ItemRef,
        failure: &Failure,
        delay: Duration,
    ) -> Result<(), StoreError> {
        match self {
            Self::Memory(s) => s.retry_later(item, failure, delay).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.retry_later(item, failure, delay).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.retry_later(item, failure, delay).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Err(no_inbox()),
        }
    }
    async fn dead_letter(&self, item: ItemRef, failure: &Failure) -> Result<(), StoreError> {
        match self {
            Self::Memory(s) => s.dead_letter(item, failure).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.dead_letter(item, failure).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.dead_letter(item, failure).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Err(no_inbox()),
        }
    }
    async fn dead_letters(
        &self,
        filter: &ReplayFilter,
        limit: NonZeroU32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        match self {
            Self::Memory(s) => s.dead_letters(filter, limit).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.dead_letters(filter, limit).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.dead_letters(filter, limit).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Ok(Vec::new()),
        }
    }
    async fn queued(&self, key: &Key) -> Result<Vec<QueueEntry>, StoreError> {
        match self {
            Self::Memory(s) => s.queued(key).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.queued(key).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.queued(key).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Ok(Vec::new()),
        }
    }
    async fn replay_dead_letters(
        &self,
        filter: &ReplayFilter,
        reason: &str,
    ) -> Result<u64, StoreError> {
        match self {
            Self::Memory(s) => s.replay_dead_letters(filter, reason).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.replay_dead_letters(filter, reason).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.replay_dead_letters(filter, reason).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Ok(0),
        }
    }
    async fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        match self {
            Self::Memory(s) => s.purge_dead_letters(retention, batch).await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.purge_dead_letters(retention, batch).await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.purge_dead_letters(retention, batch).await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Ok(0),
        }
    }
    async fn inbox_stats(&self) -> Result<Vec<InboxStats>, StoreError> {
        match self {
            Self::Memory(s) => s.inbox_stats().await,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(s) => s.inbox_stats().await,
            #[cfg(feature = "postgres")]
            Self::Postgres(s) => s.inbox_stats().await,
            #[cfg(feature = "redis")]
            Self::Redis(_) => Ok(Vec::new()),
        }
    }
}

/// The Redis store's answer to an inbox operation.
#[cfg(feature = "redis")]
fn no_inbox() -> StoreError {
    StoreError::backend(
        "inbox mode",
        "the Redis store keeps no inbox: inbox sources need store.kind = \"sqlite\" or \"postgres\"",
    )
}

/// The inbox is the store of record's: behind a Redis tier, every call goes to the engine (the
/// tier caches claims, not queues).
impl Inbox for AnyStore {
    async fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> Result<ClaimOutcome, StoreError> {
        self.engine_of_record().enqueue(req, item).await
    }
    async fn requeue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        self.engine_of_record().requeue(req, item, reason).await
    }
    async fn take(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&Holder>,
    ) -> Result<Vec<Taken>, StoreError> {
        self.engine_of_record()
            .take(source, limit, lease, holder)
            .await
    }
    async fn delivered(&self, item: ItemRef) -> Result<(), StoreError> {
        self.engine_of_record().delivered(item).await
    }
    async fn retry_later(
        &self,
        item: ItemRef,
        failure: &Failure,
        delay: Duration,
    ) -> Result<(), StoreError> {
        self.engine_of_record()
            .retry_later(item, failure, delay)
            .await
    }
    async fn dead_letter(&self, item: ItemRef, failure: &Failure) -> Result<(), StoreError> {
        self.engine_of_record().dead_letter(item, failure).await
    }
    async fn dead_letters(
        &self,
        filter: &ReplayFilter,
        limit: NonZeroU32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.engine_of_record().dead_letters(filter, limit).await
    }
    async fn queued(&self, key: &Key) -> Result<Vec<QueueEntry>, StoreError> {
        self.engine_of_record().queued(key).await
    }
    async fn replay_dead_letters(
        &self,
        filter: &ReplayFilter,
        reason: &str,
    ) -> Result<u64, StoreError> {
        self.engine_of_record()
            .replay_dead_letters(filter, reason)
            .await
    }
    async fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        self.engine_of_record()
            .purge_dead_letters(retention, batch)
            .await
    }
    async fn inbox_stats(&self) -> Result<Vec<InboxStats>, StoreError> {
        self.engine_of_record().inbox_stats().await
    }
}

impl AnyStore {
    /// The engine beneath any tier: the store of record.
    fn engine_of_record(&self) -> &Engine {
        match self {
            Self::Plain(e) => e,
            #[cfg(feature = "redis")]
            Self::Tiered(t) => t.inner(),
        }
    }
}
