//! The store traits.
//!
//! [`ClaimStore`] is the claim state machine every engine implements. [`Sweep`] (removing expired
//! records) and [`Stats`] are separate: an engine implements them where they make sense (Redis
//! expires keys itself and needs no sweeper).
//!
//! All traits use native `async fn` in traits with `Send` futures; where the engine is chosen at
//! run time, callers wrap the engines in an enum.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::claim::{ClaimOutcome, ClaimRequest, ClaimToken, EventView};
use crate::key::{Key, SourceName};
use crate::time::Timestamp;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `complete` or `release` with a token that no longer holds the claim: the lease was taken
    /// over, the claim was released, or the record expired.
    #[error(
        "stale claim token for {key} (attempt {attempt}): the claim was taken over, released or expired"
    )]
    StaleToken { key: Key, attempt: u32 },
    /// The data on disk was written by a newer idemgate.
    #[error(
        "the store was migrated by a newer idemgate (schema version {found}, this build knows up to {known}); upgrade idemgate"
    )]
    NewerSchema { found: i64, known: i64 },
    /// The store is closed or shutting down.
    #[error("the store is closed")]
    Closed,
    /// The engine failed; `context` says what idemgate was doing.
    #[error("{context}")]
    Backend {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// Wraps an engine error with what was being done.
    pub fn backend(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Backend {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// The claim state machine (see [`crate::machine`] for the rules).
///
/// Every operation is atomic, uses the store's own clock, and treats an expired record as absent.
/// Every outcome appends one history row in the same atomic step.
pub trait ClaimStore: Send + Sync {
    /// Claims `req.key`. Durable before it returns [`ClaimOutcome::Claimed`].
    ///
    /// # Errors
    /// [`StoreError::Backend`] or [`StoreError::Closed`]; the claim then did not happen.
    fn claim(
        &self,
        req: ClaimRequest,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Marks the claim `done`; it stays until it expires. Completing twice is not an error.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when `token` no longer holds the claim.
    fn complete(&self, token: &ClaimToken) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Gives the claim up (processing failed): deletes the record so the next delivery is
    /// processed.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when `token` no longer holds the claim.
    fn release(&self, token: &ClaimToken) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The live record (none if absent or expired) and the history of one event.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn lookup(&self, key: &Key) -> impl Future<Output = Result<EventView, StoreError>> + Send;
}

/// Removing expired records in bounded batches.
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
}

/// Asking history: what the TTL advisor reads, and history's own retention.
pub trait HistoryQuery: Send + Sync {
    /// Every source's deliveries, gaps and late duplicates over the last `period` (by the store's
    /// clock). `live_rows` is left at zero: [`Stats`] counts those.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn observe(
        &self,
        period: Duration,
    ) -> impl Future<Output = Result<Vec<crate::advise::Observation>, StoreError>> + Send;

    /// Deletes at most `batch` history rows older than `retention` (by the store's clock) and
    /// returns how many. Dedup records are never touched. Stores that drop whole partitions
    /// instead return 0.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// What a store holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Records not yet expired.
    pub live: u64,
    /// Records expired but not yet swept.
    pub expired: u64,
    /// First receipt of the oldest record still stored.
    pub oldest: Option<Timestamp>,
    pub per_source: Vec<SourceStats>,
    /// Bytes on disk (or in memory), where the engine can tell.
    pub size_bytes: Option<u64>,
    /// History rows.
    pub history_rows: u64,
}

/// One source's share of [`StoreStats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStats {
    pub source: SourceName,
    pub live: u64,
    pub expired: u64,
    pub oldest: Option<Timestamp>,
}

/// Counting what a store holds.
pub trait Stats: Send + Sync {
    /// # Errors
    /// [`StoreError::Backend`].
    fn stats(&self) -> impl Future<Output = Result<StoreStats, StoreError>> + Send;
}
