//! A sweep run: bounded batches with a pause between them, until a batch deletes nothing.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::store::{StoreError, Sweep};

/// How a sweep run deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepOptions {
    /// Rows per batch (one short transaction each).
    pub batch: NonZeroU32,
    /// Pause between batches, so claims get the store between them.
    pub pause: Duration,
}

impl Default for SweepOptions {
    fn default() -> Self {
        Self {
            batch: NonZeroU32::new(5_000).expect("non-zero"),
            pause: Duration::from_millis(50),
        }
    }
}

/// What a sweep run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepReport {
    pub rows: u64,
    pub batches: u64,
    pub elapsed: Duration,
    /// True when the run stopped because `pause` said so, before a batch came back empty.
    pub cancelled: bool,
}

/// Runs batches until one deletes nothing.
///
/// `pause` is awaited between batches and returns `false` to stop the run early (cancellation);
/// `on_batch` hears each batch's row count.
///
/// # Errors
/// The first [`StoreError`] of a batch; the batches before it stay deleted.
pub async fn run<S, P, F>(
    store: &S,
    opts: SweepOptions,
    mut pause: P,
    mut on_batch: impl FnMut(u64),
) -> Result<SweepReport, StoreError>
where
    S: Sweep,
    P: FnMut(Duration) -> F,
    F: Future<Output = bool>,
{
    let started = Instant::now();
    let mut report = SweepReport::default();
    loop {
        let rows = store.sweep_expired(opts.batch).await?;
        report.batches += 1;
        report.rows += rows;
        on_batch(rows);
        if rows == 0 {
            break;
        }
        if !pause(opts.pause).await {
            report.cancelled = true;
            break;
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}
