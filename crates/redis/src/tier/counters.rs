//! How the tier has fared: hits, misses, errors and bypasses.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) hits: AtomicU64,
    pub(super) misses: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) bypassed: AtomicU64,
}

/// How the tier has fared since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierCounters {
    /// Claims answered `Duplicate` from Redis, without the inner store.
    pub hits: u64,
    /// Claims Redis could not answer (no entry, a tombstone, a fingerprint it cannot vouch for).
    pub misses: u64,
    /// Redis commands that failed (each sent its claim to the inner store).
    pub errors: u64,
    /// Claims sent straight to the inner store because Redis failed moments before.
    pub bypassed: u64,
}

impl Counters {
    /// The counts so far.
    pub(super) fn snapshot(&self) -> TierCounters {
        TierCounters {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
        }
    }
}
