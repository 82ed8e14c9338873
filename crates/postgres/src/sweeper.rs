//! Expiry: partition maintenance, and PostgreSQL's sweep run.
//!
//! A sweep run ([`Sweep::sweep_run`], overridden here) first maintains partitions (history months
//! created ahead and dropped past the retention; in partitioned mode dedup partitions created
//! ahead and dropped once their upper bound has passed), then, in batched mode, deletes expired
//! dedup rows in bounded batches with a pause between them until a batch comes back short,
//! paced by the claims' latency ([`PgConfig::sweep_pacing`](crate::PgConfig::sweep_pacing),
//! adaptive by default): the group-commit batcher records each claim batch's round trip, and
//! core's [`sweep::pace`] backs a run off while those are slower than their baseline.
//! Partitioned mode deletes no rows: expired rows count as absent and leave with their
//! partition. The background sweeper is core's one [`idemgate_core::sweep::spawn`]; several
//! gateways on one schema serialize partition DDL on an advisory lock.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use idemgate_core::sweep::{self, ClaimLatency, SweepOptions, SweepReport};
use idemgate_core::{StoreError, Sweep};

use crate::config::Expiry;
use crate::error::PgError;
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
    /// One bounded delete of expired records.
    async fn sweep_batch(&self, batch: NonZeroU32) -> Result<u64, PgError> {
        const CONTEXT: &str = "deleting a batch of expired records";
        let client = self.db().client().await?;
        let sql = match self.config().expiry {
            Expiry::Batched { .. } => SWEEP_BATCH,
            Expiry::Partitioned { .. } => SWEEP_BATCH_PARTITIONED,
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

impl Sweep for PgStore {
    #[tracing::instrument(level = "debug", skip_all, fields(batch = batch.get()))]
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        Ok(self.sweep_batch(batch).await?)
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
            Expiry::Batched { .. } => sweep::run(self, opts, pause, on_batch).await?,
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
