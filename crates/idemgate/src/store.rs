//! The store the gateway runs on, chosen at start: [`AnyStore`], any [`Store`] behind one
//! shared pointer. An engine of this workspace (SQLite, PostgreSQL, Redis, in memory), optionally
//! behind a Redis tier that answers known duplicates without touching SQL, or a store of the
//! caller's own: [`AnyStore::new`] takes anything that implements [`ClaimStore`],
//! [`Identity`] and [`Capabilities`].
//!
//! [`AnyStore`] implements every store trait once, by asking the store for the capability
//! ([`Capabilities::inbox`], ...): a store without it answers
//! [`StoreError::Unsupported`], never an empty answer.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::advise::Observation;
use idemgate_core::inbox::{
    DeadLetter, Failure, Inbox, InboxStats, ItemRef, QueueEntry, QueuedItem, ReplayFilter, Taken,
};
use idemgate_core::object::{
    BoxFuture, DynHistory, DynHistoryExport, DynInbox, DynInstances, DynStats, DynSweep,
    DynTimeline,
};
use idemgate_core::store::{
    Boot, BootRequest, ClaimStore, HistoryQuery, Identity, Instances, Stats, StoreError,
    StoreStats, Sweep, TimelineCounts,
};
use idemgate_core::sweep::{SweepOptions, SweepReport};
use idemgate_core::{
    Capabilities, ClaimOutcome, ClaimRequest, ClaimToken, Clock, EventView, HistoryRetention,
    Holder, Key, MemoryStore, Record, RecordResult, SourceName, Store, Timestamp,
};

#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "redis")),
    allow(unused_imports)
)]
use crate::config::{StoreConfig as Config, StoreKind as Kind};

/// Any store, shared: what [`crate::Dedup`], the tower layer and the gateway hold. Cheap to
/// clone.
#[derive(Clone)]
pub struct AnyStore {
    store: Arc<dyn Store>,
    /// The Redis tier in front, when there is one (its counters and its own round trip).
    #[cfg(feature = "redis")]
    tier: Option<Arc<idemgate_redis::TieredStore<AnyStore>>>,
}

impl std::fmt::Debug for AnyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("AnyStore").field(&self.store).finish()
    }
}

impl AnyStore {
    /// Any store: an engine, or a store of the caller's own (it implements [`ClaimStore`],
    /// [`Identity`] and [`Capabilities`], saying which of the other store traits it has).
    pub fn new(store: impl Store) -> Self {
        Self {
            store: Arc::new(store),
            #[cfg(feature = "redis")]
            tier: None,
        }
    }

    /// An in-memory store.
    pub fn memory() -> Self {
        Self::new(MemoryStore::new())
    }

    /// The store, as an object: its capabilities, asked for one by one.
    pub fn object(&self) -> &dyn Store {
        self.store.as_ref()
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
        let engine = open_engine(config, existing).await?;
        match (&config.redis, config.kind) {
            #[cfg(feature = "redis")]
            (Some(redis), kind) if kind != Kind::Redis => {
                let tier = redis.tier_config().map_err(redis_config_error)?;
                let tiered = Arc::new(
                    idemgate_redis::TieredStore::new(engine, tier).map_err(OpenError::Redis)?,
                );
                Ok(Self {
                    store: tiered.clone(),
                    tier: Some(tiered),
                })
            }
            _ => Ok(engine),
        }
    }

    /// Whether [`Stats::stats`] is cheap enough for every `/metrics` scrape: the Redis store
    /// counts by walking its keyspace, so it leaves the row gauges out.
    pub fn counts_cheaply(&self) -> bool {
        self.store.counts_cheaply()
    }

    /// One source's deliveries over time ([`Timeline::timeline`](idemgate_core::Timeline)),
    /// from the store of record (behind a tier, the engine beneath it). `None` for a store
    /// without a timeline (Redis: its history is a stream per event, which it cannot count by
    /// time without reading every one).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    pub async fn timeline(
        &self,
        source: &SourceName,
        bucket_secs: NonZeroU32,
        buckets: NonZeroU32,
    ) -> Result<Option<TimelineCounts>, StoreError> {
        match self.store.timeline() {
            Some(t) => t.timeline(source, bucket_secs, buckets).await.map(Some),
            None => Ok(None),
        }
    }

    /// `source`'s most recent history rows, newest first
    /// ([`Timeline::recent`](idemgate_core::Timeline)), from the store of record; `None` for a
    /// store without a timeline.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    pub async fn recent(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
    ) -> Result<Option<Vec<idemgate_core::Recent>>, StoreError> {
        match self.store.timeline() {
            Some(t) => t.recent(source, limit).await.map(Some),
            None => Ok(None),
        }
    }

    /// How far the host's wall clock is ahead of the store's (ms; negative: behind), for the
    /// embedded stores, which keep their own steady time ([`idemgate_core::SteadyClock`]): a
    /// wall-clock step shows here. `None` for the stores on a server's clock.
    pub fn clock_divergence_ms(&self) -> Option<i64> {
        self.store.clock().and_then(Clock::wall_divergence_ms)
    }

    /// The engine's name, for logs and `/healthz` (`sqlite+redis` behind a tier).
    pub fn engine(&self) -> &'static str {
        self.store.engine()
    }

    /// The Redis tier's hits, misses, errors and bypasses, when there is a tier.
    #[cfg(feature = "redis")]
    pub fn tier_counters(&self) -> Option<idemgate_redis::TierCounters> {
        self.tier.as_ref().map(|t| t.counters())
    }

    /// A real round trip to the Redis tier, when there is one (`None` without a tier).
    pub async fn ping_tier(&self) -> Option<Result<(), String>> {
        #[cfg(feature = "redis")]
        if let Some(t) = &self.tier {
            return Some(
                t.ping_tier()
                    .await
                    .map_err(|e| crate::ErrorChain(&e).to_string()),
            );
        }
        None
    }

    /// The store of record's schema version now and the newest this build knows, for the
    /// engines with a schema (SQLite, PostgreSQL); `None` for the others.
    ///
    /// # Errors
    /// The store's error.
    pub async fn schema_version(&self) -> Result<Option<(i64, i64)>, StoreError> {
        self.store.schema_version().await
    }

    /// A real round trip to the store of record: a lookup of a key no sender can use.
    ///
    /// # Errors
    /// The store's error.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let key = Key::parse("idemgate.health", "ping").expect("a valid key");
        self.store.lookup(&key).await.map(drop)
    }

    /// The queue items of `key`'s event ([`Inbox::queued`]); none on a store without an inbox
    /// (it holds no queue items: a lookup of an event there is answered, not refused).
    ///
    /// # Errors
    /// The store's error.
    pub async fn queue_of(&self, key: &Key) -> Result<Vec<QueueEntry>, StoreError> {
        match self.store.inbox() {
            Some(inbox) => inbox.queued(key).await,
            None => Ok(Vec::new()),
        }
    }

    /// The capability, or [`StoreError::Unsupported`] naming it.
    fn need<'a, T: ?Sized>(
        &'a self,
        capability: &'static str,
        found: impl FnOnce(&'a dyn Store) -> Option<&'a T>,
    ) -> Result<&'a T, StoreError> {
        found(self.store.as_ref()).ok_or(StoreError::Unsupported {
            engine: self.store.engine(),
            capability,
        })
    }
}

#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(unused_variables)
)]
async fn open_engine(config: &Config, existing: bool) -> Result<AnyStore, OpenError> {
    match config.kind {
        #[cfg(feature = "sqlite")]
        Kind::Sqlite => if existing {
            idemgate_sqlite::SqliteStore::open_existing(&config.path, Default::default())
        } else {
            idemgate_sqlite::SqliteStore::open(&config.path)
        }
        .map(AnyStore::new)
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
        .map(AnyStore::new)
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
                .map(AnyStore::new)
                .map_err(OpenError::Redis)
        }
        #[allow(unreachable_patterns)]
        kind => Err(OpenError::NotBuilt {
            kind: kind.name(),
            feature: kind.name(),
        }),
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

/// A `[store.redis]` setting that cannot work, as the other settings' errors are.
#[cfg(feature = "redis")]
fn redis_config_error(e: idemgate_redis::ConfigError) -> OpenError {
    OpenError::Config {
        key: e.key(),
        why: e.problem(),
    }
}

// The one delegate: each store trait, once, through the store's object and its capabilities.

impl ClaimStore for AnyStore {
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        self.store.claim(req).await
    }
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.store.complete(token).await
    }
    async fn complete_keeping(
        &self,
        token: &ClaimToken,
        result: RecordResult,
    ) -> Result<(), StoreError> {
        self.store.complete_keeping(token, result).await
    }
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.store.release(token).await
    }
    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        self.store.renew(token, lease).await
    }
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        self.store.lookup(key).await
    }
    async fn record(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        self.store.record(key).await
    }
}

impl Identity for AnyStore {
    fn store_id(&self) -> &str {
        self.store.store_id()
    }
}

impl Capabilities for AnyStore {
    fn engine(&self) -> &'static str {
        self.store.engine()
    }
    fn instances(&self) -> Option<&dyn DynInstances> {
        self.store.instances()
    }
    fn sweep(&self) -> Option<&dyn DynSweep> {
        self.store.sweep()
    }
    fn history(&self) -> Option<&dyn DynHistory> {
        self.store.history()
    }
    fn stats(&self) -> Option<&dyn DynStats> {
        self.store.stats()
    }
    fn counts_cheaply(&self) -> bool {
        self.store.counts_cheaply()
    }
    fn timeline(&self) -> Option<&dyn DynTimeline> {
        self.store.timeline()
    }
    fn export(&self) -> Option<&dyn DynHistoryExport> {
        self.store.export()
    }
    fn inbox(&self) -> Option<&dyn DynInbox> {
        self.store.inbox()
    }
    fn clock(&self) -> Option<&dyn Clock> {
        self.store.clock()
    }
    fn schema_version(&self) -> BoxFuture<'_, Result<Option<(i64, i64)>, StoreError>> {
        self.store.schema_version()
    }
}

impl Instances for AnyStore {
    async fn register_boot(&self, req: &BootRequest) -> Result<Boot, StoreError> {
        let i = self.need("instances", |s| s.instances())?;
        i.register_boot(req).await
    }
    async fn heartbeat(&self, holder: &Holder, lease: Duration) -> Result<Timestamp, StoreError> {
        let i = self.need("instances", |s| s.instances())?;
        i.heartbeat(holder, lease).await
    }
    async fn end_boot(&self, holder: &Holder) -> Result<(), StoreError> {
        let i = self.need("instances", |s| s.instances())?;
        i.end_boot(holder).await
    }
}

impl Stats for AnyStore {
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let s = self.need("counting its rows", |s| s.stats())?;
        s.stats().await
    }
}

impl Sweep for AnyStore {
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        let s = self.need("sweeping (it expires records by itself)", |s| s.sweep())?;
        s.sweep_expired(batch).await
    }

    async fn sweep_run<P, F>(
        &self,
        opts: SweepOptions,
        mut pause: P,
        on_batch: impl FnMut(u64) + Send,
    ) -> Result<SweepReport, StoreError>
    where
        Self: Sized,
        P: FnMut(Duration) -> F + Send,
        F: Future<Output = bool> + Send,
    {
        let s = self.need("sweeping (it expires records by itself)", |s| s.sweep())?;
        s.sweep_run(
            opts,
            Box::new(move |d| Box::pin(pause(d)) as BoxFuture<'_, bool>),
            Box::new(on_batch),
        )
        .await
    }

    fn claim_latency(&self) -> Option<&idemgate_core::sweep::ClaimLatency> {
        self.store.sweep().and_then(DynSweep::claim_latency)
    }
}

impl HistoryQuery for AnyStore {
    async fn has_source(&self, source: &SourceName) -> Result<bool, StoreError> {
        let h = self.need("history", |s| s.history())?;
        h.has_source(source).await
    }
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        let h = self.need("history", |s| s.history())?;
        h.observe(period).await
    }
}

impl HistoryRetention for AnyStore {
    async fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        let h = self.need("history", |s| s.history())?;
        h.purge_history(retention, batch).await
    }
}

impl idemgate_core::HistoryExport for AnyStore {
    async fn history_days(
        &self,
        source: Option<&SourceName>,
        since: Timestamp,
        until: Timestamp,
    ) -> Result<idemgate_core::HistoryDays, StoreError> {
        let e = self.need("history export", |s| s.export())?;
        e.history_days(source, since, until).await
    }
    async fn history_rows(
        &self,
        source: &SourceName,
        from: Timestamp,
        until: Timestamp,
        after: Option<idemgate_core::HistoryCursor>,
        limit: NonZeroU32,
    ) -> Result<Vec<idemgate_core::HistoryRow>, StoreError> {
        let e = self.need("history export", |s| s.export())?;
        e.history_rows(source, from, until, after, limit).await
    }
    async fn history_past(
        &self,
        retention: Duration,
    ) -> Result<Vec<idemgate_core::RetentionUnit>, StoreError> {
        let e = self.need("history export", |s| s.export())?;
        e.history_past(retention).await
    }
    async fn drop_history(
        &self,
        unit: &idemgate_core::RetentionUnit,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        let e = self.need("history export", |s| s.export())?;
        e.drop_history(unit, retention, batch).await
    }
}

/// What a store without an inbox is refused with.
const INBOX: &str = "an inbox (inbox sources need store.kind = \"sqlite\" or \"postgres\")";

/// Inbox mode's queue: behind a Redis tier, the store of record's (the tier caches claims, not
/// queues). The Redis store keeps none: an inbox source on it is refused at start, since its
/// queue must be written in the claim's transaction.
impl Inbox for AnyStore {
    async fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> Result<ClaimOutcome, StoreError> {
        self.need(INBOX, |s| s.inbox())?.enqueue(req, item).await
    }
    async fn requeue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        self.need(INBOX, |s| s.inbox())?
            .requeue(req, item, reason)
            .await
    }
    async fn take(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&Holder>,
    ) -> Result<Vec<Taken>, StoreError> {
        self.need(INBOX, |s| s.inbox())?
            .take(source, limit, lease, holder)
            .await
    }
    async fn delivered(&self, item: ItemRef) -> Result<(), StoreError> {
        self.need(INBOX, |s| s.inbox())?.delivered(item).await
    }
    async fn retry_later(
        &self,
        item: ItemRef,
        failure: &Failure,
        delay: Duration,
    ) -> Result<(), StoreError> {
        self.need(INBOX, |s| s.inbox())?
            .retry_later(item, failure, delay)
            .await
    }
    async fn dead_letter(&self, item: ItemRef, failure: &Failure) -> Result<(), StoreError> {
        self.need(INBOX, |s| s.inbox())?
            .dead_letter(item, failure)
            .await
    }
    async fn dead_letters(
        &self,
        filter: &ReplayFilter,
        limit: NonZeroU32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        self.need(INBOX, |s| s.inbox())?
            .dead_letters(filter, limit)
            .await
    }
    async fn queued(&self, key: &Key) -> Result<Vec<QueueEntry>, StoreError> {
        self.need(INBOX, |s| s.inbox())?.queued(key).await
    }
    async fn replay_dead_letters(
        &self,
        filter: &ReplayFilter,
        reason: &str,
    ) -> Result<u64, StoreError> {
        self.need(INBOX, |s| s.inbox())?
            .replay_dead_letters(filter, reason)
            .await
    }
    async fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        self.need(INBOX, |s| s.inbox())?
            .purge_dead_letters(retention, batch)
            .await
    }
    async fn inbox_stats(&self) -> Result<Vec<InboxStats>, StoreError> {
        self.need(INBOX, |s| s.inbox())?.inbox_stats().await
    }
}
