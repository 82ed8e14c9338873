//! The store traits.
//!
//! [`ClaimStore`] is the claim state machine every engine implements. [`Sweep`] (removing expired
//! records), [`Stats`] and [`Timeline`] (deliveries over time) are separate: an engine implements
//! them where they make sense (Redis expires keys itself and needs no sweeper). [`Identity`] names the store (its schema, not the
//! process), and [`Instances`] lets a restarted gateway free the claims its previous boot held.
//! [`HistoryExport`] reads history out in bulk, for the archive.
//!
//! All traits use native `async fn` in traits with `Send` futures; where the engine is chosen at
//! run time, callers wrap the engines in an enum.

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::claim::{
    ClaimOutcome, ClaimRequest, ClaimToken, EventView, HistoryOutcome, Holder, Record,
};
use crate::key::{EventId, InstanceName, Key, SourceName};
use crate::result::{RecordResult, StoredResult};
use crate::time::Timestamp;

pub use crate::error::StoreError;
pub use crate::sweep::Sweep;

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

    /// Marks the claim `done` as [`complete`](Self::complete) does, keeping `result` beside the
    /// record in the same atomic step (durable before it returns). The result lives as long as
    /// the record: it expires with it, and a later record of the same key starts without one.
    /// Only the completion that makes the record done keeps a result: a record already done
    /// under this token (completed before, or marked done on receipt) is left as it is, its
    /// result (or lack of one) with it, and the answer is `Ok`, as for `complete`.
    ///
    /// What engines implement; callers use [`complete_with`](Self::complete_with), which holds
    /// the result to a size limit first. This stores whatever it is given.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when `token` no longer holds the claim: nothing is written.
    fn complete_keeping(
        &self,
        token: &ClaimToken,
        result: RecordResult,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Completes the claim with the work's `result` for its duplicates to read
    /// ([`Record::result`](crate::Record::result) in [`lookup`](Self::lookup)), in the same
    /// atomic step as the completion. A result whose [`size`](StoredResult::size) is over
    /// `limit` ([`RESULT_LIMIT`](crate::RESULT_LIMIT) unless the caller chose another) is not
    /// stored: the claim is completed all the same, its record keeps only the size
    /// ([`RecordResult::Withheld`]), and the answer is [`StoreError::ResultTooLarge`].
    /// Completing again (with a result or without) changes nothing: the first completion's
    /// result stands.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when `token` no longer holds the claim: nothing is written.
    /// [`StoreError::ResultTooLarge`]: the claim was completed, without the result.
    fn complete_with(
        &self,
        token: &ClaimToken,
        result: &StoredResult,
        limit: usize,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let (kept, answer) = result.judge(&token.key, limit);
        async move {
            self.complete_keeping(token, kept).await?;
            answer
        }
    }

    /// Gives the claim up (processing failed): deletes the record so the next delivery is
    /// processed.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when `token` no longer holds the claim.
    fn release(&self, token: &ClaimToken) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Extends the lease of the processing record `token` holds to the store's now + `lease`,
    /// never beyond the record's `expires_at`, and returns the new `lease_until`. A holder whose
    /// lease lapsed may renew while nobody took the claim over. A record already done under this
    /// very token answers its `expires_at` and changes nothing. Writes no history row (renewals
    /// would flood it). Durable before it returns.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when `token` no longer holds the claim (taken over, released,
    /// expired).
    fn renew(
        &self,
        token: &ClaimToken,
        lease: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;

    /// The live record (none if absent or expired) and the history of one event.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn lookup(&self, key: &Key) -> impl Future<Output = Result<EventView, StoreError>> + Send;

    /// The live record of one event (none if absent or expired), without its history: what a
    /// duplicate's kept result is read from, and what a copy waiting for its first request
    /// polls. The default reads it through [`ClaimStore::lookup`]; an engine that can skip the
    /// history reads only the record.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn record(&self, key: &Key) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        async move { self.lookup(key).await.map(|view| view.record) }
    }
}

/// Which store this is: an id created with the store's schema and kept in it, so that two stores
/// (two databases, two schemas, a database wiped and created again) never share one, while
/// every process opening the same store reads the same. Read once when the store is opened.
///
/// A database restored from a backup keeps the id it had when the backup was taken.
pub trait Identity {
    /// The store's id: printable ASCII, never empty.
    fn store_id(&self) -> &str;
}

/// A process asking to start as a new boot of an instance ([`Instances::register_boot`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootRequest {
    /// The instance name the process runs under.
    pub instance: InstanceName,
    /// How long the boot counts as alive without a heartbeat ([`Instances::heartbeat`]): its
    /// liveness lease. A boot whose lease lapsed (the process died, or was cut off from the
    /// store or frozen for longer) is taken for dead, and the next boot frees its claims.
    pub lease: Duration,
    /// Where the process runs and its pid: what a second process under the same name is told.
    pub host: String,
    pub pid: u32,
    /// Who the process is, for a later process on the same machine to tell whether it still
    /// runs (opaque to the store: the gateway writes its kernel's boot, pid namespace, pid and
    /// start time); empty for none.
    pub process: String,
    /// The boot the caller proved dead (its process is gone, on this very machine): registered
    /// over even while its lease runs, as long as it is still the latest. `None`: only a boot
    /// whose lease lapsed or ended is taken for dead.
    pub supersede: Option<u64>,
}

impl BootRequest {
    /// A boot of `instance` by this process (its pid), on `host`.
    pub fn new(instance: InstanceName, lease: Duration, host: impl Into<String>) -> Self {
        Self {
            instance,
            lease,
            host: host.into(),
            pid: std::process::id(),
            process: String::new(),
            supersede: None,
        }
    }
}

/// The live boot that holds an instance name: why [`Instances::register_boot`] refused
/// ([`StoreError::InstanceLive`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveBoot {
    pub holder: Holder,
    /// Where it runs and its pid, as it registered them.
    pub host: String,
    pub pid: u32,
    /// Its [`BootRequest::process`].
    pub process: String,
    pub started_at: Timestamp,
    /// When its liveness lease ends unless renewed, by the store's clock.
    pub alive_until: Timestamp,
    /// How much of it was left when the store answered.
    pub remaining: Duration,
}

impl std::fmt::Display for LiveBoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "boot {} of instance {}, pid {} on {}, started {}",
            self.holder.boot,
            self.holder.instance,
            self.pid,
            if self.host.is_empty() {
                "an unnamed host"
            } else {
                &self.host
            },
            self.started_at
        )
    }
}

/// What [`Instances::register_boot`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boot {
    /// The holder the new boot's claims carry ([`ClaimRequest::holder`]).
    pub holder: Holder,
    /// When the store registered the boot, by its own clock.
    pub started_at: Timestamp,
    /// How many processing claims of earlier boots of the instance it made takeable.
    pub freed: u64,
}

/// Gateway processes that start again: a crash costs seconds, not a lease; and a second process
/// under a live one's name is refused before it touches anything.
///
/// Each boot holds a liveness lease in the store, renewed by its heartbeat and ended when it
/// stops. Only a boot that is provably dead (its lease lapsed, or it ended it) has its claims
/// freed by the next boot.
pub trait Instances: Send + Sync {
    /// Registers a new boot of `req.instance`, in one atomic step by the store's clock.
    ///
    /// When the instance's latest boot is still alive (its liveness lease running), nothing is
    /// changed and the answer is [`StoreError::InstanceLive`], naming that boot, unless the
    /// caller proved that very boot dead ([`BootRequest::supersede`]). Otherwise the
    /// store's per-instance boot counter goes up by one (the first boot is 1), the new boot's
    /// lease runs `req.lease` from now, and every `processing` claim held by an *earlier* boot of
    /// the instance whose lease is still running gets its lease ended now, with one `abandoned`
    /// history row (with the claim's attempt) each. The next delivery of such an event takes the
    /// claim over (attempt + 1, `reclaimed`), as after a lapsed lease. Claims of other instances,
    /// of the new boot, or with no holder are left alone.
    ///
    /// # Errors
    /// [`StoreError::InstanceLive`]: the instance runs elsewhere (or ran until moments ago and
    /// its lease has not lapsed yet); [`StoreError::Backend`] or [`StoreError::Closed`]. No boot
    /// was registered.
    fn register_boot(
        &self,
        req: &BootRequest,
    ) -> impl Future<Output = Result<Boot, StoreError>> + Send;

    /// Renews `holder`'s liveness lease to the store's now + `lease` and answers its new end.
    /// A boot whose lease lapsed may renew while no newer boot registered.
    ///
    /// # Errors
    /// [`StoreError::Superseded`] when a newer boot of the instance registered (this one's lease
    /// had lapsed): the process must stop serving under the name. [`StoreError::Backend`].
    fn heartbeat(
        &self,
        holder: &Holder,
        lease: Duration,
    ) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;

    /// Ends `holder`'s liveness lease now: the process stopped, so the next boot of its name
    /// starts at once. A boot already superseded is left alone.
    ///
    /// # Errors
    /// [`StoreError::Backend`]; the lease then lapses by itself.
    fn end_boot(&self, holder: &Holder) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Asking history: what the TTL advisor reads.
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

    /// Whether this store knows `source` at all: any record or history row of it. Tells "no such
    /// source in this store" from "this event was never received".
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn has_source(
        &self,
        source: &crate::key::SourceName,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// History's own retention, apart from reading it: old rows go in bounded batches.
pub trait HistoryRetention: Send + Sync {
    /// Deletes at most `batch` history rows older than `retention` (by the store's clock) and
    /// returns how many. Dedup records are never touched. Stores that drop whole partitions
    /// instead (in their [`Sweep::sweep_run`]) return 0.
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

/// One source's history rows counted per outcome in equal time buckets: what a chart of
/// deliveries over time draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineCounts {
    /// The store's now when it counted: the last bucket holds it.
    pub now: Timestamp,
    /// Where the first bucket starts (a multiple of the bucket width since the epoch).
    pub start: Timestamp,
    /// The width of each bucket.
    pub bucket: Duration,
    /// How many buckets there are, the last one holding `now`.
    pub buckets: u32,
    /// `(bucket index from 0, outcome, rows)`, only for buckets and outcomes with rows.
    pub counts: Vec<(u32, HistoryOutcome, u64)>,
}

impl TimelineCounts {
    /// Bucket `n`'s rows of `outcome`.
    pub fn count(&self, n: u32, outcome: HistoryOutcome) -> u64 {
        self.counts
            .iter()
            .filter(|(i, o, _)| *i == n && *o == outcome)
            .map(|c| c.2)
            .sum()
    }

    /// Every bucket's rows of `outcome`.
    pub fn total(&self, outcome: HistoryOutcome) -> u64 {
        self.counts
            .iter()
            .filter(|(_, o, _)| *o == outcome)
            .map(|c| c.2)
            .sum()
    }

    /// Where bucket `n` starts.
    pub fn bucket_start(&self, n: u32) -> Timestamp {
        self.start.plus(self.bucket * n)
    }

    /// The window ending with the bucket that holds `now`: `buckets` buckets of `bucket` each,
    /// aligned to multiples of `bucket` since the epoch.
    pub fn window(
        now: Timestamp,
        bucket: NonZeroU32,
        buckets: NonZeroU32,
    ) -> (Timestamp, Duration) {
        let width = i64::from(bucket.get()) * 1_000;
        let end = (now.as_millis().div_euclid(width) + 1) * width;
        (
            Timestamp::from_millis(end - width * i64::from(buckets.get())),
            Duration::from_secs(u64::from(bucket.get())),
        )
    }

    /// Counts from `(bucket index, outcome, rows)` rows as a store's query yields them; rows of
    /// an index outside the window (a clock step) are left out.
    pub fn from_rows(
        now: Timestamp,
        bucket: NonZeroU32,
        buckets: NonZeroU32,
        rows: impl IntoIterator<Item = (i64, HistoryOutcome, u64)>,
    ) -> Self {
        let (start, width) = Self::window(now, bucket, buckets);
        let counts = rows
            .into_iter()
            .filter_map(|(i, o, n)| {
                let i = u32::try_from(i).ok().filter(|i| *i < buckets.get())?;
                Some((i, o, n))
            })
            .collect();
        Self {
            now,
            start,
            bucket: width,
            buckets: buckets.get(),
            counts,
        }
    }
}

/// One of a source's most recent history rows ([`Timeline::recent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recent {
    /// The event.
    pub event_id: crate::EventId,
    /// What happened.
    pub outcome: HistoryOutcome,
    /// When, by the store's clock.
    pub at: Timestamp,
    /// The attempt the row speaks of.
    pub attempt: Option<u32>,
}

/// Deliveries over time, counted by the store from its history (bounded: one source, one
/// window, an index on `(source, received_at)`), and the most recent of them.
pub trait Timeline: Send + Sync {
    /// `source`'s most recent history rows, newest first, at most `limit` (one index walk
    /// backwards from now).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn recent(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
    ) -> impl Future<Output = Result<Vec<Recent>, StoreError>> + Send;

    /// `source`'s history rows in the `buckets` buckets of `bucket_secs` seconds each that end
    /// with the one holding the store's now (by its own clock), counted per outcome.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn timeline(
        &self,
        source: &SourceName,
        bucket_secs: NonZeroU32,
        buckets: NonZeroU32,
    ) -> impl Future<Output = Result<TimelineCounts, StoreError>> + Send;
}

/// One source's history of one UTC day, as a store counts it: what an export writes as one
/// archive directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryDay {
    pub source: SourceName,
    /// Midnight (UTC) starting the day.
    pub start: Timestamp,
    pub rows: u64,
    /// The store's name for where the rows live (PostgreSQL: the month's partition; SQLite:
    /// `sqlite`): it goes into the archive's file names.
    pub partition: String,
}

/// Every (source, day) with history rows in a time range, and the store's now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryDays {
    /// The store's now when it counted (a day that holds it is still open).
    pub now: Timestamp,
    /// Oldest first, then by source.
    pub days: Vec<HistoryDay>,
}

/// Where a page of [`HistoryExport::history_rows`] ended: the next page starts after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HistoryCursor {
    /// The row's time in the store's own resolution (SQLite: milliseconds; PostgreSQL:
    /// microseconds since the epoch): opaque to callers.
    pub position: i64,
    /// The row's id in the store (ties on `position` are broken by it).
    pub id: i64,
}

/// A history row with its key, as an export reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    pub source: SourceName,
    pub event_id: EventId,
    pub entry: crate::claim::HistoryEntry,
    pub cursor: HistoryCursor,
}

/// What a store's history retention removes at once: a time range of every source's history
/// (PostgreSQL: a month's partition; SQLite: a UTC day).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionUnit {
    /// The store's name for it (`history_2026_01`, `2026-01-31`).
    pub name: String,
    pub from: Timestamp,
    pub until: Timestamp,
}

/// Reading history out in bulk, for the archive: the days that hold rows, and a day's rows in
/// pages, in a stable order (time, then id) so an export run twice writes the same files. And
/// history's retention, one unit at a time, for a caller that archives each before it goes.
pub trait HistoryExport: Send + Sync {
    /// Each (source, UTC day) with history rows received in `[since, until)`, counted, with the
    /// store's now. `source` narrows it to one source.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn history_days(
        &self,
        source: Option<&SourceName>,
        since: Timestamp,
        until: Timestamp,
    ) -> impl Future<Output = Result<HistoryDays, StoreError>> + Send;

    /// Up to `limit` of `source`'s rows received in `[from, until)`, ordered by time then id,
    /// after `after` (from the first when `None`).
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn history_rows(
        &self,
        source: &SourceName,
        from: Timestamp,
        until: Timestamp,
        after: Option<HistoryCursor>,
        limit: NonZeroU32,
    ) -> impl Future<Output = Result<Vec<HistoryRow>, StoreError>> + Send;

    /// The units of history wholly older than `retention` (by the store's clock) that still
    /// hold rows, oldest first.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn history_past(
        &self,
        retention: Duration,
    ) -> impl Future<Output = Result<Vec<RetentionUnit>, StoreError>> + Send;

    /// Removes `unit`'s rows: the whole partition at once (PostgreSQL), or at most `batch` rows
    /// (SQLite: call again until it answers 0). Callers go oldest first; the rows of every
    /// earlier unit may go with it. Nothing newer than `retention` is ever removed.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    fn drop_history(
        &self,
        unit: &RetentionUnit,
        retention: Duration,
        batch: NonZeroU32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}
