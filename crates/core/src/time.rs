//! Time as a store sees it.
//!
//! Expiry is decided by the store's clock: `now()` in SQL, the server's time in Redis, and for the
//! stores that run the rules in Rust (SQLite, in-memory) a [`Clock`] the store owns. Callers never
//! pass a time in.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating.
    pub fn plus(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// `self - d`, saturating.
    pub fn minus(self, d: Duration) -> Self {
        Self(
            self.0
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    pub fn to_system_time(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_millis(self.0 as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(self.0.unsigned_abs())
        }
    }

    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Self(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => Self(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

/// RFC 3339 with milliseconds, UTC: `2026-11-29T18:43:48.123Z`.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Stores never hold times before the epoch; clamp rather than fail to print one.
        let t = Timestamp(self.0.max(0)).to_system_time();
        fmt::Display::fmt(&humantime::format_rfc3339_millis(t), f)
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A duration printed in days, hours, minutes and seconds (`7d 10m`, `4h`, `1.5s` as `1500ms`),
/// the units config files use. Calendar units (months) are never used: a month has no fixed length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Human(pub Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.is_zero() {
            return f.write_str("0s");
        }
        let secs = d.as_secs();
        let millis = d.subsec_millis();
        let parts = [
            (secs / 86_400, "d"),
            (secs / 3_600 % 24, "h"),
            (secs / 60 % 60, "m"),
            (secs % 60, "s"),
        ];
        let mut out = Vec::new();
        for (n, unit) in parts {
            if n > 0 {
                out.push(format!("{n}{unit}"));
            }
        }
        if millis > 0 {
            out.push(format!("{millis}ms"));
        }
        if out.is_empty() {
            out.push(format!("{}us", d.as_micros()));
        }
        f.write_str(&out.join(" "))
    }
}

/// The time source of a store.
pub trait Clock: Send + Sync + fmt::Debug {
    fn now(&self) -> Timestamp;
}

/// The host's wall clock: what an embedded store (SQLite, in-memory) owns.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }
}

/// A clock that moves only when told to. Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        Self(Arc::new(AtomicI64::new(start.as_millis())))
    }

    /// Starts at the host's current time.
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now())
    }

    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(
            i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Ordering::SeqCst,
        );
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339() {
        assert_eq!(
            Timestamp::from_millis(1_764_441_828_123).to_string(),
            "2025-11-29T18:43:48.123Z"
        );
    }

    #[test]
    fn human_durations() {
        let h = |s: u64| Human(Duration::from_secs(s)).to_string();
        assert_eq!(h(7 * 86_400 + 600), "7d 10m");
        assert_eq!(h(90 * 86_400), "90d");
        assert_eq!(h(4 * 3_600), "4h");
        assert_eq!(h(0), "0s");
        assert_eq!(Human(Duration::from_millis(1_500)).to_string(), "1s 500ms");
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Timestamp::from_millis(1_000);
        assert_eq!(t.plus(Duration::from_secs(1)).as_millis(), 2_000);
        assert_eq!(t.since(Timestamp::from_millis(4_000)), Duration::ZERO);
        assert_eq!(
            Timestamp::from_millis(i64::MAX - 1)
                .plus(Duration::MAX)
                .as_millis(),
            i64::MAX
        );
    }
}
