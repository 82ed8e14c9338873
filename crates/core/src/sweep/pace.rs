//! Adaptive pacing: a sweep run that gives way to claims.
//!
//! Two parts, both free of I/O:
//!
//! - [`ClaimLatency`]: what the claim path records (each round trip of a claim batch, with how
//!   many claims it carried) and what the sweeper reads: the claim-weighted mean latency since
//!   its last look (its last batch and the pause before it), and the **baseline**, the claims'
//!   latency learned from the round trips that overlapped none of the sweep's batches (the run
//!   marks each with [`ClaimLatency::batch`]). A store keeps one and hands it out with
//!   [`Sweep::claim_latency`].
//! - [`Pacer`]: the controller, a pure function of what it is told. Between two batches of a
//!   run it compares the recent latency with the baseline: above [`BACKOFF_RATIO`] times the
//!   baseline it backs off multiplicatively (the pause lengthens, the batch shrinks), otherwise
//!   it speeds up again additively, one step a batch, back to the configured batch and pause.
//!   Since claims beside a batch are slower than the others and the recent mean holds both, a
//!   run settles at the share of its time in batches that keeps the claims' mean within
//!   [`BACKOFF_RATIO`] of the claims of the same minute clear of it.
//!
//! **Bounds.** The slowdown factor stays within 1 and [`MAX_SLOWDOWN`]: a batch never shrinks
//! below `batch / MAX_BATCH_SHRINK` (at least one row) and a pause never grows beyond
//! `pause + unit * (MAX_SLOWDOWN - 1)`, the unit being the configured pause or
//! [`MIN_PAUSE_UNIT`], whichever is longer. So however slow the claims get, a run deletes at
//! least [`Pacer::min_batch`] rows every [`Pacer::max_pause`] (plus the batch's own time): with
//! the defaults (5000 rows, 50 ms) 1250 rows every 800 ms, about 1500 rows a second. It cannot
//! stall. With no claims at all (nothing recorded since the last look) it speeds up to the
//! configured batch and pause.
//!
//! **Clocks.** The host's monotonic clock only measures round trips, spaces batches and tells
//! which round trips overlapped a batch; which records expired is decided by the store's own
//! clock in its delete, as always.
//!
//! **The baseline** is the claim-weighted mean latency of the claims clear of every batch,
//! over periods of at least [`BASELINE_PERIOD`] (and [`BASELINE_MIN_CLAIMS`] claims), followed
//! with a time constant of [`BASELINE_TAU`] (the plain mean of the periods until there are that
//! many): an average, not a floor, since a floor sits below the latency's own noise and takes
//! every batch for a slowdown. It keeps learning while a run is under way, from the claims
//! between its batches. Claims that get slower for another reason (a table that grows, a busier
//! workload, another process on the machine) are slower between batches too, and a run does not
//! take that for its own doing. (An earlier design froze the baseline for the whole run: claims
//! that drifted slower during a long run then held it at its slowest pace for good, about 1,500
//! rows a second, which a store that sees more expiries than that never catches up with.) What a
//! batch leaves behind it, WAL to flush or a checkpoint brought forward, reaches the baseline
//! too, slowly. The signal is this process's claims: a sweeper in a process that claims nothing
//! (the `idemgate sweep` command) runs at full speed.
//!
//! [`Sweep::claim_latency`]: crate::Sweep::claim_latency

use std::num::NonZeroU32;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// How a sweep run paces its batches: `[store.postgres] sweep_pacing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pacing {
    /// The configured batch and pause while claims are as fast as their baseline; backed off
    /// while they are slower (see the [module docs](self)).
    #[default]
    Adaptive,
    /// Always the configured batch and pause.
    Fixed,
}

impl Pacing {
    /// `adaptive` or `fixed`, as the configuration writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Adaptive => "adaptive",
            Self::Fixed => "fixed",
        }
    }
}

/// Recent latency above this many times the baseline makes the pacer back off.
pub const BACKOFF_RATIO: f64 = 1.2;
/// The largest slowdown factor: the pause grows to `MAX_SLOWDOWN` units.
pub const MAX_SLOWDOWN: u32 = 16;
/// The batch shrinks with the slowdown, down to the configured batch divided by this.
pub const MAX_BATCH_SHRINK: u32 = 4;
/// The step a backed-off pause grows by when the configured pause is shorter (or zero).
pub const MIN_PAUSE_UNIT: Duration = Duration::from_millis(10);
/// The shortest period the baseline is learned over.
pub const BASELINE_PERIOD: Duration = Duration::from_millis(250);
/// The fewest claims a baseline period holds (a period of fewer continues).
pub const BASELINE_MIN_CLAIMS: u64 = 16;
/// How slowly the baseline follows the claims' latency (the time constant).
pub const BASELINE_TAU: Duration = Duration::from_secs(10);

/// Claims and their summed latency (seconds times claims).
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    claims: u64,
    weighted: f64,
}

impl Acc {
    fn add(&mut self, took: Duration, claims: u64) {
        self.claims += claims;
        self.weighted += took.as_secs_f64() * claims as f64;
    }

    fn mean(&self) -> Option<f64> {
        (self.claims > 0).then(|| self.weighted / self.claims as f64)
    }
}

#[derive(Debug, Default)]
struct State {
    /// Every claim since the sweeper last looked.
    window: Acc,
    /// The baseline period being gathered (clear claims only), and when it began.
    period: Acc,
    period_from: Option<Instant>,
    /// Seconds.
    baseline: Option<f64>,
    /// Periods the baseline has learned from.
    periods: u64,
    /// Sweep batches running now.
    batches: usize,
    /// When the last sweep batch ended.
    batch_ended: Option<Instant>,
}

/// The claim path's latency, recorded by the claim path and read by the sweeper (see the
/// [module docs](self)). Cheap to record into: one uncontended lock per claim batch.
#[derive(Debug, Default)]
pub struct ClaimLatency {
    state: Mutex<State>,
}

/// What the sweeper reads between batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reading {
    /// The claim-weighted mean round trip since the last reading: a batch and the pause before
    /// it.
    pub recent: Duration,
    /// The baseline: the latency of claims clear of every batch, as learned.
    pub baseline: Duration,
    /// Claims since the last reading.
    pub claims: u64,
}

impl Reading {
    /// How many times the baseline the recent latency is.
    pub fn ratio(&self) -> f64 {
        let base = self.baseline.as_secs_f64();
        if base > 0.0 {
            self.recent.as_secs_f64() / base
        } else {
            1.0
        }
    }
}

impl ClaimLatency {
    /// Nothing recorded yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a handful of numbers, consistent after any panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one round trip of the claim path: `took`, for `claims` claims answered together.
    pub fn record(&self, took: Duration, claims: usize) {
        self.record_at(Instant::now(), took, claims);
    }

    /// [`record`](Self::record), the round trip having ended at `now`.
    pub fn record_at(&self, now: Instant, took: Duration, claims: usize) {
        let claims = claims as u64;
        if claims == 0 {
            return;
        }
        let mut s = self.lock();
        s.window.add(took, claims);
        let sent = now.checked_sub(took).unwrap_or(now);
        if s.batches > 0 || s.batch_ended.is_some_and(|ended| sent < ended) {
            return;
        }
        s.period.add(took, claims);
        let from = *s.period_from.get_or_insert(now);
        let span = now.saturating_duration_since(from);
        if span < BASELINE_PERIOD || s.period.claims < BASELINE_MIN_CLAIMS {
            return;
        }
        let mean = s.period.mean().unwrap_or_default();
        s.periods += 1;
        // The mean of the periods so far until there are a time constant's worth, so the first
        // ones (connections being made, caches cold) do not linger.
        let k = (span.as_secs_f64() / BASELINE_TAU.as_secs_f64())
            .max(1.0 / s.periods as f64)
            .min(1.0);
        let b = s.baseline.unwrap_or(mean);
        s.baseline = Some(b + (mean - b) * k);
        s.period = Acc::default();
        s.period_from = Some(now);
    }

    /// The latency since the last reading, against the baseline, and starts a new window.
    /// `None` when no claim was recorded since (or no baseline is learned yet).
    pub fn take(&self) -> Option<Reading> {
        let mut s = self.lock();
        let window = std::mem::take(&mut s.window);
        let recent = window.mean()?;
        let baseline = s.baseline?;
        Some(Reading {
            recent: Duration::from_secs_f64(recent),
            baseline: Duration::from_secs_f64(baseline),
            claims: window.claims,
        })
    }

    /// The baseline learned so far.
    pub fn baseline(&self) -> Option<Duration> {
        self.lock().baseline.map(Duration::from_secs_f64)
    }

    /// Marks a sweep batch as running until the guard is dropped: claims whose round trip
    /// overlaps it teach the baseline nothing.
    pub fn batch(&self) -> InBatch<'_> {
        self.batch_at_start();
        InBatch(self)
    }

    fn batch_at_start(&self) {
        self.lock().batches += 1;
    }

    /// Ends a batch begun with [`batch_at_start`](Self::batch_at_start) at `now`.
    fn batch_at_end(&self, now: Instant) {
        let mut s = self.lock();
        s.batches = s.batches.saturating_sub(1);
        s.batch_ended = Some(s.batch_ended.map_or(now, |ended| ended.max(now)));
    }
}

/// A sweep batch running ([`ClaimLatency::batch`]).
#[derive(Debug)]
pub struct InBatch<'a>(&'a ClaimLatency);

impl Drop for InBatch<'_> {
    fn drop(&mut self) {
        self.0.batch_at_end(Instant::now());
    }
}

/// What the pacer decided after a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The pause before the next batch.
    pub pause: Duration,
    /// True when it backed off (the claims were slower than [`BACKOFF_RATIO`] times their
    /// baseline).
    pub backed_off: bool,
}

/// The controller of an adaptive sweep run (see the [module docs](self)): which batch to delete
/// next and how long to pause before it.
#[derive(Debug, Clone)]
pub struct Pacer {
    batch: NonZeroU32,
    pause: Duration,
    /// 1 (the configured pace) to [`MAX_SLOWDOWN`].
    slowdown: u32,
}

impl Pacer {
    /// At the configured `batch` and `pause`.
    pub fn new(batch: NonZeroU32, pause: Duration) -> Self {
        Self {
            batch,
            pause,
            slowdown: 1,
        }
    }

    /// The rows of the next batch: the configured batch divided by the slowdown, down to
    /// [`Pacer::min_batch`].
    pub fn batch(&self) -> NonZeroU32 {
        let rows = (self.batch.get() / self.slowdown).max(self.min_batch().get());
        NonZeroU32::new(rows).unwrap_or(NonZeroU32::MIN)
    }

    /// The current pause: the configured pause plus a unit per step of slowdown.
    pub fn pause(&self) -> Duration {
        self.pause + self.unit() * (self.slowdown - 1)
    }

    /// The current slowdown factor, 1 to [`MAX_SLOWDOWN`].
    pub fn slowdown(&self) -> u32 {
        self.slowdown
    }

    /// The smallest batch it deletes: the configured batch divided by [`MAX_BATCH_SHRINK`].
    pub fn min_batch(&self) -> NonZeroU32 {
        NonZeroU32::new(self.batch.get() / MAX_BATCH_SHRINK).unwrap_or(NonZeroU32::MIN)
    }

    /// The longest pause it takes.
    pub fn max_pause(&self) -> Duration {
        self.pause + self.unit() * (MAX_SLOWDOWN - 1)
    }

    fn unit(&self) -> Duration {
        self.pause.max(MIN_PAUSE_UNIT)
    }

    /// After a batch: `reading` of the claim path since the last step (`None`: no claims, or no
    /// baseline yet). Backs off (doubles the slowdown) when the claims ran slower than
    /// [`BACKOFF_RATIO`] times their baseline, else speeds up by one step; returns the pause to
    /// take before the next batch.
    pub fn step(&mut self, reading: Option<Reading>) -> Step {
        let backed_off = reading.is_some_and(|r| r.ratio() > BACKOFF_RATIO);
        self.slowdown = if backed_off {
            (self.slowdown * 2).min(MAX_SLOWDOWN)
        } else {
            (self.slowdown - 1).max(1)
        };
        Step {
            pause: self.pause(),
            backed_off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Within a microsecond (the means are computed in floating point).
    fn close(a: Option<Duration>, b: Duration) -> bool {
        a.is_some_and(|a| a.abs_diff(b) < Duration::from_micros(1))
    }

    fn pacer() -> Pacer {
        Pacer::new(NonZeroU32::new(5_000).unwrap(), 50 * MS)
    }

    fn reading(recent_ms: u32, baseline_ms: u32) -> Option<Reading> {
        Some(Reading {
            recent: recent_ms * MS,
            baseline: baseline_ms * MS,
            claims: 100,
        })
    }

    #[test]
    fn claims_at_their_baseline_or_none_at_all_keep_the_configured_pace() {
        let mut p = pacer();
        for r in [None, reading(3, 3), reading(36, 30), None] {
            let step = p.step(r);
            assert_eq!((step.pause, step.backed_off), (50 * MS, false));
            assert_eq!(p.batch().get(), 5_000);
        }
    }

    #[test]
    fn slow_claims_back_off_multiplicatively_to_the_bounds() {
        let mut p = pacer();
        let mut seen = Vec::new();
        for _ in 0..8 {
            let step = p.step(reading(5, 3));
            assert!(step.backed_off);
            seen.push((p.slowdown(), p.batch().get(), step.pause.as_millis()));
        }
        assert_eq!(
            seen,
            [
                (2, 2_500, 100),
                (4, 1_250, 200),
                (8, 1_250, 400),
                (16, 1_250, 800),
                (16, 1_250, 800),
                (16, 1_250, 800),
                (16, 1_250, 800),
                (16, 1_250, 800),
            ]
        );
        assert_eq!((p.min_batch().get(), p.max_pause()), (1_250, 800 * MS));
    }

    #[test]
    fn recovery_is_one_step_a_batch() {
        let mut p = pacer();
        for _ in 0..5 {
            p.step(reading(10, 3));
        }
        assert_eq!(p.slowdown(), MAX_SLOWDOWN);
        let mut pauses = Vec::new();
        let mut steps = 0;
        while p.slowdown() > 1 {
            pauses.push(p.step(reading(3, 3)).pause);
            steps += 1;
        }
        assert_eq!(steps, MAX_SLOWDOWN - 1);
        assert_eq!(pauses[0], 50 * MS + 14 * 50 * MS);
        assert!(
            pauses.windows(2).all(|w| w[1] + 50 * MS == w[0]),
            "{pauses:?}"
        );
        assert_eq!((p.batch().get(), p.pause()), (5_000, 50 * MS));
        // One slow reading in the middle of a recovery doubles again.
        for _ in 0..3 {
            p.step(reading(10, 3));
        }
        assert_eq!(p.slowdown(), 8);
        p.step(reading(3, 3));
        assert_eq!(p.slowdown(), 7);
    }

    #[test]
    fn the_minimum_progress_rate_holds_however_slow_the_claims() {
        // Rows per second of pause, at worst: min_batch / max_pause.
        for (batch, pause_ms, min_rows, max_pause_ms) in [
            (5_000, 50, 1_250, 800),
            (100, 10, 25, 160),
            (1, 0, 1, 150),
            (7, 0, 1, 150),
        ] {
            let mut p = Pacer::new(NonZeroU32::new(batch).unwrap(), pause_ms * MS);
            for _ in 0..100 {
                let step = p.step(reading(1_000, 1));
                assert!(step.pause <= p.max_pause());
                assert!(p.batch() >= p.min_batch());
            }
            assert_eq!(p.batch().get(), min_rows, "batch {batch}");
            assert_eq!(p.pause(), max_pause_ms * MS, "batch {batch}");
        }
    }

    #[test]
    fn a_zero_pause_still_backs_off() {
        let mut p = Pacer::new(NonZeroU32::new(100).unwrap(), Duration::ZERO);
        assert_eq!(p.step(reading(2, 1)).pause, 10 * MS);
        assert_eq!(p.step(reading(2, 1)).pause, 30 * MS);
        assert_eq!(p.step(None).pause, 20 * MS);
    }

    /// Records `claims` claims of `took` each, spread over `span` from `at` in 10 ms steps.
    fn feed(l: &ClaimLatency, at: &mut Instant, span: Duration, took: Duration, claims: usize) {
        let end = *at + span;
        while *at < end {
            *at += 10 * MS;
            l.record_at(*at, took, claims);
        }
    }

    #[test]
    fn the_baseline_is_learned_from_claims_and_follows_them_slowly() {
        let l = ClaimLatency::new();
        let mut at = Instant::now();
        assert_eq!(l.take(), None);
        assert_eq!(l.baseline(), None);
        feed(&l, &mut at, 2_000 * MS, 4 * MS, 4);
        assert!(close(l.baseline(), 4 * MS), "{:?}", l.baseline());
        // Until a time constant's worth of periods, the mean of them: about 8 at 4 ms and 12 at
        // 2 ms (the periods end where they end).
        feed(&l, &mut at, 3_000 * MS, 2 * MS, 4);
        let b = l.baseline().unwrap();
        assert!(b > 2 * MS + MS * 6 / 10 && b < 3 * MS, "{b:?}");
        // A minute, all the way.
        feed(&l, &mut at, 60_000 * MS, 2 * MS, 4);
        let b = l.baseline().unwrap();
        assert!(b < 2 * MS + MS / 10, "{b:?}");
        feed(&l, &mut at, 60_000 * MS, 6 * MS, 4);
        let b = l.baseline().unwrap();
        assert!(b > 6 * MS - MS / 10, "{b:?}");
    }

    #[test]
    fn a_baseline_period_needs_its_time_and_its_claims() {
        let l = ClaimLatency::new();
        let mut at = Instant::now();
        // Many claims within less than a period: no baseline yet.
        for _ in 0..20 {
            at += 10 * MS;
            l.record_at(at, 3 * MS, 10);
        }
        assert_eq!(l.baseline(), None);
        // A long time with few claims: none either, until there are enough.
        let l = ClaimLatency::new();
        for _ in 0..15 {
            at += 1_000 * MS;
            l.record_at(at, 3 * MS, 1);
            assert_eq!(l.baseline(), None);
        }
        at += 1_000 * MS;
        l.record_at(at, 3 * MS, 1);
        assert!(close(l.baseline(), 3 * MS), "{:?}", l.baseline());
    }

    #[test]
    fn claims_beside_a_batch_teach_the_baseline_nothing() {
        let l = ClaimLatency::new();
        let mut at = Instant::now();
        feed(&l, &mut at, 1_000 * MS, 2 * MS, 4);
        l.take();
        // A batch runs for a minute: the claims meanwhile are slow, and beside it.
        l.batch_at_start();
        feed(&l, &mut at, 60_000 * MS, 8 * MS, 4);
        // One sent before the batch ended and answered after it is beside it too.
        at += MS;
        l.batch_at_end(at);
        l.record_at(at + MS, 8 * MS, 4);
        assert!(close(l.baseline(), 2 * MS), "{:?}", l.baseline());
        let r = l.take().unwrap();
        assert!(close(Some(r.recent), 8 * MS), "{r:?}");
        assert_eq!(r.claims, 4 * 6_000 + 4);
        // Claims sent after it are clear, and the baseline learns from them.
        feed(&l, &mut at, 60_000 * MS, 3 * MS, 4);
        assert!(
            l.baseline().unwrap() > 3 * MS - MS / 10,
            "{:?}",
            l.baseline()
        );
        assert!(close(Some(l.take().unwrap().recent), 3 * MS));
    }

    /// A long run on claims that drift slower for another reason (a table growing under them):
    /// the baseline follows the claims between batches, so the batches are judged by their own
    /// effect (claims beside them 1.1x the others), not by the drift (3x by the end).
    #[test]
    fn a_long_run_is_held_to_its_own_effect_not_to_a_drift_of_the_claims() {
        let l = ClaimLatency::new();
        let mut at = Instant::now();
        feed(&l, &mut at, 2_000 * MS, 2 * MS, 4);
        let mut p = Pacer::new(NonZeroU32::new(5_000).unwrap(), 50 * MS);
        let mut backoffs = 0;
        let mut last = None;
        // Ten minutes of 100 ms batches and 50 ms pauses, the clear latency from 2 ms to 6 ms:
        // the mean since each reading is (100 * 1.1 + 40) / 140 of it.
        for cycle in 0..4_000u32 {
            let clear = 2 * MS + 4 * MS * cycle / 4_000;
            l.batch_at_start();
            feed(&l, &mut at, 100 * MS, clear * 11 / 10, 4);
            l.batch_at_end(at);
            let reading = l.take();
            backoffs += u32::from(p.step(reading).backed_off);
            last = reading;
            at += 10 * MS;
            feed(&l, &mut at, 40 * MS, clear, 4);
        }
        assert_eq!(backoffs, 0);
        let r = last.unwrap();
        assert!((r.ratio() - 150.0 / 140.0).abs() < 0.03, "{r:?}");
        assert!(r.baseline > 5 * MS, "{r:?}");
        assert_eq!(p.slowdown(), 1);
    }

    #[test]
    fn a_reading_is_the_claim_weighted_mean_since_the_last() {
        let l = ClaimLatency::new();
        let mut at = Instant::now();
        // No baseline yet: no reading.
        l.record_at(at, 2 * MS, 1);
        assert_eq!(l.take(), None);
        feed(&l, &mut at, 1_000 * MS, 2 * MS, 2);
        l.take();
        assert_eq!(l.take(), None, "no claims since the last reading");
        l.record_at(at, 10 * MS, 1);
        l.record_at(at, 2 * MS, 3);
        l.record_at(at, 2 * MS, 0);
        let r = l.take().unwrap();
        assert_eq!(r.claims, 4);
        assert!(close(Some(r.recent), 4 * MS), "{r:?}");
        assert!(close(Some(r.baseline), 2 * MS), "{r:?}");
        assert!((r.ratio() - 2.0).abs() < 1e-9);
    }
}
