//! The claim model of idemgate.
//!
//! idemgate makes webhook and event processing happen once: it claims each delivery's event id
//! atomically on first receipt, keeps the claim as long as the sender can still retry, and keeps a
//! separate, long-lived history of what was received. This crate holds the parts that know nothing
//! of SQL, HTTP or Redis.
//!
//! # Layout
//!
//! - [`key`]: validated [`SourceName`]s, [`EventId`]s, payload [`Fingerprint`]s and gateway
//!   [`InstanceName`]s. Bad input is a typed [`KeyError`] and never reaches a store.
//! - [`time`]: [`Timestamp`] and the [`Clock`] a store reads. Only stores read clocks: every
//!   expiry decision uses the store's own time.
//! - [`policy`]: a source's [`DeliveryContract`] and the [`TtlPolicy`] computed from it
//!   (TTL = retry window + queue lag + clock skew + replay margin), with its validation.
//! - [`presets`](mod@presets): the built-in provider presets, each with its figure, source and date checked.
//! - [`advise`]: the TTL advisor: from the gaps history shows between an event's first receipt
//!   and its later deliveries, a recommended TTL and a verdict (too short, too long, ok, no data).
//! - [`claim`]: requests, outcomes, tokens, records and history rows.
//! - [`result`]: [`StoredResult`], what a completion can keep for the event's duplicates (a
//!   status, headers, a body, within a size limit), and [`RecordResult`], what a record holds
//!   of it.
//! - [`machine`]: the claim rules as a pure function, shared by the stores that run them in Rust.
//! - [`store`]: the store traits: [`ClaimStore`] (the state machine), [`Sweep`], [`Stats`],
//!   [`HistoryQuery`], [`Timeline`] (deliveries over time), [`Identity`] (which store this is) and [`Instances`] (freeing the claims
//!   of a restarted gateway's earlier boots).
//! - [`object`]: [`Store`], any store as an object (an `Arc<dyn Store>`), with its
//!   [`Capabilities`] asked for one by one and an object-safe twin of each store trait.
//! - [`error`]: [`StoreError`], why a store operation failed, shared by the store traits and the
//!   sweeper.
//! - [`sweep`]: a sweep run (bounded batches with a pause between them, paced by
//!   [`sweep::pace`] to give way to claims) and, with feature `tokio`, the one background
//!   sweeper.
//! - [`inbox`]: the [`inbox::Inbox`] trait: deliveries claimed and queued in one step, then
//!   taken under a lease, retried, dead-lettered and replayed.
//! - [`memory`]: [`MemoryStore`], an in-memory store with an injectable clock (inbox included).
//! - `testkit` (feature `testkit`): the conformance suite every store runs.

pub mod advise;
pub mod claim;
pub mod error;
pub mod inbox;
pub mod key;
pub mod machine;
pub mod memory;
pub mod object;
pub mod policy;
pub mod presets;
pub mod result;
pub mod store;
pub mod sweep;
pub mod time;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use claim::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimToken, EventView, HistoryEntry, HistoryOutcome,
    Holder, LateDuplicates, MIN_DEFAULT_LATE_HORIZON, Prior, Record, RecordState, TokenParseError,
    default_late_horizon,
};
pub use key::{EventId, Fingerprint, InstanceName, Key, KeyError, SourceName};
pub use memory::MemoryStore;
pub use object::{BoxFuture, Capabilities, Store};
pub use policy::{ContractTerms, DeliveryContract, PolicyError, TtlPolicy};
pub use presets::{Preset, preset, presets};
pub use result::{RESULT_LIMIT, RecordResult, StoredResult, UnreadableResult};
pub use store::{
    Boot, BootRequest, ClaimStore, HistoryCursor, HistoryDay, HistoryDays, HistoryExport,
    HistoryQuery, HistoryRetention, HistoryRow, Identity, Instances, LiveBoot, Recent,
    RetentionUnit, SourceStats, Stats, StoreError, StoreStats, Sweep, Timeline, TimelineCounts,
};
pub use time::{Clock, Human, ManualClock, SteadyClock, SystemClock, Timestamp};
