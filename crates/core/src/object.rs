//! Stores as objects: [`Store`], one object-safe trait every store is through a blanket
//! implementation, so a caller can hold any store (an engine of this workspace, a Redis tier over
//! one, or a store of its own) as an `Arc<dyn Store>`.
//!
//! A store implements the static traits ([`ClaimStore`], [`Identity`], and whichever of
//! [`Instances`], [`Sweep`], [`HistoryQuery`] + [`HistoryRetention`], [`Stats`], [`Timeline`],
//! [`HistoryExport`] and [`Inbox`] it has) and says which it has in one [`Capabilities`]
//! implementation: each capability is asked for explicitly (`store.inbox()`), and `None` means
//! the store does not have it, never an empty answer.
//!
//! Each static trait has an object-safe twin here (`DynInbox` for [`Inbox`], ...), implemented
//! once for every store that implements the static trait: adding a method to a store trait is
//! one edit to the trait, one to its twin, and one per engine.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::time::Duration;

use crate::advise::Observation;
use crate::claim::{ClaimOutcome, ClaimRequest, ClaimToken, EventView, Holder, Record};
use crate::inbox::{
    DeadLetter, Failure, Inbox, InboxStats, ItemRef, QueueEntry, QueuedItem, ReplayFilter, Taken,
};
use crate::key::{Key, SourceName};
use crate::result::{RecordResult, StoredResult};
use crate::store::{
    Boot, BootRequest, ClaimStore, HistoryCursor, HistoryDays, HistoryExport, HistoryQuery,
    HistoryRetention, HistoryRow, Identity, Instances, Recent, RetentionUnit, Stats, StoreError,
    StoreStats, Timeline, TimelineCounts,
};
use crate::sweep::{SweepOptions, SweepReport};
use crate::time::{Clock, Timestamp};
use crate::{Sweep, sweep};

/// A boxed future that may be sent between threads: what the object-safe traits answer.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A pause between sweep batches, boxed: `false` stops the run ([`Sweep::sweep_run`]'s).
pub type BoxPause<'a> = Box<dyn FnMut(Duration) -> BoxFuture<'a, bool> + Send + 'a>;

/// Which capabilities a store has, and what describes it. Every method but
/// [`engine`](Self::engine) has a default: a store without a capability leaves it out.
pub trait Capabilities {
    /// The engine's name, for logs, `/healthz` and metrics (`sqlite`, `postgres+redis`, ...).
    fn engine(&self) -> &'static str;

    /// Instances and their boots ([`Instances`]).
    fn instances(&self) -> Option<&dyn DynInstances> {
        None
    }

    /// Deleting expired records in bounded batches ([`Sweep`]); `None` for a store that expires
    /// records by itself (Redis).
    fn sweep(&self) -> Option<&dyn DynSweep> {
        None
    }

    /// History: the advisor's observations and retention ([`HistoryQuery`],
    /// [`HistoryRetention`]).
    fn history(&self) -> Option<&dyn DynHistory> {
        None
    }

    /// What the store holds ([`Stats`]).
    fn stats(&self) -> Option<&dyn DynStats> {
        None
    }

    /// Whether [`stats`](Self::stats) is cheap enough for every `/metrics` scrape.
    fn counts_cheaply(&self) -> bool {
        true
    }

    /// Deliveries over time and the latest history rows ([`Timeline`]).
    fn timeline(&self) -> Option<&dyn DynTimeline> {
        None
    }

    /// History by day, for the archive ([`HistoryExport`]).
    fn export(&self) -> Option<&dyn DynHistoryExport> {
        None
    }

    /// Inbox mode's queue ([`Inbox`]).
    fn inbox(&self) -> Option<&dyn DynInbox> {
        None
    }

    /// The store's own clock, for the embedded stores that keep one (on a server's clock:
    /// `None`).
    fn clock(&self) -> Option<&dyn Clock> {
        None
    }

    /// The schema's version now and the newest this build knows, for the stores with a schema.
    fn schema_version(&self) -> BoxFuture<'_, Result<Option<(i64, i64)>, StoreError>> {
        Box::pin(async { Ok(None) })
    }
}

/// Any store, as an object: claims ([`ClaimStore`]), its identity ([`Identity`]) and its
/// [`Capabilities`]. Implemented for every type that implements those three.
pub trait Store: Capabilities + Send + Sync + fmt::Debug + 'static {
    /// [`ClaimStore::claim`].
    fn claim(&self, req: ClaimRequest) -> BoxFuture<'_, Result<ClaimOutcome, StoreError>>;
    /// [`ClaimStore::complete`].
    fn complete<'a>(&'a self, token: &'a ClaimToken) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`ClaimStore::complete_keeping`].
    fn complete_keeping<'a>(
        &'a self,
        token: &'a ClaimToken,
        result: RecordResult,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`ClaimStore::complete_with`]: the same size check, then
    /// [`complete_keeping`](Self::complete_keeping).
    fn complete_with<'a>(
        &'a self,
        token: &'a ClaimToken,
        result: &StoredResult,
        limit: usize,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (kept, answer) = result.judge(&token.key, limit);
        Box::pin(async move {
            self.complete_keeping(token, kept).await?;
            answer
        })
    }
    /// [`ClaimStore::release`].
    fn release<'a>(&'a self, token: &'a ClaimToken) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`ClaimStore::renew`].
    fn renew<'a>(
        &'a self,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Timestamp, StoreError>>;
    /// [`ClaimStore::lookup`].
    fn lookup<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<EventView, StoreError>>;
    /// [`ClaimStore::record`].
    fn record<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>, StoreError>>;
    /// [`Identity::store_id`].
    fn store_id(&self) -> &str;
}

impl<T> Store for T
where
    T: ClaimStore + Identity + Capabilities + fmt::Debug + 'static,
{
    fn claim(&self, req: ClaimRequest) -> BoxFuture<'_, Result<ClaimOutcome, StoreError>> {
        Box::pin(ClaimStore::claim(self, req))
    }
    fn complete<'a>(&'a self, token: &'a ClaimToken) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(ClaimStore::complete(self, token))
    }
    fn complete_keeping<'a>(
        &'a self,
        token: &'a ClaimToken,
        result: RecordResult,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(ClaimStore::complete_keeping(self, token, result))
    }
    fn release<'a>(&'a self, token: &'a ClaimToken) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(ClaimStore::release(self, token))
    }
    fn renew<'a>(
        &'a self,
        token: &'a ClaimToken,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Timestamp, StoreError>> {
        Box::pin(ClaimStore::renew(self, token, lease))
    }
    fn lookup<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<EventView, StoreError>> {
        Box::pin(ClaimStore::lookup(self, key))
    }
    fn record<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(ClaimStore::record(self, key))
    }
    fn store_id(&self) -> &str {
        Identity::store_id(self)
    }
}

/// [`Instances`], object-safe.
pub trait DynInstances: Send + Sync {
    /// [`Instances::register_boot`].
    fn register_boot<'a>(&'a self, req: &'a BootRequest)
    -> BoxFuture<'a, Result<Boot, StoreError>>;
    /// [`Instances::heartbeat`].
    fn heartbeat<'a>(
        &'a self,
        holder: &'a Holder,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Timestamp, StoreError>>;
    /// [`Instances::end_boot`].
    fn end_boot<'a>(&'a self, holder: &'a Holder) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<T: Instances> DynInstances for T {
    fn register_boot<'a>(
        &'a self,
        req: &'a BootRequest,
    ) -> BoxFuture<'a, Result<Boot, StoreError>> {
        Box::pin(Instances::register_boot(self, req))
    }
    fn heartbeat<'a>(
        &'a self,
        holder: &'a Holder,
        lease: Duration,
    ) -> BoxFuture<'a, Result<Timestamp, StoreError>> {
        Box::pin(Instances::heartbeat(self, holder, lease))
    }
    fn end_boot<'a>(&'a self, holder: &'a Holder) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Instances::end_boot(self, holder))
    }
}

/// [`Sweep`], object-safe.
pub trait DynSweep: Send + Sync {
    /// [`Sweep::sweep_expired`].
    fn sweep_expired(&self, batch: NonZeroU32) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// [`Sweep::sweep_run`], with the pause and the batch callback boxed.
    fn sweep_run<'a>(
        &'a self,
        opts: SweepOptions,
        pause: BoxPause<'a>,
        on_batch: Box<dyn FnMut(u64) + Send + 'a>,
    ) -> BoxFuture<'a, Result<SweepReport, StoreError>>;
    /// [`Sweep::claim_latency`].
    fn claim_latency(&self) -> Option<&sweep::ClaimLatency>;
}

impl<T: Sweep> DynSweep for T {
    fn sweep_expired(&self, batch: NonZeroU32) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(Sweep::sweep_expired(self, batch))
    }
    fn sweep_run<'a>(
        &'a self,
        opts: SweepOptions,
        pause: BoxPause<'a>,
        on_batch: Box<dyn FnMut(u64) + Send + 'a>,
    ) -> BoxFuture<'a, Result<SweepReport, StoreError>> {
        Box::pin(Sweep::sweep_run(self, opts, pause, on_batch))
    }
    fn claim_latency(&self) -> Option<&sweep::ClaimLatency> {
        Sweep::claim_latency(self)
    }
}

/// [`HistoryQuery`] and [`HistoryRetention`], object-safe.
pub trait DynHistory: Send + Sync {
    /// [`HistoryQuery::observe`].
    fn observe(&self, period: Duration) -> BoxFuture<'_, Result<Vec<Observation>, StoreError>>;
    /// [`HistoryQuery::has_source`].
    fn has_source<'a>(&'a self, source: &'a SourceName) -> BoxFuture<'a, Result<bool, StoreError>>;
    /// [`HistoryRetention::purge_history`].
    fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> BoxFuture<'_, Result<u64, StoreError>>;
}

impl<T: HistoryQuery + HistoryRetention> DynHistory for T {
    fn observe(&self, period: Duration) -> BoxFuture<'_, Result<Vec<Observation>, StoreError>> {
        Box::pin(HistoryQuery::observe(self, period))
    }
    fn has_source<'a>(&'a self, source: &'a SourceName) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(HistoryQuery::has_source(self, source))
    }
    fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(HistoryRetention::purge_history(self, retention, batch))
    }
}

/// [`Stats`], object-safe.
pub trait DynStats: Send + Sync {
    /// [`Stats::stats`].
    fn stats(&self) -> BoxFuture<'_, Result<StoreStats, StoreError>>;
}

impl<T: Stats> DynStats for T {
    fn stats(&self) -> BoxFuture<'_, Result<StoreStats, StoreError>> {
        Box::pin(Stats::stats(self))
    }
}

/// [`Timeline`], object-safe.
pub trait DynTimeline: Send + Sync {
    /// [`Timeline::recent`].
    fn recent<'a>(
        &'a self,
        source: &'a SourceName,
        limit: NonZeroU32,
    ) -> BoxFuture<'a, Result<Vec<Recent>, StoreError>>;
    /// [`Timeline::timeline`].
    fn timeline<'a>(
        &'a self,
        source: &'a SourceName,
        bucket_secs: NonZeroU32,
        buckets: NonZeroU32,
    ) -> BoxFuture<'a, Result<TimelineCounts, StoreError>>;
}

impl<T: Timeline> DynTimeline for T {
    fn recent<'a>(
        &'a self,
        source: &'a SourceName,
        limit: NonZeroU32,
    ) -> BoxFuture<'a, Result<Vec<Recent>, StoreError>> {
        Box::pin(Timeline::recent(self, source, limit))
    }
    fn timeline<'a>(
        &'a self,
        source: &'a SourceName,
        bucket_secs: NonZeroU32,
        buckets: NonZeroU32,
    ) -> BoxFuture<'a, Result<TimelineCounts, StoreError>> {
        Box::pin(Timeline::timeline(self, source, bucket_secs, buckets))
    }
}

/// [`HistoryExport`], object-safe.
pub trait DynHistoryExport: Send + Sync {
    /// [`HistoryExport::history_days`].
    fn history_days<'a>(
        &'a self,
        source: Option<&'a SourceName>,
        since: Timestamp,
        until: Timestamp,
    ) -> BoxFuture<'a, Result<HistoryDays, StoreError>>;
    /// [`HistoryExport::history_rows`].
    fn history_rows<'a>(
        &'a self,
        source: &'a SourceName,
        from: Timestamp,
        until: Timestamp,
        after: Option<HistoryCursor>,
        limit: NonZeroU32,
    ) -> BoxFuture<'a, Result<Vec<HistoryRow>, StoreError>>;
    /// [`HistoryExport::history_past`].
    fn history_past(
        &self,
        retention: Duration,
    ) -> BoxFuture<'_, Result<Vec<RetentionUnit>, StoreError>>;
    /// [`HistoryExport::drop_history`].
    fn drop_history<'a>(
        &'a self,
        unit: &'a RetentionUnit,
        retention: Duration,
        batch: NonZeroU32,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
}

impl<T: HistoryExport> DynHistoryExport for T {
    fn history_days<'a>(
        &'a self,
        source: Option<&'a SourceName>,
        since: Timestamp,
        until: Timestamp,
    ) -> BoxFuture<'a, Result<HistoryDays, StoreError>> {
        Box::pin(HistoryExport::history_days(self, source, since, until))
    }
    fn history_rows<'a>(
        &'a self,
        source: &'a SourceName,
        from: Timestamp,
        until: Timestamp,
        after: Option<HistoryCursor>,
        limit: NonZeroU32,
    ) -> BoxFuture<'a, Result<Vec<HistoryRow>, StoreError>> {
        Box::pin(HistoryExport::history_rows(
            self, source, from, until, after, limit,
        ))
    }
    fn history_past(
        &self,
        retention: Duration,
    ) -> BoxFuture<'_, Result<Vec<RetentionUnit>, StoreError>> {
        Box::pin(HistoryExport::history_past(self, retention))
    }
    fn drop_history<'a>(
        &'a self,
        unit: &'a RetentionUnit,
        retention: Duration,
        batch: NonZeroU32,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(HistoryExport::drop_history(self, unit, retention, batch))
    }
}

/// [`Inbox`], object-safe.
pub trait DynInbox: Send + Sync {
    /// [`Inbox::enqueue`].
    fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> BoxFuture<'_, Result<ClaimOutcome, StoreError>>;
    /// [`Inbox::requeue`].
    fn requeue<'a>(
        &'a self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<ClaimOutcome, StoreError>>;
    /// [`Inbox::take`].
    fn take<'a>(
        &'a self,
        source: &'a SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&'a Holder>,
    ) -> BoxFuture<'a, Result<Vec<Taken>, StoreError>>;
    /// [`Inbox::delivered`].
    fn delivered(&self, item: ItemRef) -> BoxFuture<'_, Result<(), StoreError>>;
    /// [`Inbox::retry_later`].
    fn retry_later<'a>(
        &'a self,
        item: ItemRef,
        failure: &'a Failure,
        delay: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`Inbox::dead_letter`].
    fn dead_letter<'a>(
        &'a self,
        item: ItemRef,
        failure: &'a Failure,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// [`Inbox::dead_letters`].
    fn dead_letters<'a>(
        &'a self,
        filter: &'a ReplayFilter,
        limit: NonZeroU32,
    ) -> BoxFuture<'a, Result<Vec<DeadLetter>, StoreError>>;
    /// [`Inbox::queued`].
    fn queued<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Vec<QueueEntry>, StoreError>>;
    /// [`Inbox::replay_dead_letters`].
    fn replay_dead_letters<'a>(
        &'a self,
        filter: &'a ReplayFilter,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
    /// [`Inbox::purge_dead_letters`].
    fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> BoxFuture<'_, Result<u64, StoreError>>;
    /// [`Inbox::inbox_stats`].
    fn inbox_stats(&self) -> BoxFuture<'_, Result<Vec<InboxStats>, StoreError>>;
}

impl<T: Inbox> DynInbox for T {
    fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> BoxFuture<'_, Result<ClaimOutcome, StoreError>> {
        Box::pin(Inbox::enqueue(self, req, item))
    }
    fn requeue<'a>(
        &'a self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<ClaimOutcome, StoreError>> {
        Box::pin(Inbox::requeue(self, req, item, reason))
    }
    fn take<'a>(
        &'a self,
        source: &'a SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&'a Holder>,
    ) -> BoxFuture<'a, Result<Vec<Taken>, StoreError>> {
        Box::pin(Inbox::take(self, source, limit, lease, holder))
    }
    fn delivered(&self, item: ItemRef) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(Inbox::delivered(self, item))
    }
    fn retry_later<'a>(
        &'a self,
        item: ItemRef,
        failure: &'a Failure,
        delay: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Inbox::retry_later(self, item, failure, delay))
    }
    fn dead_letter<'a>(
        &'a self,
        item: ItemRef,
        failure: &'a Failure,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Inbox::dead_letter(self, item, failure))
    }
    fn dead_letters<'a>(
        &'a self,
        filter: &'a ReplayFilter,
        limit: NonZeroU32,
    ) -> BoxFuture<'a, Result<Vec<DeadLetter>, StoreError>> {
        Box::pin(Inbox::dead_letters(self, filter, limit))
    }
    fn queued<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, Result<Vec<QueueEntry>, StoreError>> {
        Box::pin(Inbox::queued(self, key))
    }
    fn replay_dead_letters<'a>(
        &'a self,
        filter: &'a ReplayFilter,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(Inbox::replay_dead_letters(self, filter, reason))
    }
    fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(Inbox::purge_dead_letters(self, retention, batch))
    }
    fn inbox_stats(&self) -> BoxFuture<'_, Result<Vec<InboxStats>, StoreError>> {
        Box::pin(Inbox::inbox_stats(self))
    }
}
