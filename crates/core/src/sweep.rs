//! Sweeping: one run ([`run`], the default of [`Sweep::sweep_run`]) is bounded batches with a
//! pause between them until a batch comes back short; `spawn` (feature `tokio`) is the one
//! background sweeper, a run every interval until cancelled. With [`Pacing::Adaptive`] (the
//! default) a run gives way to claims: [`pace`] backs it off while the store's claims are slower
//! than their baseline.

pub mod pace;

use std::future::Future;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::error::StoreError;
pub use pace::{ClaimLatency, Pacing};

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

    /// The claim path's latency, which an adaptive run ([`Pacing::Adaptive`]) paces itself by;
    /// `None` (the default) when the store records none, and runs go at the configured pace.
    fn claim_latency(&self) -> Option<&ClaimLatency> {
        None
    }
}

/// How a sweep run deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SweepOptions {
    /// Rows per batch (one short transaction each).
    pub batch: NonZeroU32,
    /// Pause between batches, so claims get the store between them.
    pub pause: Duration,
    /// Whether the batch and pause give way to slow claims ([`Pacing::Adaptive`]: the batch
    /// shrinks and the pause grows, within [`pace`]'s bounds) or stay as configured.
    pub pacing: Pacing,
}

impl Default for SweepOptions {
    fn default() -> Self {
        Self {
            batch: NonZeroU32::new(5_000).expect("non-zero"),
            pause: Duration::from_millis(50),
            pacing: Pacing::default(),
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
    /// Times an adaptive run backed off because claims were slower than their baseline.
    pub backoffs: u64,
    /// The time spent in pauses between batches (the configured pauses and the backed-off ones).
    pub paused_for: Duration,
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
/// `on_batch` hears each batch's row count. With [`Pacing::Adaptive`] and a store that records its
/// [`Sweep::claim_latency`], a [`pace::Pacer`] picks each batch and pause from the claims' latency
/// since the last batch; otherwise every batch and pause is as configured.
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
    let latency = match opts.pacing {
        Pacing::Adaptive => store.claim_latency(),
        Pacing::Fixed => None,
    };
    if let Some(latency) = latency {
        // The first batch is judged by the claims beside it alone.
        latency.take();
    }
    let mut pacer = pace::Pacer::new(opts.batch, opts.pause);
    loop {
        let batch = pacer.batch();
        let rows = {
            // Claims that overlap the batch teach the baseline nothing.
            let _batch = latency.map(ClaimLatency::batch);
            store.sweep_expired(batch).await?
        };
        report.batches += 1;
        report.rows += rows;
        on_batch(rows);
        if rows < u64::from(batch.get()) {
            break;
        }
        let wait = match latency {
            Some(latency) => {
                let step = pacer.step(latency.take());
                report.backoffs += u64::from(step.backed_off);
                step.pause
            }
            None => opts.pause,
        };
        report.paused_for += wait;
        if !pause(wait).await {
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
    on_run: impl FnMut(Result<SweepReport, StoreError>) + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    S: Sweep + 'static,
{
    tokio::spawn(every_run(store, every, opts, cancel, on_run))
}

/// [`spawn`]'s loop, for a caller that runs it on a task of its own (a supervisor that
/// restarts it). Written out as a `Send` future rather than an `async fn`: a caller that asks
/// for `Send` over the boxed pause cannot prove it through an `async fn`'s opaque type.
#[cfg(feature = "tokio")]
#[allow(clippy::manual_async_fn)]
pub fn every_run<S>(
    store: S,
    every: Duration,
    opts: SweepOptions,
    cancel: tokio_util::sync::CancellationToken,
    mut on_run: impl FnMut(Result<SweepReport, StoreError>) + Send + 'static,
) -> impl Future<Output = ()> + Send + 'static
where
    S: Sweep + 'static,
{
    async move {
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
    }
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

    /// No I/O: a trivial executor is enough.
    fn block_on<T>(fut: impl Future<Output = T>) -> T {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut fut = std::pin::pin!(fut);
        loop {
            if let std::task::Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                return r;
            }
        }
    }

    fn run_on(counts: &[u64]) -> SweepReport {
        let store = Scripted(Mutex::new(counts.to_vec()));
        let opts = SweepOptions {
            batch: NonZeroU32::new(5).unwrap(),
            pause: Duration::ZERO,
            pacing: Pacing::Adaptive,
        };
        block_on(run(&store, opts, |_| async { true }, |_| {})).unwrap()
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

    const MS: Duration = Duration::from_millis(1);

    /// `expired` rows, and claims beside each batch: the scripted latencies, then the
    /// baseline's (none at all when `claims` is false).
    struct Paced {
        expired: Mutex<u64>,
        latency: ClaimLatency,
        claims: bool,
        beside: Mutex<Vec<Duration>>,
        batches: Mutex<Vec<u32>>,
    }

    impl Paced {
        /// A baseline of 2 ms learned before the run.
        fn new(expired: u64, claims: bool, beside: &[Duration]) -> Self {
            let latency = ClaimLatency::new();
            let mut at = Instant::now();
            for _ in 0..100 {
                at += 10 * MS;
                latency.record_at(at, 2 * MS, 4);
            }
            Self {
                expired: Mutex::new(expired),
                latency,
                claims,
                beside: Mutex::new(beside.iter().rev().copied().collect()),
                batches: Mutex::new(Vec::new()),
            }
        }

        fn run(&self, pacing: Pacing) -> (SweepReport, Vec<u32>, Vec<Duration>) {
            let opts = SweepOptions {
                batch: NonZeroU32::new(800).unwrap(),
                pause: 5 * MS,
                pacing,
            };
            let pauses = Mutex::new(Vec::new());
            let pause = |d| {
                pauses.lock().unwrap().push(d);
                async { true }
            };
            let report = block_on(run(self, opts, pause, |_| {})).unwrap();
            let batches = self.batches.lock().unwrap().clone();
            (report, batches, pauses.into_inner().unwrap())
        }
    }

    impl Sweep for Paced {
        async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
            if self.claims {
                let took = self.beside.lock().unwrap().pop().unwrap_or(2 * MS);
                self.latency.record(took, 10);
            }
            self.batches.lock().unwrap().push(batch.get());
            let mut left = self.expired.lock().unwrap();
            let n = u64::from(batch.get()).min(*left);
            *left -= n;
            Ok(n)
        }

        fn claim_latency(&self) -> Option<&ClaimLatency> {
            Some(&self.latency)
        }
    }

    #[test]
    fn an_adaptive_run_backs_off_while_claims_are_slow_and_still_deletes_everything() {
        let store = Paced::new(10_000, true, &[5 * MS, 5 * MS, 3 * MS]);
        let (report, batches, pauses) = store.run(Pacing::Adaptive);
        assert_eq!(report.rows, 10_000);
        assert_eq!(*store.expired.lock().unwrap(), 0);
        assert_eq!(report.backoffs, 3);
        assert_eq!(
            batches[..8],
            [800, 400, 200, 200, 200, 200, 200, 200],
            "{batches:?}"
        );
        let ms: Vec<u128> = pauses.iter().map(Duration::as_millis).collect();
        assert_eq!(ms[..7], [15, 35, 75, 65, 55, 45, 35], "{ms:?}");
        assert_eq!(report.paused_for, pauses.iter().sum());
        // Recovered: the configured pace.
        assert_eq!(*batches.last().unwrap(), 800);
        assert_eq!(*pauses.last().unwrap(), 5 * MS);
        // The baseline did not learn the slow claims.
        assert!(store.latency.baseline().unwrap() < 2 * MS + MS / 100);
    }

    #[test]
    fn without_claims_or_with_fixed_pacing_a_run_goes_at_the_configured_pace() {
        for (claims, pacing) in [(false, Pacing::Adaptive), (true, Pacing::Fixed)] {
            let store = Paced::new(4_000, claims, &[9 * MS; 10]);
            let (report, batches, pauses) = store.run(pacing);
            assert_eq!((report.rows, report.backoffs), (4_000, 0));
            assert_eq!(batches, [800; 6]);
            assert_eq!(pauses, [5 * MS; 5]);
            assert_eq!(report.paused_for, 25 * MS);
        }
    }
}
