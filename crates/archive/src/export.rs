//! Export: a store's history days into the archive, a day at a time, each checked against the
//! store's count once written.

use std::num::NonZeroU32;

use idemgate_core::{HistoryDay, HistoryExport, SourceName, Timestamp};

use crate::archive::Archive;
use crate::error::ArchiveError;
use crate::layout::Day;
use crate::manifest::Manifest;
use crate::row::ArchivedRow;

/// Rows read from the store at a time.
const PAGE: u32 = 50_000;

/// A day is read ten minutes at a time (each in pages). A page's query may sort everything from
/// its cursor to the end of the range it is given (PostgreSQL does, on a partition it has no
/// statistics of yet: a bitmap scan, then a sort by (time, id)); bounding the range bounds that
/// work by the rows of ten minutes instead of the rest of the day.
const WINDOW: std::time::Duration = std::time::Duration::from_secs(600);

/// What an export will do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Closed days with rows, oldest first: what it exports.
    pub days: Vec<HistoryDay>,
    /// Days with rows that the store's clock says are not over yet: left for later.
    pub open: Vec<HistoryDay>,
    /// The store's now.
    pub now: Timestamp,
}

impl Plan {
    pub fn rows(&self) -> u64 {
        self.days.iter().map(|d| d.rows).sum()
    }
}

/// The days of `source` (every source if `None`) from `since` through `until` (both whole
/// days, UTC) that hold history.
///
/// # Errors
/// [`ArchiveError::History`].
pub async fn plan<S: HistoryExport>(
    store: &S,
    source: Option<&SourceName>,
    since: Day,
    until: Day,
) -> Result<Plan, ArchiveError> {
    let found = store
        .history_days(source, since.start(), until.end())
        .await?;
    let (days, open) = found
        .days
        .into_iter()
        .partition(|d| Day::of(d.start).end() <= found.now);
    Ok(Plan {
        days,
        open,
        now: found.now,
    })
}

/// Writes one day of one source into the archive, reading it from the store in pages; calls
/// `progress` with the rows written so far. The day's files are written first, the manifest
/// last; a day exported again (after a crash half-way, or to repair) is overwritten whole.
///
/// # Errors
/// [`ArchiveError::History`] from the store; the archive's errors.
pub async fn export_day<S: HistoryExport>(
    store: &S,
    archive: &Archive,
    day: &HistoryDay,
    mut progress: impl FnMut(u64),
) -> Result<Manifest, ArchiveError> {
    let d = Day::of(day.start);
    let mut writer = archive.day_writer(&day.source, d, &day.partition);
    let mut done = 0u64;
    let page = NonZeroU32::new(PAGE).expect("PAGE is not zero");
    let mut from = d.start();
    while from < d.end() {
        let until = from.plus(WINDOW).min(d.end());
        let mut after = None;
        loop {
            let rows = store
                .history_rows(&day.source, from, until, after, page)
                .await?;
            let Some(last) = rows.last() else { break };
            after = Some(last.cursor);
            let n = rows.len();
            done += n as u64;
            writer
                .push(
                    rows.iter()
                        .map(|r| ArchivedRow::new(r.source.as_str(), r.event_id.as_str(), &r.entry))
                        .collect(),
                )
                .await?;
            progress(done);
            if n < PAGE as usize {
                break;
            }
        }
        from = until;
    }
    writer.finish().await
}
