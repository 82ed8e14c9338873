#![deny(missing_docs)]
//! idemgate as a library: each webhook or event processed once, inside your own service.
//!
//! Senders retry deliveries for hours or days; a receiver must process each event once.
//! idemgate claims each event id atomically on first receipt, keeps the claim as long as the
//! sender can still retry, and keeps a history of what was received.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use idemgate::{ClaimRequest, Dedup, Key, Once, StoreConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // The embedded SQLite store in ./idemgate-data (feature `sqlite`, the default).
//! let dedup = Dedup::open(&StoreConfig::default()).await?;
//! let key = Key::parse("orders-bus", "order-1041")?;
//! let claim = ClaimRequest::new(key, Duration::from_secs(60), Duration::from_secs(7 * 86_400));
//! match dedup.process_once(claim, |_claimed| async { ship_order().await }).await? {
//!     Once::Processed(()) => println!("shipped"),
//!     Once::Duplicate { .. } => println!("already shipped: nothing to do"),
//!     Once::InFlight { retry_after } => println!("being shipped elsewhere; ask again in {retry_after:?}"),
//!     other => println!("not shipped: {other:?}"),
//! }
//! # Ok(()) }
//! # async fn ship_order() -> Result<(), std::io::Error> { Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`Dedup`] (`dedup`): [`Dedup::process_once`], claim, run the caller's work, complete on
//!   `Ok`, release on `Err`, on a panic and on drop; the lease renewed while the work runs.
//! - [`IdempotencyLayer`] (`layer`): the same around a tower service, keyed by a closure over
//!   the request (see [`layer::verified`] for every webhook provider's scheme).
//! - [`store`]: [`AnyStore`], the engine chosen at run time from a [`StoreConfig`] (SQLite,
//!   PostgreSQL and Redis behind the features `sqlite` (default), `postgres`, `redis`), optionally
//!   behind a Redis tier; [`migrate`].
//! - [`config`]: [`StoreConfig`], the `[store]` table of the gateway's TOML, as data.
//! - `finish`: completions and releases the store did not take at once, retried until it does.
//! - [`health`]: [`WriteHealth`], what the store's recent writes said (a store that answers
//!   reads but fails writes is failing), and how long a claim waits for the store.
//! - [`view`]: one event's record and history as JSON ([`EventReport`]).
//! - Re-exported from `idemgate-core`: keys, claims, outcomes, the store traits and the
//!   in-memory store; from `idemgate-providers`: [`Verifier`] and [`Scheme`].

pub mod config;
pub mod health;
pub mod layer;
pub mod store;
pub mod view;

mod dedup;
mod error;
mod finish;

pub use crate::config::{StoreConfig, StoreConfigError, StoreKind};
pub use crate::dedup::{
    CLAIM_WAIT, ClaimObserver, Claimed, Dedup, DedupBuilder, FAILING_CLAIM_WAIT, Once, ProcessError,
};
pub use crate::error::ErrorChain;
pub use crate::finish::{Finish, Finisher};
pub use crate::health::NoAnswer;
pub use crate::health::WriteHealth;
pub use crate::layer::IdempotencyLayer;
pub use crate::store::{AnyStore, Engine, Migrated, OpenError, migrate};
pub use crate::view::EventReport;

pub use idemgate_core::{
    BootRequest, ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, EventId, EventView,
    Fingerprint, HistoryEntry, HistoryOutcome, HistoryQuery, HistoryRetention, Holder,
    InstanceName, Instances, Key, KeyError, LateDuplicates, LiveBoot, MemoryStore, Record,
    RecordState, SourceName, Stats, StoreError, Sweep, Timestamp,
};
pub use idemgate_providers::{Scheme, Secret, Verifier, VerifyError};

/// The crates beneath, for what the facade does not re-export.
pub mod engines {
    pub use idemgate_core as core;
    #[cfg(feature = "postgres")]
    pub use idemgate_postgres as postgres;
    pub use idemgate_providers as providers;
    #[cfg(feature = "redis")]
    pub use idemgate_redis as redis;
    #[cfg(feature = "sqlite")]
    pub use idemgate_sqlite as sqlite;
}
