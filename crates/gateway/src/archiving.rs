//! History retention with an archive (`[history.archive]`): every closed day is exported once
//! `export_after` has passed, and a day (SQLite) or a month's partition (PostgreSQL) past
//! `history_retention` leaves the database only once the archive's manifest counts as many rows
//! as the database holds for it. An archive that cannot be reached holds the drop back: the
//! database keeps the rows (and grows), the log, `/healthz` and the dashboard say so, and the
//! next run tries again.

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use idemgate_archive::{Archive, ArchiveConfig, Day};
use idemgate_core::{HistoryExport, RetentionUnit, Timestamp};

use crate::error::ErrorChain;
use idemgate::AnyStore;

/// Rows a SQLite drop deletes per transaction.
const BATCH: NonZeroU32 = NonZeroU32::new(5_000).expect("non-zero");

/// The archive and what the job last did with it.
#[derive(Debug)]
pub(crate) struct Archiving {
    archive: Result<Archive, String>,
    export_after: Duration,
    status: Mutex<Status>,
}

/// What the job last did.
#[derive(Debug, Clone, Default)]
pub(crate) struct Status {
    /// Days every run so far exported.
    pub exported_days: u64,
    pub exported_rows: u64,
    /// Units dropped once the archive held them.
    pub dropped: u64,
    /// The last day checked or exported: later runs start after it.
    pub through: Option<Day>,
    /// Why the last run could not finish (the archive unreachable, a count that differs): the
    /// drop it held back, in words. `None` once a run went through.
    pub holding: Option<String>,
    /// Whether a run has finished at all.
    pub ran: bool,
}

impl Archiving {
    pub(crate) fn new(config: &ArchiveConfig) -> Self {
        Self {
            archive: Archive::open(config).map_err(|e| e.to_string()),
            export_after: config.export_after,
            status: Mutex::default(),
        }
    }

    pub(crate) fn url(&self) -> String {
        match &self.archive {
            Ok(a) => a.url().to_owned(),
            Err(_) => "the archive".to_owned(),
        }
    }

    pub(crate) fn status(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }
}

/// One run: export what is due, then drop what is past the retention and archived. Errors are
/// kept in the status (and logged); nothing is dropped after one.
pub(crate) async fn run(store: &AnyStore, archiving: &Archiving, retention: Duration) {
    let outcome = run_inner(store, archiving, retention).await;
    archiving.update(|s| {
        s.ran = true;
        s.holding = outcome.err();
    });
    if let Some(why) = archiving.status().holding {
        tracing::warn!(archive = %archiving.url(), "history retention held back: {why}");
    }
}

async fn run_inner(
    store: &AnyStore,
    archiving: &Archiving,
    retention: Duration,
) -> Result<(), String> {
    let archive = archiving.archive.as_ref().map_err(Clone::clone)?;
    // 1. Export the closed days due (from the oldest the database holds, the first time).
    let units = store
        .history_past(retention)
        .await
        .map_err(|e| format!("listing history past the retention: {}", ErrorChain(&e)))?;
    // The store's now, from an empty range (the store owns the clock).
    let found = store
        .history_days(None, Timestamp::from_millis(0), Timestamp::from_millis(0))
        .await
        .map_err(|e| format!("reading the store's clock: {}", ErrorChain(&e)))?;
    let now = found.now;
    let due_until = Day::of(now.minus(archiving.export_after));
    let from = match archiving.status().through {
        Some(d) => d.next(),
        None => units
            .first()
            .map_or_else(|| Day::of(now.minus(retention)), |u| Day::of(u.from)),
    };
    if from < due_until {
        let days = store
            .history_days(None, from.start(), due_until.start())
            .await
            .map_err(|e| format!("counting history per day: {}", ErrorChain(&e)))?;
        for d in &days.days {
            ensure_archived(archiving, archive, store, d).await?;
        }
        archiving.update(|s| {
            s.through = Some(Day::of(due_until.start().minus(Duration::from_millis(1))))
        });
    }
    // 2. Drop what is past the retention, one unit at a time, oldest first, each only once the
    //    archive holds every day of it.
    for unit in &units {
        drop_unit(archiving, archive, store, unit, retention).await?;
        archiving.update(|s| s.dropped += 1);
    }
    Ok(())
}

/// Exports `day` unless the archive already holds it with the database's count; confirms it.
async fn ensure_archived(
    archiving: &Archiving,
    archive: &Archive,
    store: &AnyStore,
    day: &idemgate_core::HistoryDay,
) -> Result<(), String> {
    let d = Day::of(day.start);
    if archive.confirm(&day.source, d, day.rows).await.is_ok() {
        return Ok(());
    }
    let manifest = idemgate_archive::export_day(store, archive, day, |_| {})
        .await
        .map_err(|e| format!("exporting {} {d}: {e}", day.source))?;
    archive
        .confirm(&day.source, d, day.rows)
        .await
        .map_err(|e| format!("after exporting {} {d}: {e}", day.source))?;
    archiving.update(|s| {
        s.exported_days += 1;
        s.exported_rows += manifest.rows;
    });
    tracing::info!(
        source = %day.source,
        day = %d,
        rows = manifest.rows,
        files = manifest.files.len(),
        archive = %archive.url(),
        "history day archived"
    );
    Ok(())
}

async fn drop_unit(
    archiving: &Archiving,
    archive: &Archive,
    store: &AnyStore,
    unit: &RetentionUnit,
    retention: Duration,
) -> Result<(), String> {
    let days = store
        .history_days(None, unit.from, unit.until)
        .await
        .map_err(|e| format!("counting {}: {}", unit.name, ErrorChain(&e)))?;
    for d in &days.days {
        ensure_archived(archiving, archive, store, d)
            .await
            .map_err(|why| format!("history {} kept in the database: {why}", unit.name))?;
    }
    let mut rows = 0u64;
    loop {
        let n = store
            .drop_history(unit, retention, BATCH)
            .await
            .map_err(|e| format!("dropping {}: {}", unit.name, ErrorChain(&e)))?;
        rows += n;
        // PostgreSQL drops the partition at once; SQLite deletes a batch per call.
        if n < u64::from(BATCH.get()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tracing::info!(unit = %unit.name, rows, archive = %archive.url(), "archived history dropped from the database");
    Ok(())
}
