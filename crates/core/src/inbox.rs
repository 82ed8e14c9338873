//! Inbox mode: acknowledge at once, deliver later from a durable queue.
//!
//! A delivery to an inbox source is claimed and queued in **one atomic step**
//! ([`Inbox::enqueue`]): the record is written `done` at once (every later delivery of the event is
//! a [`ClaimOutcome::Duplicate`], whatever its dispatch state) and a [`QueuedItem`] holding the
//! body waits for the dispatcher. The dispatcher [`Inbox::take`]s due items under a lease (several
//! gateways share one queue; a crashed one's items are taken again when the lease lapses, or at
//! once when its instance boots again), delivers each, then
//! - [`Inbox::delivered`]: the item goes and history records `completed`, in one step;
//! - [`Inbox::retry_later`]: the attempt is logged and the item is due again after a delay;
//! - [`Inbox::dead_letter`]: the attempt is logged and the item is kept, dead, with its body and
//!   every attempt, until [`Inbox::purge_dead_letters`] (`dead_letter_retention`).
//!
//! [`Inbox::replay_dead_letters`] moves dead letters back to the queue with a fresh attempt
//! budget, recording `replayed` in history with its reason. Every time here is the store's
//! clock: an item's age, its due time and its lease are never the host's.
//!
//! A taken item is fenced by its id and attempt number: [`Inbox::take`] increments the attempt,
//! so a dispatcher whose lease lapsed and whose item was taken again gets
//! [`StoreError::StaleToken`] from `delivered`, `retry_later` and `dead_letter`. As with claims, a
//! dispatcher whose lease lapsed may still report while nobody took the item again.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::claim::{ClaimOutcome, ClaimRequest, Holder};
use crate::error::StoreError;
use crate::key::{EventId, Key, SourceName};
use crate::time::Timestamp;

/// What the dispatcher needs to deliver an event as the sender sent it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueuedItem {
    /// The body, byte for byte.
    pub body: Vec<u8>,
    /// The sender's `Content-Type`.
    pub content_type: Option<String>,
    /// Headers the downstream needs (name, value), in order.
    pub headers: Vec<(String, String)>,
}

/// An item the dispatcher took: deliver it, then report with its [`ItemRef`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// Which item, and which attempt of it (the fence).
    pub item: ItemRef,
    /// The event.
    pub key: Key,
    /// What to deliver.
    pub queued: QueuedItem,
    /// When the delivery was received and queued (the store's clock).
    pub received_at: Timestamp,
    /// Until when this dispatcher holds it.
    pub lease_until: Timestamp,
    /// Attempts in the current budget, this one included: 1 on the first take after the
    /// enqueue or a replay. The dispatcher dead-letters when it reaches `max_attempts`.
    pub tries: u32,
}

/// One taken attempt of one queue item: the item's id and the attempt number `take` gave it,
/// and its event (so that a report on an item already gone can still say which event it was
/// about, in [`StoreError::StaleToken`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ItemRef {
    /// The item's id, unique in its store.
    pub id: i64,
    /// The attempt, from 1; it grows with every take, replays included.
    pub attempt: u32,
    /// The item's event.
    pub key: Key,
}

/// One delivery attempt, as a dead letter keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptLog {
    /// The attempt number.
    pub attempt: u32,
    /// When it ended (the store's clock).
    pub at: Timestamp,
    /// The downstream's status, when it answered.
    pub status: Option<u16>,
    /// What went wrong, in words.
    pub error: String,
}

/// A dead letter: an item whose attempts ran out (`max_attempts`) or that grew too old
/// (`max_age`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The item's id.
    pub id: i64,
    /// The event.
    pub key: Key,
    /// What it would deliver.
    pub queued: QueuedItem,
    /// When it was received.
    pub received_at: Timestamp,
    /// When it died.
    pub dead_at: Timestamp,
    /// Every attempt, oldest first.
    pub attempts: Vec<AttemptLog>,
}

/// One source's queue, as [`Inbox::inbox_stats`] counts it (by the store's clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxStats {
    /// The source.
    pub source: SourceName,
    /// Items waiting (due now or later), not taken.
    pub pending: u64,
    /// Items taken under a live lease.
    pub in_flight: u64,
    /// Dead letters.
    pub dead: u64,
    /// Age of the oldest item not yet delivered (pending or in flight): the queue lag.
    pub oldest_pending: Option<Duration>,
    /// Items not yet delivered (pending or in flight, not dead) that failed at least once: the
    /// downstream is failing them, and they wait for a retry.
    pub failing: u64,
    /// The most recent failed attempt of any of the source's items still kept (waiting or
    /// dead); `None` when none of them failed.
    pub last_failure: Option<LastFailure>,
}

/// A source's most recent failed delivery attempt ([`InboxStats::last_failure`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastFailure {
    /// The event whose delivery failed.
    pub event_id: EventId,
    /// The attempt: when, the downstream's status, the error.
    pub attempt: AttemptLog,
}

/// One event's items in the queue, as [`Inbox::queued`] reads them (waiting, in flight or dead;
/// a delivered item is gone, and history's `completed` row says when).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// The item's id.
    pub id: i64,
    /// When it was queued (the store's clock).
    pub received_at: Timestamp,
    /// When it may next be taken (a retry's delay after its last attempt).
    pub due_at: Timestamp,
    /// Takes so far, replays included.
    pub attempt: u32,
    /// Until when a dispatcher holds it, while one does (by the store's clock at the read).
    pub in_flight_until: Option<Timestamp>,
    /// When it became a dead letter, if it is one.
    pub dead_at: Option<Timestamp>,
    /// Every failed attempt, oldest first.
    pub attempts: Vec<AttemptLog>,
}

/// Which dead letters [`Inbox::dead_letters`] lists and [`Inbox::replay_dead_letters`] moves
/// back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplayFilter {
    /// Only this source's (all sources when `None`).
    pub source: Option<SourceName>,
    /// Only those that died within this long before now (all when `None`).
    pub since: Option<Duration>,
    /// Only this event's: an event id is one source's, so with `source` (without it, nothing is
    /// selected).
    pub event_id: Option<EventId>,
}

impl ReplayFilter {
    /// Every dead letter of `source`, or of every source.
    pub fn source(source: Option<&SourceName>) -> Self {
        Self {
            source: source.cloned(),
            ..Self::default()
        }
    }

    /// Whether a dead letter of `key` that died at `dead_at` is selected, `now` being the
    /// store's clock.
    pub fn selects(&self, key: &Key, dead_at: Timestamp, now: Timestamp) -> bool {
        self.source.as_ref().is_none_or(|s| key.source == *s)
            && self
                .event_id
                .as_ref()
                .is_none_or(|e| self.source.is_some() && key.event_id == *e)
            && self.since.is_none_or(|d| dead_at >= now.minus(d))
    }
}

/// A store that keeps an inbox queue beside its claims.
pub trait Inbox: Send + Sync {
    /// Claims `req` (its `mode` is ignored: an inbox claim is done at once) and, when the claim
    /// is won, queues `item` in the same atomic step: either both are written or neither is. The
    /// answer is the claim's: [`ClaimOutcome::Claimed`] means queued (its token needs no
    /// completion); any other answer queued nothing.
    ///
    /// # Errors
    /// [`StoreError::Backend`]; nothing is written.
    fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// An operator's forced replay: queues `item` for `req.key` whatever its record says. The
    /// claim is made as [`Inbox::enqueue`] makes it (a live record answers `Duplicate` and stays
    /// as it is; an absent one is claimed, done at once), the item is queued either way, and
    /// history records `replayed` with `reason`, all in one step. Returns the claim's answer.
    ///
    /// # Errors
    /// [`StoreError::Backend`]; nothing is written.
    fn requeue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &str,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Takes up to `limit` of `source`'s due items (oldest first), each under a lease of `lease`
    /// and with its attempt number incremented; `holder` is recorded so that the holder's next
    /// boot frees them at once. An item whose lease lapsed is due again.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn take(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&Holder>,
    ) -> impl Future<Output = Result<Vec<Taken>, StoreError>> + Send;

    /// The downstream took the item: removes it and appends `completed` to the event's history,
    /// in one step.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when `item` is no longer this attempt (taken again, reported
    /// already, freed by its holder's next boot, replayed, gone); [`StoreError::Backend`]. A
    /// lapsed lease alone is not stale: the report is taken while nobody took the item again.
    fn delivered(&self, item: ItemRef) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The attempt failed: logs it and makes the item due again `delay` from now (the store's
    /// clock), no longer taken.
    ///
    /// # Errors
    /// As [`Inbox::delivered`].
    fn retry_later(
        &self,
        item: ItemRef,
        failure: &Failure,
        delay: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The attempt failed and the item may not be tried again: logs the attempt and keeps the
    /// item as a dead letter.
    ///
    /// # Errors
    /// As [`Inbox::delivered`].
    fn dead_letter(
        &self,
        item: ItemRef,
        failure: &Failure,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The dead letters `filter` selects, oldest death first, at most `limit`: what
    /// [`Inbox::replay_dead_letters`] would move with the same filter.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn dead_letters(
        &self,
        filter: &ReplayFilter,
        limit: NonZeroU32,
    ) -> impl Future<Output = Result<Vec<DeadLetter>, StoreError>> + Send;

    /// `key`'s items in the queue (waiting, in flight, or dead), oldest first, with every failed
    /// attempt: empty when the event was never queued or its items were delivered (history's
    /// `completed` row) or purged.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn queued(&self, key: &Key)
    -> impl Future<Output = Result<Vec<QueueEntry>, StoreError>> + Send;

    /// Moves the dead letters `filter` selects back to the queue, due now, with a fresh attempt
    /// budget (their attempt numbers go on growing), each recording `replayed` in history with
    /// `reason`. Returns how many moved.
    ///
    /// # Errors
    /// [`StoreError::Backend`]; a failure moves none of them.
    fn replay_dead_letters(
        &self,
        filter: &ReplayFilter,
        reason: &str,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes at most `batch` dead letters that died more than `retention` ago; returns how
    /// many.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Every source's queue that holds anything; [`InboxStats::failing`] and
    /// [`InboxStats::last_failure`] say what the downstream answered lately.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn inbox_stats(&self) -> impl Future<Output = Result<Vec<InboxStats>, StoreError>> + Send;
}

/// Why one delivery attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The downstream's status, when it answered.
    pub status: Option<u16>,
    /// What went wrong, in words (`downstream answered 503`, `timed out after 10s`).
    pub error: String,
}
