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

    /// How far the host's wall clock is ahead of this clock (negative: behind), for a clock that
    /// keeps its own time apart from the wall clock ([`SteadyClock`]); `None` for one that is the
    /// wall clock or set by hand. A wall-clock step shows here as a jump.
    fn wall_divergence(&self) -> Option<Duration> {
        None
    }

    /// Like [`Clock::wall_divergence`], with its sign: wall minus this clock, in milliseconds.
    fn wall_divergence_ms(&self) -> Option<i64> {
        None
    }
}

/// The host's wall clock, read as it is: steps and all. Stores use [`SteadyClock`]; this is for
/// tools that only print a time.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }
}

/// The clock of an embedded store (SQLite, in-memory): the wall clock as it was when the clock
/// was made, carried forward by the monotonic clock, so a step of the host's wall clock (an
/// operator's `date -s`, an NTP step after a pause) moves no lease and no expiry of a running
/// process. A lease this process holds cannot lapse early because the wall clock jumped ahead,
/// nor last longer because it jumped back.
///
/// It follows the wall clock only slowly: by at most 1% of the time that passes (36 s an hour),
/// so it never runs backwards and never faster than 1.01x, while a stepped wall clock is caught
/// up in the end (a two-minute step in 200 minutes). [`Clock::wall_divergence_ms`] says how far
/// apart the two are; the store logs a step when it sees one.
///
/// A restarted process starts from the wall clock again: records written before a step that the
/// clock had not yet caught up with then expire early or late by what was left of the step.
#[derive(Debug)]
pub struct SteadyClock {
    wall: fn() -> SystemTime,
    state: std::sync::Mutex<Steady>,
}

#[derive(Debug)]
struct Steady {
    /// The monotonic instant of the last reading, and the time this clock gave then (µs).
    at: std::time::Instant,
    micros: i64,
}

/// How much of the time that passes the clock may move towards the wall clock: 1/100.
const SLEW_DIVISOR: i64 = 100;

impl SteadyClock {
    /// Starts at the host's wall clock.
    pub fn new() -> Self {
        Self::with_wall(SystemTime::now)
    }

    /// Starts at `wall()` and follows it as [`SteadyClock`] does (a test gives a wall clock it
    /// can step).
    pub fn with_wall(wall: fn() -> SystemTime) -> Self {
        let micros = micros_of(wall());
        Self {
            wall,
            state: std::sync::Mutex::new(Steady {
                at: std::time::Instant::now(),
                micros,
            }),
        }
    }

    /// The clock's reading and the wall clock's, in µs, moving the clock forward first.
    fn read(&self) -> (i64, i64) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let wall = micros_of((self.wall)());
        let elapsed =
            i64::try_from(now.saturating_duration_since(st.at).as_micros()).unwrap_or(i64::MAX);
        let steady = st.micros.saturating_add(elapsed);
        // Towards the wall clock by at most a hundredth of the time elapsed: never backwards.
        let room = elapsed / SLEW_DIVISOR;
        let correction = wall.saturating_sub(steady).clamp(-room, room);
        st.micros = steady.saturating_add(correction);
        st.at = now;
        (st.micros, wall)
    }
}

impl Default for SteadyClock {
    fn default() -> Self {
        Self::new()
    }
}

fn micros_of(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX),
    }
}

impl Clock for SteadyClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.read().0.div_euclid(1_000))
    }

    fn wall_divergence(&self) -> Option<Duration> {
        self.wall_divergence_ms()
            .map(|ms| Duration::from_millis(ms.unsigned_abs()))
    }

    fn wall_divergence_ms(&self) -> Option<i64> {
        let (steady, wall) = self.read();
        Some(wall.saturating_sub(steady).div_euclid(1_000))
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

    /// A wall clock the test steps: an offset in seconds from the real one.
    static STEP_S: AtomicI64 = AtomicI64::new(0);

    fn stepped_wall() -> SystemTime {
        let step = STEP_S.load(Ordering::SeqCst);
        if step >= 0 {
            SystemTime::now() + Duration::from_secs(step as u64)
        } else {
            SystemTime::now() - Duration::from_secs(step.unsigned_abs())
        }
    }

    #[test]
    fn the_steady_clock_rides_out_wall_clock_steps() {
        let clock = SteadyClock::with_wall(stepped_wall);
        let start = clock.now();
        assert!(clock.wall_divergence_ms().unwrap().abs() < 50);
        // Two minutes ahead: the clock does not jump, and says how far the wall clock is.
        STEP_S.store(120, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(200));
        let later = clock.now();
        let moved = later.since(start);
        assert!(
            moved >= Duration::from_millis(195) && moved < Duration::from_millis(300),
            "moved {moved:?}"
        );
        let ahead = clock.wall_divergence_ms().unwrap();
        assert!((119_000..=120_050).contains(&ahead), "{ahead}");
        // Back five minutes: the clock never goes backwards.
        STEP_S.store(-180, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        let after = clock.now();
        assert!(after >= later, "{after:?} < {later:?}");
        assert!(after.since(later) >= Duration::from_millis(95));
        let behind = clock.wall_divergence_ms().unwrap();
        assert!((-180_050..=-179_000).contains(&behind), "{behind}");
        STEP_S.store(0, Ordering::SeqCst);
    }

    #[test]
    fn the_steady_clock_catches_up_with_the_wall_at_a_hundredth_of_the_time() {
        fn ahead() -> SystemTime {
            SystemTime::now() + Duration::from_secs(60)
        }
        let clock = SteadyClock::with_wall(SystemTime::now);
        // Made on the real wall clock, then read against one a minute ahead.
        let clock = SteadyClock {
            wall: ahead,
            state: clock.state,
        };
        let before = clock.wall_divergence_ms().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let after = clock.wall_divergence_ms().unwrap();
        // 500 ms passed: the clock gained at most 5 ms on the wall (and at least some).
        let gained = before - after;
        assert!((1..=6).contains(&gained), "gained {gained} ms");
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
