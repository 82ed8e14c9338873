//! [`WriteHealth`]: what the store's recent writes said, for health checks and for how long a
//! claim waits.
//!
//! A store can answer reads and fail every write (a full disk, a database in read-only
//! recovery, a blackholed connection pool whose idle connections still look open): a health
//! check that only reads would call it healthy while every delivery gets 503. So every write
//! the library makes (claims, completions, releases, and what a caller notes itself, such as an
//! inbox's enqueue) is noted here: one that failed in the engine makes the store *failing* until
//! a write succeeds again.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use idemgate_core::StoreError;

use crate::ErrorChain;

/// The store's write health. Cheap on success (one atomic load).
#[derive(Debug, Default)]
pub struct WriteHealth {
    failing: AtomicBool,
    since: Mutex<Option<Failing>>,
}

/// Since when the store's writes fail, how many did, and the last one's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// The first failed write of this spell, by the host's clock (for people, not expiry).
    pub since: SystemTime,
    /// Failed writes since then.
    pub failures: u64,
    /// The last failure, with its causes.
    pub error: String,
}

impl std::fmt::Display for Failing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ago = self.since.elapsed().unwrap_or_default();
        write!(
            f,
            "its writes fail ({} since {} ago): {}",
            self.failures,
            idemgate_core::Human(Duration::from_secs(ago.as_secs())),
            self.error
        )
    }
}

impl WriteHealth {
    /// Notes a write's result: an engine failure (or no answer in time) makes the store failing;
    /// a success, healthy. Answers that are the caller's own business (a stale token, a live
    /// instance) say nothing of the store.
    pub fn note<T>(&self, result: &Result<T, StoreError>) {
        match result {
            // A result refused as too large: the completion itself was written.
            Ok(_) | Err(StoreError::ResultTooLarge { .. }) => {
                if self.failing.load(Ordering::Relaxed) {
                    self.recovered();
                }
            }
            Err(e @ (StoreError::Backend { .. } | StoreError::Closed)) => self.failed(e),
            Err(_) => {}
        }
    }

    /// Whether the last write the store was asked failed.
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// The current failing spell, if any.
    pub fn failing(&self) -> Option<Failing> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Failing>> {
        self.since.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn failed(&self, e: &StoreError) {
        let error = ErrorChain(e).to_string();
        let mut spell = self.lock();
        match spell.as_mut() {
            Some(f) => {
                f.failures += 1;
                f.error = error;
            }
            None => {
                tracing::error!(error = %error, "a write to the store failed: the store is failing until one succeeds");
                *spell = Some(Failing {
                    since: SystemTime::now(),
                    failures: 1,
                    error,
                });
            }
        }
        self.failing.store(true, Ordering::Relaxed);
    }

    fn recovered(&self) {
        let mut spell = self.lock();
        if let Some(f) = spell.take() {
            tracing::info!(failures = f.failures, "the store takes writes again");
        }
        self.failing.store(false, Ordering::Relaxed);
    }
}

/// The store gave no answer in time.
#[derive(Debug, thiserror::Error)]
#[error("no answer in time (the store is slow or out of reach)")]
pub struct NoAnswer;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_makes_the_store_failing_until_one_succeeds() {
        let h = WriteHealth::default();
        assert!(!h.is_failing() && h.failing().is_none());
        h.note::<()>(&Ok(()));
        assert!(!h.is_failing());
        h.note::<()>(&Err(StoreError::backend("committing", "disk full")));
        h.note::<()>(&Err(StoreError::backend("committing", "disk still full")));
        let f = h.failing().unwrap();
        assert_eq!(f.failures, 2);
        assert!(f.error.contains("disk still full"), "{}", f.error);
        assert!(h.is_failing());
        // A caller's own business says nothing of the store.
        h.note::<()>(&Err(StoreError::StaleToken {
            key: idemgate_core::Key::parse("s", "e").unwrap(),
            attempt: 1,
        }));
        assert!(h.is_failing());
        h.note(&Ok(1));
        assert!(!h.is_failing() && h.failing().is_none());
    }
}
