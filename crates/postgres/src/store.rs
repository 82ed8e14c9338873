//! [`PgStore`]: the store traits on a connection pool, claims through the group-commit batcher.

use idemgate_core::HistoryRetention;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use idemgate_core::advise::{Observation, Tally};
use idemgate_core::{
    Boot, ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, EventView, Fingerprint, HistoryEntry,
    HistoryOutcome, HistoryQuery, Holder, Identity, InstanceName, Instances, Key, Record,
    RecordState, SourceName, SourceStats, Stats, StoreError, StoreStats, Timestamp,
};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::NoTls;

use crate::batch::{self, Pending};
use crate::config::PgConfig;
use crate::error::PgError;
use crate::migrate::migrate;

const COMPLETE: &str = include_str!("../sql/complete.sql");
const RELEASE: &str = include_str!("../sql/release.sql");
const RENEW: &str = include_str!("../sql/renew.sql");
const REGISTER_BOOT: &str = include_str!("../sql/register_boot.sql");
const LOOKUP_RECORD: &str = include_str!("../sql/lookup_record.sql");
const LOOKUP_HISTORY: &str = include_str!("../sql/lookup_history.sql");
const SWEEP_BATCH: &str = include_str!("../sql/sweep_batch.sql");
const SWEEP_BATCH_PARTITIONED: &str = include_str!("../sql/sweep_batch_partitioned.sql");
const STATS_SOURCES: &str = include_str!("../sql/stats_sources.sql");
const STATS_TOTALS: &str = include_str!("../sql/stats_totals.sql");

/// The PostgreSQL store. Clones share one pool and one batcher; the batcher stops once the last
/// clone is dropped.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Db,
    claims: mpsc::Sender<Pending>,
    /// The schema's `meta.store_id`, read at connect.
    store_id: String,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.inner.db.cfg.target())
            .field("schema", &self.inner.db.cfg.schema)
            .field("expiry", &self.inner.db.cfg.expiry)
            .field("store_id", &self.inner.store_id)
            .finish_non_exhaustive()
    }
}

/// What the store and its batcher share: the pool and the configuration.
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) pool: Pool,
    pub(crate) cfg: Arc<PgConfig>,
    /// The longest TTL claimed so far (ms): how far ahead dedup partitions must reach.
    pub(crate) max_ttl_ms: Arc<AtomicU64>,
}

impl PgStore {
    /// Validates `cfg`, migrates the schema, creates the partitions needed ahead and starts the
    /// claim batcher (on the current tokio runtime).
    ///
    /// # Errors
    /// Everything [`migrate`] refuses ([`PgError::Config`], [`PgError::Connect`],
    /// [`PgError::NewerSchema`], [`PgError::ModeMismatch`]), and [`PgError::Db`] when the
    /// partitions cannot be created.
    pub async fn connect(cfg: PgConfig) -> Result<Self, PgError> {
        migrate(&cfg).await?;
        Self::open(cfg, true).await
    }

    /// Opens a schema that already exists at the current version, changing nothing on the way
    /// (no schema, table or partition is created): for tools that only read, or sweep. The
    /// expiry mode is the one the schema was created with, whatever `cfg` says.
    ///
    /// # Errors
    /// [`PgError::NoSchema`] and [`PgError::OlderSchema`] (run `idemgate migrate`), and what
    /// [`PgStore::connect`] refuses.
    pub async fn open_existing(mut cfg: PgConfig) -> Result<Self, PgError> {
        crate::migrate::check_existing(&mut cfg).await?;
        Self::open(cfg, false).await
    }

    async fn open(cfg: PgConfig, partitions: bool) -> Result<Self, PgError> {
        let manager = Manager::from_config(
            cfg.pg_config()?,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(cfg.pool_size.get())
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(Duration::from_secs(10)))
            .wait_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(|source| PgError::PoolBuild { source })?;
        let db = Db {
            pool,
            cfg: Arc::new(cfg),
            max_ttl_ms: Arc::new(AtomicU64::new(0)),
        };
        if partitions {
            db.ensure_partitions(0).await?;
        }
        const CONTEXT: &str = "reading the store id";
        let store_id: String = db
            .client()
            .await?
            .query_one("SELECT value FROM meta WHERE key = 'store_id'", &[])
            .await
            .map_err(PgError::db(CONTEXT))?
            .get(0);
        let (tx, rx) = mpsc::channel(db.cfg.batch_max.get() * 4);
        tokio::spawn(batch::run(db.clone(), rx));
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                claims: tx,
                store_id,
            }),
        })
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &PgConfig {
        &self.inner.db.cfg
    }

    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }
}

impl Db {
    pub(crate) async fn client(&self) -> Result<Object, PgError> {
        self.pool
            .get()
            .await
            .map_err(|source| PgError::Pool { source })
    }

    /// Runs `op`; when it needed a partition that does not exist yet, creates the partitions
    /// (`ttl_ms` ahead for dedup rows) and runs it once more.
    pub(crate) async fn with_partitions<T, F, Fut>(&self, ttl_ms: u64, op: F) -> Result<T, PgError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, PgError>>,
    {
        match op().await {
            Err(e) if e.is_missing_partition() => {
                tracing::info!(schema = %self.cfg.schema, "a row needed a partition not yet created; creating partitions");
                self.ensure_partitions(ttl_ms).await?;
                op().await
            }
            other => other,
        }
    }

    async fn finish(
        &self,
        token: &ClaimToken,
        sql: &'static str,
        context: &'static str,
    ) -> Result<(), StoreError> {
        let Ok(attempt) = i32::try_from(token.attempt) else {
            return Err(stale(token));
        };
        // The nonce travels as bigint, bit for bit.
        let nonce = token.nonce as i64;
        let held: bool = self
            .with_partitions(0, || async {
                let client = self.client().await?;
                let stmt = client
                    .prepare_cached(sql)
                    .await
                    .map_err(PgError::db(context))?;
                let row = client
                    .query_one(
                        &stmt,
                        &[
                            &token.key.source.as_str(),
                            &token.key.event_id.as_str(),
                            &attempt,
                            &nonce,
                        ],
                    )
                    .await
                    .map_err(PgError::db(context))?;
                Ok(row.get(0))
            })
            .await?;
        if held { Ok(()) } else { Err(stale(token)) }
    }

    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        const CONTEXT: &str = "renewing a lease";
        let Ok(attempt) = i32::try_from(token.attempt) else {
            return Err(stale(token));
        };
        let client = self.client().await?;
        let stmt = client
            .prepare_cached(RENEW)
            .await
            .map_err(PgError::db(CONTEXT))?;
        let until: Option<i64> = client
            .query_one(
                &stmt,
                &[
                    &token.key.source.as_str(),
                    &token.key.event_id.as_str(),
                    &attempt,
                    &(token.nonce as i64),
                    &millis(lease),
                ],
            )
            .await
            .map_err(PgError::db(CONTEXT))?
            .get(0);
        until
            .map(Timestamp::from_millis)
            .ok_or_else(|| stale(token))
    }

    async fn register_boot(&self, instance: &InstanceName) -> Result<Boot, PgError> {
        const CONTEXT: &str = "registering a boot";
        let mut tries = 0;
        loop {
            let client = self.client().await?;
            let stmt = client
                .prepare_cached(REGISTER_BOOT)
                .await
                .map_err(PgError::db(CONTEXT))?;
            // One implicit transaction: a deadlock with a claim batch rolls all of it back.
            match client
                .query_one(&stmt, &[&instance.as_str()])
                .await
                .map_err(PgError::db(CONTEXT))
            {
                Ok(row) => {
                    let count = |v: i64| u64::try_from(v).unwrap_or(0);
                    return Ok(Boot {
                        holder: Holder {
                            instance: instance.clone(),
                            boot: count(row.get(0)),
                        },
                        started_at: Timestamp::from_millis(row.get(1)),
                        freed: count(row.get(2)),
                    });
                }
                Err(e) if e.is_deadlock() && tries < 3 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

fn stale(token: &ClaimToken) -> StoreError {
    StoreError::StaleToken {
        key: token.key.clone(),
        attempt: token.attempt,
    }
}

/// Milliseconds for SQL intervals, capped at 100 years so no interval overflows.
pub(crate) fn millis(d: Duration) -> i64 {
    const CAP: u128 = 100 * 365 * 86_400 * 1_000;
    d.as_millis().min(CAP) as i64
}

fn ms(v: i64) -> Duration {
    Duration::from_millis(u64::try_from(v).unwrap_or(0))
}

fn unexpected(context: &'static str, what: impl Into<String>) -> PgError {
    PgError::Unexpected {
        context,
        what: what.into(),
    }
}

fn fingerprint(
    bytes: Option<Vec<u8>>,
    context: &'static str,
) -> Result<Option<Fingerprint>, PgError> {
    bytes
        .map(|b| {
            Fingerprint::from_slice(&b)
                .ok_or_else(|| unexpected(context, format!("a fingerprint of {} bytes", b.len())))
        })
        .transpose()
}

impl ClaimStore for PgStore {
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        let ttl = u64::try_from(millis(req.ttl)).unwrap_or(0);
        self.inner.db.max_ttl_ms.fetch_max(ttl, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            req,
            nonce: idemgate_core::machine::nonce(),
            reply,
        };
        self.inner
            .claims
            .send(pending)
            .await
            .map_err(|_| StoreError::Closed)?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.inner
            .db
            .finish(token, COMPLETE, "completing a claim")
            .await
    }

    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.inner
            .db
            .finish(token, RELEASE, "releasing a claim")
            .await
    }

    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        self.inner.db.renew(token, lease).await
    }

    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        const CONTEXT: &str = "looking an event up";
        let client = self.inner.db.client().await?;
        let (rec_stmt, hist_stmt) = tokio::try_join!(
            client.prepare_cached(LOOKUP_RECORD),
            client.prepare_cached(LOOKUP_HISTORY)
        )
        .map_err(PgError::db(CONTEXT))?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
            [&key.source.as_str(), &key.event_id.as_str()];
        // Sent together: one round trip.
        let (records, history) = tokio::try_join!(
            client.query(&rec_stmt, &params),
            client.query(&hist_stmt, &params)
        )
        .map_err(PgError::db(CONTEXT))?;

        let record = records
            .first()
            .map(|row| -> Result<Record, PgError> {
                let state: &str = row.get(0);
                Ok(Record {
                    state: RecordState::parse(state)
                        .ok_or_else(|| unexpected(CONTEXT, format!("record state {state:?}")))?,
                    attempt: u32::try_from(row.get::<_, i32>(1))
                        .map_err(|_| unexpected(CONTEXT, "a negative attempt"))?,
                    nonce: row.get::<_, i64>(2) as u64,
                    fingerprint: fingerprint(row.get(3), CONTEXT)?,
                    first_seen: Timestamp::from_millis(row.get(4)),
                    lease_until: row.get::<_, Option<i64>>(5).map(Timestamp::from_millis),
                    expires_at: Timestamp::from_millis(row.get(6)),
                    holder: match (
                        row.get::<_, Option<String>>(7),
                        row.get::<_, Option<i64>>(8),
                    ) {
                        (None, None) => None,
                        (Some(instance), Some(boot)) => Some(Holder {
                            instance: InstanceName::new(instance)
                                .map_err(|e| unexpected(CONTEXT, e.to_string()))?,
                            // Bit for bit, like the nonce.
                            boot: boot as u64,
                        }),
                        (instance, boot) => {
                            return Err(unexpected(
                                CONTEXT,
                                format!("holder {instance:?} with boot {boot:?}"),
                            ));
                        }
                    },
                })
            })
            .transpose()?;
        let history = history
            .iter()
            .map(|row| -> Result<HistoryEntry, PgError> {
                let outcome: &str = row.get(0);
                Ok(HistoryEntry {
                    outcome: HistoryOutcome::parse(outcome).ok_or_else(|| {
                        unexpected(CONTEXT, format!("history outcome {outcome:?}"))
                    })?,
                    processed: row.get(5),
                    attempt: row
                        .get::<_, Option<i32>>(1)
                        .map(|a| u32::try_from(a).unwrap_or(0)),
                    at: Timestamp::from_millis(row.get(2)),
                    gap: row.get::<_, Option<i64>>(3).map(ms),
                    fingerprint: fingerprint(row.get(4), CONTEXT)?,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(EventView {
            key: key.clone(),
            record,
            history,
        })
    }
}

impl Identity for PgStore {
    /// The schema's `meta.store_id`, created with it (or by migration 2 for a schema of
    /// version 1).
    fn store_id(&self) -> &str {
        &self.inner.store_id
    }
}

impl Instances for PgStore {
    /// One call of `register_boot` (one transaction). Finding the earlier boots' claims scans
    /// `dedup`: no index on the holder, so takeovers and completions stay HOT updates.
    async fn register_boot(&self, instance: &InstanceName) -> Result<Boot, StoreError> {
        Ok(self.inner.db.register_boot(instance).await?)
    }
}

impl Db {
    /// One bounded delete of expired records.
    pub(crate) async fn sweep_batch(&self, batch: NonZeroU32) -> Result<u64, PgError> {
        const CONTEXT: &str = "deleting a batch of expired records";
        let client = self.client().await?;
        let sql = match self.cfg.expiry {
            crate::Expiry::Batched { .. } => SWEEP_BATCH,
            crate::Expiry::Partitioned { .. } => SWEEP_BATCH_PARTITIONED,
        };
        let stmt = client
            .prepare_cached(sql)
            .await
            .map_err(PgError::db(CONTEXT))?;
        client
            .execute(&stmt, &[&i64::from(batch.get())])
            .await
            .map_err(PgError::db(CONTEXT))
    }
}

impl HistoryQuery for PgStore {
    async fn has_source(&self, source: &SourceName) -> Result<bool, StoreError> {
        const CONTEXT: &str = "looking for a source";
        let client = self.inner.db.client().await?;
        // Both probes are index prefix scans: history_key and the dedup primary key.
        let row = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM history WHERE source = $1) \
                     OR EXISTS (SELECT 1 FROM dedup WHERE source = $1)",
                &[&source.as_str()],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        Ok(row.get(0))
    }

    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        const CONTEXT: &str = "reading history";
        let client = self.inner.db.client().await?;
        let rows = client
            .query(include_str!("../sql/observe.sql"), &[&millis(period)])
            .await
            .map_err(PgError::db(CONTEXT))?;
        let mut tally = Tally::default();
        for row in &rows {
            let (source, outcome): (&str, &str) = (row.get(0), row.get(1));
            // Only valid names and known outcomes are ever stored.
            if let (Ok(source), Some(outcome)) =
                (SourceName::new(source), HistoryOutcome::parse(outcome))
            {
                tally.add(source, outcome, row.get::<_, Option<i64>>(2).map(ms));
            }
        }
        Ok(tally.finish(period))
    }
}

impl HistoryRetention for PgStore {
    /// History lives in monthly partitions, dropped whole past `history_retention` by
    /// [`PgStore::maintain_partitions`]: nothing is deleted row by row here.
    async fn purge_history(
        &self,
        _retention: Duration,
        _batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        Ok(0)
    }
}

impl Stats for PgStore {
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        const CONTEXT: &str = "counting records";
        let client = self.inner.db.client().await?;
        let (sources, totals) = tokio::try_join!(
            client.query(STATS_SOURCES, &[]),
            client.query_one(STATS_TOTALS, &[])
        )
        .map_err(PgError::db(CONTEXT))?;
        let count = |v: i64| u64::try_from(v).unwrap_or(0);
        let per_source = sources
            .iter()
            .map(|row| -> Result<SourceStats, PgError> {
                let name: &str = row.get(0);
                Ok(SourceStats {
                    source: SourceName::new(name)
                        .map_err(|e| unexpected(CONTEXT, e.to_string()))?,
                    live: count(row.get(1)),
                    expired: count(row.get(2)),
                    oldest: row.get::<_, Option<i64>>(3).map(Timestamp::from_millis),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StoreStats {
            live: per_source.iter().map(|s| s.live).sum(),
            expired: per_source.iter().map(|s| s.expired).sum(),
            oldest: per_source.iter().filter_map(|s| s.oldest).min(),
            per_source,
            size_bytes: Some(count(totals.get(1))),
            history_rows: count(totals.get(0)),
        })
    }
}

/// Maps one row of `claim_batch` to its outcome.
pub(crate) fn outcome_of(key: &Key, row: &tokio_postgres::Row) -> Result<ClaimOutcome, PgError> {
    const CONTEXT: &str = "claiming";
    let outcome: &str = row.get(1);
    let attempt: Option<i32> = row.get(2);
    let first_seen = || -> Result<Timestamp, PgError> {
        row.get::<_, Option<i64>>(4)
            .map(Timestamp::from_millis)
            .ok_or_else(|| unexpected(CONTEXT, "no first_seen"))
    };
    let expires_at = || -> Result<Timestamp, PgError> {
        row.get::<_, Option<i64>>(7)
            .map(Timestamp::from_millis)
            .ok_or_else(|| unexpected(CONTEXT, "no expires_at"))
    };
    Ok(match outcome {
        "claimed" => ClaimOutcome::Claimed {
            token: ClaimToken {
                key: key.clone(),
                attempt: attempt
                    .and_then(|a| u32::try_from(a).ok())
                    .ok_or_else(|| unexpected(CONTEXT, "a claim without an attempt"))?,
                nonce: row
                    .get::<_, Option<i64>>(3)
                    .ok_or_else(|| unexpected(CONTEXT, "a claim without a nonce"))?
                    as u64,
            },
            expires_at: expires_at()?,
            late_duplicate: row.get::<_, Option<i64>>(8).map(Timestamp::from_millis),
        },
        "duplicate" => {
            let state: Option<&str> = row.get(5);
            ClaimOutcome::Duplicate {
                first_seen: first_seen()?,
                state: state
                    .and_then(RecordState::parse)
                    .ok_or_else(|| unexpected(CONTEXT, format!("record state {state:?}")))?,
                expires_at: expires_at()?,
            }
        }
        "late_duplicate" => ClaimOutcome::LateDuplicate {
            first_seen: first_seen()?,
            expires_at: expires_at()?,
        },
        "in_flight" => ClaimOutcome::InFlight {
            retry_after: ms(row.get::<_, Option<i64>>(6).unwrap_or(0)),
        },
        "conflict" => ClaimOutcome::Conflict {
            first_seen: first_seen()?,
        },
        other => return Err(unexpected(CONTEXT, format!("claim outcome {other:?}"))),
    })
}
