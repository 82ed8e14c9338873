//! Latency summaries, per-second ticks and markdown tables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Percentiles of a set of latencies.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub max: Duration,
}

impl Latency {
    /// Summarises `samples` (sorted in place). Empty gives zeros.
    pub fn of(samples: &mut [Duration]) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            if samples.is_empty() {
                Duration::ZERO
            } else {
                let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
                samples[i]
            }
        };
        Self {
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

/// Latencies counted in log-linear buckets (64 per power of two, so within 1.6% of the true
/// value), for runs too long to keep every sample. Shared by many tasks: recording is one atomic
/// add.
#[derive(Debug)]
pub struct Histogram {
    counts: Vec<AtomicU64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// Buckets per power of two (and the width, in µs, of the exact buckets below `2 * SUB`).
const SUB: u64 = 64;
/// Latencies are capped at 2^40 µs (about 12 days).
const TOP_BIT: u32 = 40;

impl Histogram {
    pub fn new() -> Self {
        let len = Self::bucket(u64::MAX) + 1;
        Self {
            counts: (0..len).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn bucket(us: u64) -> usize {
        let us = us.min((1 << TOP_BIT) - 1);
        if us < 2 * SUB {
            us as usize
        } else {
            let e = 63 - us.leading_zeros() - SUB.trailing_zeros();
            (u64::from(e) * SUB + (us >> e)) as usize
        }
    }

    /// The smallest value (µs) bucket `i` holds.
    fn lower(i: usize) -> u64 {
        let i = i as u64;
        if i < 2 * SUB {
            i
        } else {
            let e = i / SUB - 1;
            (i - e * SUB) << e
        }
    }

    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.counts[Self::bucket(us)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The nearest-rank `q` quantile, as the middle of its bucket. Empty gives zero.
    pub fn quantile(&self, q: f64) -> Duration {
        let n = self.count();
        if n == 0 {
            return Duration::ZERO;
        }
        let rank = ((n as f64 * q).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= rank {
                let (lo, hi) = (Self::lower(i), Self::lower(i + 1));
                return Duration::from_micros(lo + (hi - lo) / 2);
            }
        }
        Duration::ZERO
    }
}

/// Counts of events per whole second from `from` (`at`: each event's time, on the same clock as
/// `from` and `to`). Only whole seconds inside `[from, to)` count; a partial last second is left
/// out, so every tick is comparable.
pub fn ticks(at: impl IntoIterator<Item = Duration>, from: Duration, to: Duration) -> Vec<u64> {
    let whole = to.saturating_sub(from).as_secs() as usize;
    let mut out = vec![0; whole];
    for t in at {
        if t < from {
            continue;
        }
        let i = (t - from).as_secs() as usize;
        if let Some(slot) = out.get_mut(i) {
            *slot += 1;
        }
    }
    out
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// A count, readable: `2 M`, `0.5 M`, `50000`.
pub fn count(n: u64) -> String {
    if n >= 100_000 {
        let m = n as f64 / 1e6;
        if n.is_multiple_of(1_000_000) {
            format!("{m:.0} M")
        } else if n.is_multiple_of(100_000) {
            format!("{m:.1} M")
        } else {
            format!("{m:.2} M")
        }
    } else {
        n.to_string()
    }
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: i64) -> String {
    format!("{:.1}", bytes as f64 / 1_048_576.0)
}

/// A markdown table.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!(
        "| {} |\n|{}|\n",
        header.join(" | "),
        header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let mut v: Vec<_> = (1..=100).map(Duration::from_millis).collect();
        let l = Latency::of(&mut v);
        assert_eq!(
            (l.p50, l.p99, l.max),
            (
                Duration::from_millis(50),
                Duration::from_millis(99),
                Duration::from_millis(100)
            )
        );
        assert_eq!(Latency::of(&mut []).p99, Duration::ZERO);
    }

    #[test]
    fn histogram_buckets_are_contiguous_and_narrow() {
        for i in 0..Histogram::bucket(u64::MAX) {
            let lo = Histogram::lower(i);
            assert_eq!(Histogram::bucket(lo), i, "lower bound of {i}");
            let hi = Histogram::lower(i + 1);
            assert!(hi > lo);
            assert_eq!(Histogram::bucket(hi - 1), i, "upper bound of {i}");
            assert!((hi - lo) as f64 / lo.max(1) as f64 <= 1.0 / 64.0 + 1e-9 || lo < 128);
        }
    }

    #[test]
    fn histogram_quantiles_are_close_to_exact_ones() {
        let h = Histogram::new();
        let mut exact = Vec::new();
        for us in (1..=10_000u64).map(|i| i * 37 % 20_011 + 50) {
            let d = Duration::from_micros(us);
            h.record(d);
            exact.push(d);
        }
        let exact = Latency::of(&mut exact);
        assert_eq!(h.count(), 10_000);
        for (got, want) in [(h.quantile(0.5), exact.p50), (h.quantile(0.99), exact.p99)] {
            let err = (got.as_secs_f64() - want.as_secs_f64()).abs() / want.as_secs_f64();
            assert!(err < 0.01, "{got:?} against {want:?}");
        }
        assert_eq!(Histogram::new().quantile(0.99), Duration::ZERO);
        h.record(Duration::from_secs(100 * 86_400));
        assert!(h.quantile(1.0) > Duration::from_secs(86_400));
    }

    #[test]
    fn counts_read_as_millions() {
        assert_eq!(count(5_000_000), "5 M");
        assert_eq!(count(500_000), "0.5 M");
        assert_eq!(count(1_250_000), "1.25 M");
        assert_eq!(count(50_000), "50000");
        assert_eq!(mib(3 * 1_048_576 / 2), "1.5");
    }

    #[test]
    fn ticks_count_whole_seconds_only() {
        let s = Duration::from_secs_f64;
        let at = [0.5, 9.9, 10.0, 10.2, 10.999, 11.0, 12.5, 13.1, 99.0].map(s);
        // From 10 s to 13.5 s: three whole seconds; 9.9 is before, 13.1 in the partial fourth.
        assert_eq!(ticks(at, s(10.0), s(13.5)), vec![3, 1, 1]);
        assert!(ticks(at, s(5.0), s(5.9)).is_empty());
    }
}
