//! One clock for the whole run: every time in a verdict is microseconds since the run started,
//! read from the same monotonic clock by the senders, the downstream and the fault injectors.

use std::time::{Duration, Instant};

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
}

/// A run time (or a span) in milliseconds, for the tables.
pub fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

/// A signed difference `a - b` of run times, in milliseconds.
pub fn delta_ms(a: u64, b: u64) -> String {
    format!("{:+.1} ms", (a as f64 - b as f64) / 1000.0)
}
