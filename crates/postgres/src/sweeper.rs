//! Expiry: partition maintenance, sweep runs, and the background sweeper task.
//!
//! A sweep run first maintains partitions (history months created ahead and dropped past the
//! retention; in partitioned mode dedup partitions created ahead and dropped once their upper
//! bound has passed), then, in batched mode, deletes expired dedup rows in bounded batches with a
//! pause between them until a batch deletes nothing. Partitioned mode deletes no rows: expired
//! rows count as absent and leave with their partition.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use idemgate_core::sweep::{self, SweepOptions};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

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

/// What one sweep run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepRunReport {
    pub partitions: MaintenanceReport,
    /// Expired dedup rows deleted by bounded batches (batched mode).
    pub rows: u64,
    /// Batches run, the last (empty) one included.
    pub batches: u64,
    pub elapsed: Duration,
    /// The run stopped on cancellation before a batch came back empty.
    pub cancelled: bool,
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

    /// One sweep run (what `idemgate sweep --postgres URL` does): partition maintenance, then in
    /// batched mode bounded deletes until a batch deletes nothing. `on_batch` hears each batch's
    /// row count (for a progress bar; [`idemgate_core::Stats::stats`]' `expired` is the total to
    /// expect). `cancel` stops the run between batches.
    ///
    /// # Errors
    /// The first failure; batches and partitions handled before it stay done.
    pub async fn sweep_run(
        &self,
        cancel: &CancellationToken,
        on_batch: impl FnMut(u64),
    ) -> Result<SweepRunReport, PgError> {
        let started = Instant::now();
        let partitions = self.maintain_partitions().await?;
        let mut report = SweepRunReport {
            partitions,
            ..SweepRunReport::default()
        };
        if let Expiry::Batched { batch, pause } = self.config().expiry {
            if cancel.is_cancelled() {
                report.cancelled = true;
            } else {
                let pause_or_cancel = |d: Duration| {
                    let cancel = cancel.clone();
                    async move {
                        tokio::select! {
                            () = cancel.cancelled() => false,
                            () = tokio::time::sleep(d) => true,
                        }
                    }
                };
                let run = sweep::run(
                    self,
                    SweepOptions { batch, pause },
                    pause_or_cancel,
                    on_batch,
                )
                .await
                .map_err(|source| PgError::Sweep { source })?;
                report.rows = run.rows;
                report.batches = run.batches;
                report.cancelled = run.cancelled;
            }
        }
        report.elapsed = started.elapsed();
        Ok(report)
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Starts the background sweeper: a sweep run now and then every `every`, until `cancel` fires.
/// Each run is logged with its rows, batches, partitions and time; a failed run is logged and
/// retried at the next tick.
pub fn spawn_sweeper(store: PgStore, every: Duration, cancel: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let schema = store.config().schema.clone();
        loop {
            match store.sweep_run(&cancel, |_| {}).await {
                Ok(r) => tracing::info!(
                    schema = %schema,
                    rows = r.rows,
                    batches = r.batches,
                    partitions_created = r.partitions.created.len(),
                    partitions_dropped = r.partitions.dropped.len(),
                    elapsed_ms = u64::try_from(r.elapsed.as_millis()).unwrap_or(u64::MAX),
                    cancelled = r.cancelled,
                    "sweep run"
                ),
                Err(e) => {
                    tracing::warn!(schema = %schema, error = %error_chain(&e), "sweep run failed")
                }
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
        }
        tracing::debug!(schema = %schema, "sweeper stopped");
    })
}
