//! Expiry: partition maintenance, and PostgreSQL's sweep run.
//!
//! A sweep run ([`Sweep::sweep_run`], overridden here) first maintains partitions (history months
//! created ahead and dropped past the retention; in partitioned mode dedup partitions created
//! ahead and dropped once their upper bound has passed), then, in batched mode, deletes expired
//! dedup rows in bounded batches with a pause between them until a batch comes back short, each
//! batch going on along the `expires_at` index from where the previous one ended, paced by the
//! claims' latency ([`PgConfig::sweep_pacing`](crate::PgConfig::sweep_pacing), adaptive by
//! default): the group-commit batcher records each claim batch's round trip, and core's
//! [`sweep::pace`] backs a run off while those are slower than their baseline.
//! Partitioned mode deletes no rows: expired rows count as absent and leave with their
//! partition. The background sweeper is core's one `idemgate_core::sweep::spawn`; several
//! gateways on one schema serialize partition DDL on an advisory lock.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use idemgate_core::sweep::{self, ClaimLatency, SweepOptions, SweepReport};
use idemgate_core::{StoreError, Sweep};

use crate::config::Expiry;
use crate::error::PgError;
use crate::row;
use crate::store::PgStore;

const SWEEP_BATCH: &str = include_str!("../sql/sweep_batch.sql");
const SWEEP_BATCH_PARTITIONED: &str = include_str!("../sql/sweep_batch_partitioned.sql");

/// What partition maintenance did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Partitions created, by name.
    pub created: Vec<String>,
    /// Partitions dropped whole, by name.
    pub dropped: Vec<String>,
}

impl PgStore {
    /// Creates partitions ahead and drops those past their time (see the [module docs](self)).
    ///
    /// # Errors
    /// [`PgError::Db`] when DDL fails (for instance when a lock is not had within 5 s); the
    /// partitions handled before it stay handled.
    pub async fn maintain_partitions(&self) -> Result<MaintenanceReport, PgError> {
        let created = self.db().ensure_partitions(0).await?;
        let dropped = self.db().drop_partitions().await?;
        Ok(MaintenanceReport { created, dropped })
    }
}

impl PgStore {
    /// The batch, pause and pacing this store's configuration sweeps with ([`Expiry::Batched`]
    /// and [`PgConfig::sweep_pacing`](crate::PgConfig::sweep_pacing); the defaults in partitioned
    /// mode, which deletes no rows).
    pub fn sweep_options(&self) -> SweepOptions {
        match self.config().expiry {
            Expiry::Batched { batch, pause } => SweepOptions {
                batch,
                pause,
                pacing: self.config().sweep_pacing,
            },
            Expiry::Partitioned { .. } => SweepOptions::default(),
        }
    }
}

impl PgStore {
    /// One bounded delete of expired records. In batched mode `after` is where the run's
    /// previous batch ended (see `sql/sweep_batch.sql`); answers the rows deleted and, in batched
    /// mode, where this batch ended (`None` when it deleted nothing).
    async fn sweep_batch(
        &self,
        batch: NonZeroU32,
        after: Option<SystemTime>,
    ) -> Result<(u64, Option<SystemTime>), PgError> {
        const CONTEXT: &str = "deleting a batch of expired records";
        let client = self.db().client().await?;
        let limit = i64::from(batch.get());
        match self.config().expiry {
            Expiry::Batched { .. } => {
                let stmt = client
                    .prepare_cached(SWEEP_BATCH)
                    .await
                    .map_err(PgError::db(CONTEXT))?;
                let row = client
                    .query_one(&stmt, &[&limit, &after])
                    .await
                    .map_err(PgError::db(CONTEXT))?;
                let deleted: i64 = row::get(&row, "deleted", CONTEXT)?;
                let last = row::get(&row, "last", CONTEXT)?;
                Ok((u64::try_from(deleted).unwrap_or(0), last))
            }
            Expiry::Partitioned { .. } => {
                let stmt = client
                    .prepare_cached(SWEEP_BATCH_PARTITIONED)
                    .await
                    .map_err(PgError::db(CONTEXT))?;
                let deleted = client
                    .execute(&stmt, &[&limit])
                    .await
                    .map_err(PgError::db(CONTEXT))?;
                Ok((deleted, None))
            }
        }
    }
}

/// One sweep run's batches in batched mode: each starts its scan of the `expires_at` index where
/// the previous one ended, instead of walking again over the entries of the rows the run already
/// deleted (they stay in the index until VACUUM).
struct Run<'a> {
    store: &'a PgStore,
    /// The latest `expires_at` this run deleted, by the database's clock.
    after: Mutex<Option<SystemTime>>,
}

impl Sweep for Run<'_> {
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        let after = *self.after.lock().unwrap_or_else(PoisonError::into_inner);
        let (rows, last) = self.store.sweep_batch(batch, after).await?;
        if last.is_some() {
            *self.after.lock().unwrap_or_else(PoisonError::into_inner) = last;
        }
        Ok(rows)
    }

    fn claim_latency(&self) -> Option<&ClaimLatency> {
        self.store.claim_latency()
    }
}

impl Sweep for PgStore {
    #[tracing::instrument(level = "debug", skip_all, fields(batch = batch.get()))]
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        Ok(self.sweep_batch(batch, None).await?.0)
    }

    /// Partition maintenance first, then (batched mode) bounded deletes until a batch comes back
    /// short; see the [module docs](self).
    #[tracing::instrument(level = "debug", skip_all, fields(schema = %self.config().schema, expiry = self.config().expiry.mode()))]
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
        let started = Instant::now();
        let partitions = self.maintain_partitions().await?;
        let mut report = match self.config().expiry {
            Expiry::Batched { .. } => {
                let run = Run {
                    store: self,
                    after: Mutex::new(None),
                };
                sweep::run(&run, opts, pause, on_batch).await?
            }
            Expiry::Partitioned { .. } => SweepReport::default(),
        };
        report.partitions_created = partitions.created;
        report.partitions_dropped = partitions.dropped;
        report.elapsed = started.elapsed();
        Ok(report)
    }

    /// The round trips of this store's claim batches (the batcher records each).
    fn claim_latency(&self) -> Option<&ClaimLatency> {
        Some(&self.db().claim_latency)
    }
}
