//! One clock for the whole run: every time in a verdict is microseconds since the run started,
//! read from the same monotonic clock by the senders, the downstream and the fault injectors.

use std::time::{Duration, Instant, SystemTime};

#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    pub fn start() -> Self {
        Self(Instant::now())
    }

    /// Microseconds since the run started.
    pub fn now(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }

    /// `now()` plus `d`.
    pub fn after(&self, d: Duration) -> u64 {
        self.now() + d.as_micros() as u64
    }

    /// A wall-clock time (a broker's stored time, a log line's) as a run time: this machine's
    /// wall clock read against the run clock now (0 for a time before the run started).
    pub fn at_wall(&self, at: SystemTime) -> u64 {
        let (now, wall) = (self.now(), SystemTime::now());
        match wall.duration_since(at) {
            Ok(ago) => now.saturating_sub(ago.as_micros() as u64),
            Err(ahead) => now + ahead.duration().as_micros() as u64,
        }
    }
}

/// A run time (or a span) in milliseconds, for the tables.
pub fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

/// A signed difference `a - b` of run times, in milliseconds.
pub fn delta_ms(a: u64, b: u64) -> String {
    format!("{:+.1} ms", (a as f64 - b as f64) / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_times_map_onto_the_run_clock() {
        let clock = Clock::start();
        std::thread::sleep(Duration::from_millis(20));
        let now = clock.now();
        let ago = clock.at_wall(SystemTime::now() - Duration::from_millis(10));
        assert!(
            ago + 10_000 <= now + 5_000 && ago + 10_000 + 5_000 >= now,
            "{ago} {now}"
        );
        let ahead = clock.at_wall(SystemTime::now() + Duration::from_secs(1));
        assert!(ahead >= now + 990_000, "{ahead} {now}");
        assert_eq!(clock.at_wall(SystemTime::UNIX_EPOCH), 0);
    }
}
