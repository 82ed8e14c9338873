//! Expiry: partition maintenance, and PostgreSQL's sweep run.
//!
//! A sweep run ([`Sweep::sweep_run`], overridden here) first maintains partitions (history months
//! created ahead and dropped past the retention; in partitioned mode dedup partitions created
//! ahead and dropped once their upper bound has passed), then, in batched mode, deletes expired
//! dedup rows in bounded batches with a pause between them until a batch comes back short.
//! Partitioned mode deletes no rows: expired rows count as absent and leave with their
//! partition. The background sweeper is core's one [`idemgate_core::sweep::spawn`]; several
//! gateways on one schema serialize partition DDL on an advisory lock.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idemgate_core::sweep::{self, SweepOptions, SweepReport};
use idemgate_core::{StoreError, Sweep};

use crate::config::Expiry;
use crate::error::PgError;
use crate::store::{Db, PgStore, millis};

const ENSURE_PARTITIONS: &str = include_str!("../sql/ensure_partitions.sql");
const DROP_PARTITIONS: &str = include_str!("../sql/drop_partitions.sql");

/// How far ahead history partitions exist: this month and the next.
const HISTORY_AHEAD: Duration = Duration::from_secs(40 * 86_400);
/// How many dedup partition widths exist ahead of now, at least.
const DEDUP_AHEAD_WIDTHS: u32 = 8;
/// Partition DDL waits at most this long for a lock, so it never queues claims behind it for long.
const DDL_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '5s'";

/// What partition maintenance did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Partitions created, by name.
    pub created: Vec<String>,
    /// Partitions dropped whole, by name.
    pub dropped: Vec<String>,
}

impl Db {
    /// Creates the partitions rows need: history this month and next, dedup (partitioned mode)
    /// far enough ahead for the longest TTL seen (and `ttl_ms`). Returns the names created.
    pub(crate) async fn ensure_partitions(&self, ttl_ms: u64) -> Result<Vec<String>, PgError> {
        const CONTEXT: &str = "creating partitions ahead";
        let dedup_ahead = match self.cfg.expiry {
            Expiry::Batched { .. } => Duration::ZERO,
            Expiry::Partitioned { width } => {
                let seen = self.max_ttl_ms.load(Ordering::Relaxed).max(ttl_ms);
                (width * DEDUP_AHEAD_WIDTHS).max(Duration::from_millis(seen)) + width
            }
        };
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(PgError::db(CONTEXT))?;
        tx.batch_execute(DDL_LOCK_TIMEOUT)
            .await
            .map_err(PgError::db(CONTEXT))?;
        let rows = tx
            .query(
                ENSURE_PARTITIONS,
                &[&millis(HISTORY_AHEAD), &millis(dedup_ahead)],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        tx.commit().await.map_err(PgError::db(CONTEXT))?;
        let created: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        if !created.is_empty() {
            tracing::info!(schema = %self.cfg.schema, ?created, "created partitions");
        }
        Ok(created)
    }

    async fn drop_partitions(&self) -> Result<Vec<String>, PgError> {
        const CONTEXT: &str = "dropping expired partitions";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(PgError::db(CONTEXT))?;
        tx.batch_execute(DDL_LOCK_TIMEOUT)
            .await
            .map_err(PgError::db(CONTEXT))?;
        let rows = tx
            .query(DROP_PARTITIONS, &[&millis(self.cfg.history_retention)])
            .await
            .map_err(PgError::db(CONTEXT))?;
        tx.commit().await.map_err(PgError::db(CONTEXT))?;
        let dropped: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        if !dropped.is_empty() {
            tracing::info!(schema = %self.cfg.schema, ?dropped, "dropped partitions");
        }
        Ok(dropped)
    }
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
    /// The batch and pause this store's configuration sweeps with ([`Expiry::Batched`]; the
    /// defaults in partitioned mode, which deletes no rows).
    pub fn sweep_options(&self) -> SweepOptions {
        match self.config().expiry {
            Expiry::Batched { batch, pause } => SweepOptions { batch, pause },
            Expiry::Partitioned { .. } => SweepOptions::default(),
        }
    }
}

impl Sweep for PgStore {
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        Ok(self.db().sweep_batch(batch).await?)
    }

    /// Partition maintenance first, then (batched mode) bounded deletes until a batch comes back
    /// short; see the [module docs](self).
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
}
