//! Logging at most once a period, per instance (no global state).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Says whether to log now, at most once per `every`, and how many were held back meanwhile.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    start: Instant,
    every_ms: u64,
    /// Milliseconds since `start` before which nothing is logged.
    next_ms: AtomicU64,
    held_back: AtomicU64,
}

impl LogLimiter {
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            start: Instant::now(),
            every_ms: u64::try_from(every.as_millis()).unwrap_or(u64::MAX),
            next_ms: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when the caller should log now (`n` messages were held back since the last
    /// one), `None` when it should stay quiet.
    pub(crate) fn check(&self) -> Option<u64> {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next
            && self
                .next_ms
                .compare_exchange(
                    next,
                    now.saturating_add(self.every_ms),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            return Some(self.held_back.swap(0, Ordering::Relaxed));
        }
        self.held_back.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_period() {
        let l = LogLimiter::new(Duration::from_secs(60));
        assert_eq!(l.check(), Some(0));
        assert_eq!(l.check(), None);
        assert_eq!(l.check(), None);
        let l = LogLimiter::new(Duration::ZERO);
        assert_eq!(l.check(), Some(0));
        assert_eq!(l.check(), Some(0));
    }
}
