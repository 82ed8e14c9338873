//! Sweeping: one run ([`run`], the default of [`Sweep::sweep_run`]) is bounded batches with a
//! pause between them until a batch comes back short; [`spawn`] (feature `tokio`) is the one
//! background sweeper, a run every interval until cancelled.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::error::StoreError;

/// Removing expired records in bounded batches (a store whose records expire by themselves,
/// like Redis, does not implement it).
pub trait Sweep: Send + Sync {
    /// Deletes at most `batch` records whose `expires_at` passed (by the store's clock) and returns
    /// how many it deleted. Live records are never touched.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn sweep_expired(
        &self,
        batch: NonZeroU32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// One sweep run: by default [`run`], bounded batches of `opts.batch` with
    /// `pause(opts.pause)` awaited between them (it returns `false` to stop the run: cancellation)
    /// until a batch comes back short. `on_batch` hears each batch's row count. A store with more
    /// to do in a run overrides it (PostgreSQL maintains its partitions first).
    ///
    /// # Errors
    /// The first failure; what was deleted before it stays deleted.
    fn sweep_run<P, F>(
        &self,
        opts: SweepOptions,
        pause: P,
        on_batch: impl FnMut(u64) + Send,
    ) -> impl Future<Output = Result<SweepReport, StoreError>> + Send
    where
        Self: Sized,
        P: FnMut(Duration) -> F + Send,
        F: Future<Output = bool> + Send,
    {
        run(self, opts, pause, on_batch)
    }
}

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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SweepReport {
    /// Expired records deleted by bounded batches.
    pub rows: u64,
    pub batches: u64,
    pub elapsed: Duration,
    /// True when the run stopped because `pause` said so, before a batch came back short.
    pub cancelled: bool,
    /// Partitions the run created ahead (stores that partition; empty elsewhere).
    pub partitions_created: Vec<String>,
    /// Partitions the run dropped whole once everything in them expired.
    pub partitions_dropped: Vec<String>,
}

/// Runs batches until one deletes fewer rows than a full batch: what expired before the run is
/// then gone, and rows that expire while it runs are left to the next run (under a steady stream
/// of expiries, "until a batch deletes nothing" would never end).
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
    S: Sweep + ?Sized,
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
        if rows < u64::from(opts.batch.get()) {
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

/// A pause that is cut short by `cancel`, for [`Sweep::sweep_run`]: `false` once cancelled.
#[cfg(feature = "tokio")]
pub fn pause_or_cancel(
    cancel: &tokio_util::sync::CancellationToken,
) -> impl FnMut(Duration) -> std::pin::Pin<Box<dyn Future<Output = bool> + Send>> + Send + use<> {
    let cancel = cancel.clone();
    move |d| {
        let cancel = cancel.clone();
        Box::pin(async move {
            tokio::select! {
                () = cancel.cancelled() => false,
                () = tokio::time::sleep(d) => true,
            }
        })
    }
}

/// The background sweeper: a [`Sweep::sweep_run`] now and every `every`, until `cancel` fires
/// (a run in progress stops between batches). `on_run` hears each run's result, to log and count
/// it; a failed run is tried again at the next tick.
#[cfg(feature = "tokio")]
pub fn spawn<S>(
    store: S,
    every: Duration,
    opts: SweepOptions,
    cancel: tokio_util::sync::CancellationToken,
    mut on_run: impl FnMut(Result<SweepReport, StoreError>) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    S: Sweep + 'static,
{
    tokio::spawn(async move {
        loop {
            let result = store
                .sweep_run(opts, pause_or_cancel(&cancel), |_| {})
                .await;
            on_run(result);
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A store whose batches delete the given counts, then one row each for ever (a steady
    /// stream of expiries).
    struct Scripted(Mutex<Vec<u64>>);

    impl Sweep for Scripted {
        async fn sweep_expired(&self, _batch: NonZeroU32) -> Result<u64, StoreError> {
            let mut left = self.0.lock().unwrap();
            Ok(if left.is_empty() { 1 } else { left.remove(0) })
        }
    }

    fn run_on(counts: &[u64]) -> SweepReport {
        let store = Scripted(Mutex::new(counts.to_vec()));
        let opts = SweepOptions {
            batch: NonZeroU32::new(5).unwrap(),
            pause: Duration::ZERO,
        };
        let fut = run(&store, opts, |_| async { true }, |_| {});
        // No I/O: a trivial executor is enough.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut fut = std::pin::pin!(fut);
        loop {
            if let std::task::Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                return r.unwrap();
            }
        }
    }

    #[test]
    fn a_run_ends_at_the_first_short_batch_even_while_rows_keep_expiring() {
        let report = run_on(&[5, 5, 3]);
        assert_eq!((report.batches, report.rows), (3, 13));
        // Under a steady trickle, one short batch ends the run.
        let report = run_on(&[]);
        assert_eq!((report.batches, report.rows), (1, 1));
        let report = run_on(&[0]);
        assert_eq!((report.batches, report.rows), (1, 0));
    }
}
