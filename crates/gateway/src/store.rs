//! The store the gateway runs on, chosen at start: one enum over the engines, so handlers stay
//! generic-free and each engine keeps its own crate.

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::advise::Observation;
use idemgate_core::store::{ClaimStore, HistoryQuery, Stats, StoreError, StoreStats, Sweep};
use idemgate_core::sweep::{self, SweepOptions, SweepReport};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimToken, EventView, Key, MemoryStore};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, StoreKind};

/// One of the engines.
#[derive(Debug, Clone)]
pub enum AnyStore {
    /// In memory: for tests and trying things out; nothing survives the process.
    Memory(MemoryStore),
    #[cfg(feature = "sqlite")]
    Sqlite(idemgate_sqlite::SqliteStore),
    #[cfg(feature = "postgres")]
    Postgres(idemgate_postgres::PgStore),
}

/// Calls the same method on whichever engine this is.
macro_rules! each {
    ($self:expr, $s:ident => $body:expr) => {
        match $self {
            AnyStore::Memory($s) => $body,
            #[cfg(feature = "sqlite")]
            AnyStore::Sqlite($s) => $body,
            #[cfg(feature = "postgres")]
            AnyStore::Postgres($s) => $body,
        }
    };
}

/// Why the configured store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot open the SQLite store in {path}")]
    Sqlite {
        path: String,
        #[source]
        source: StoreError,
    },
    #[cfg(feature = "postgres")]
    #[error("cannot open the PostgreSQL store")]
    Postgres(#[source] idemgate_postgres::PgError),
    #[error("store.kind = {kind:?} needs the {feature:?} feature, which this build lacks")]
    NotBuilt {
        kind: &'static str,
        feature: &'static str,
    },
}

impl AnyStore {
    /// Opens the store `config.store` describes (migrating it if needed).
    ///
    /// # Errors
    /// [`OpenError`] naming the store.
    pub async fn open(config: &Config) -> Result<Self, OpenError> {
        match config.store.kind {
            #[cfg(feature = "sqlite")]
            StoreKind::Sqlite => idemgate_sqlite::SqliteStore::open(&config.store.path)
                .map(Self::Sqlite)
                .map_err(|source| OpenError::Sqlite {
                    path: config.store.path.display().to_string(),
                    source,
                }),
            #[cfg(not(feature = "sqlite"))]
            StoreKind::Sqlite => Err(OpenError::NotBuilt {
                kind: "sqlite",
                feature: "sqlite",
            }),
            #[cfg(feature = "postgres")]
            StoreKind::Postgres => {
                let pg = pg_config(config);
                idemgate_postgres::PgStore::connect(pg)
                    .await
                    .map(Self::Postgres)
                    .map_err(OpenError::Postgres)
            }
            #[cfg(not(feature = "postgres"))]
            StoreKind::Postgres => Err(OpenError::NotBuilt {
                kind: "postgres",
                feature: "postgres",
            }),
        }
    }

    /// The engine's name, for logs and `/healthz`.
    pub fn engine(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            #[cfg(feature = "sqlite")]
            Self::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Self::Postgres(_) => "postgres",
        }
    }

    /// A real round trip to the store: a lookup of a key no sender can use.
    ///
    /// # Errors
    /// The store's error.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let key = Key::parse("idemgate.health", "ping").expect("a valid key");
        self.lookup(&key).await.map(drop)
    }

    /// One sweep run: expired records deleted in bounded batches until a batch deletes nothing
    /// (PostgreSQL uses its own configured batch and pause, and also creates and drops
    /// partitions). `on_batch` hears each batch's row count; `cancel` stops the run between
    /// batches.
    ///
    /// # Errors
    /// The store's error; batches before it stay deleted.
    pub async fn sweep_run(
        &self,
        opts: SweepOptions,
        cancel: &CancellationToken,
        on_batch: impl FnMut(u64),
    ) -> Result<SweepReport, StoreError> {
        #[cfg(feature = "postgres")]
        if let Self::Postgres(pg) = self {
            return pg
                .sweep_run(cancel, on_batch)
                .await
                .map(|r| SweepReport {
                    rows: r.rows,
                    batches: r.batches,
                    elapsed: r.elapsed,
                    cancelled: r.cancelled,
                })
                .map_err(|e| StoreError::backend("the PostgreSQL sweep failed", e));
        }
        let pause = |d: Duration| {
            let cancel = cancel.clone();
            async move {
                tokio::select! {
                    () = cancel.cancelled() => false,
                    () = tokio::time::sleep(d) => true,
                }
            }
        };
        sweep::run(self, opts, pause, on_batch).await
    }
}

/// The PostgreSQL store's settings from the gateway's config.
#[cfg(feature = "postgres")]
pub fn pg_config(config: &Config) -> idemgate_postgres::PgConfig {
    use std::num::NonZeroUsize;

    use crate::config::ExpiryMode;
    let p = &config.store.postgres;
    let mut pg = idemgate_postgres::PgConfig::new(config.store.url.clone().unwrap_or_default());
    let nz = |n: u32, d: usize| {
        NonZeroUsize::new(n as usize).unwrap_or(NonZeroUsize::new(d).expect("non-zero"))
    };
    pg.schema = p.schema.clone();
    pg.pool_size = nz(p.pool_size, 16);
    pg.batch_max = nz(p.batch_max, 256);
    pg.batch_linger = p.batch_linger;
    pg.history_retention = config.store.history_retention;
    pg.expiry = match p.expiry {
        ExpiryMode::Batched => idemgate_postgres::Expiry::Batched {
            batch: NonZeroU32::new(p.sweep_batch).unwrap_or(NonZeroU32::MIN),
            pause: p.sweep_pause,
        },
        ExpiryMode::Partitioned => idemgate_postgres::Expiry::Partitioned {
            width: p.partition_width,
        },
    };
    pg
}

impl ClaimStore for AnyStore {
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        each!(self, s => s.claim(req).await)
    }
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        each!(self, s => s.complete(token).await)
    }
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        each!(self, s => s.release(token).await)
    }
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        each!(self, s => s.lookup(key).await)
    }
}

impl Stats for AnyStore {
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        each!(self, s => s.stats().await)
    }
}

impl Sweep for AnyStore {
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        each!(self, s => s.sweep_expired(batch).await)
    }
}

impl HistoryQuery for AnyStore {
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        each!(self, s => s.observe(period).await)
    }
    async fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        each!(self, s => s.purge_history(retention, batch).await)
    }
}
