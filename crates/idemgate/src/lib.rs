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
//! use idemgate::{ClaimRequest, Dedup, Key, Once, StoreConfig};
//! use std::time::Duration;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // The embedded SQLite store in ./idemgate-data (feature `sqlite`, the default).
//! let dedup = Dedup::open(&StoreConfig::default()).await?;
//! let key = Key::parse("orders-bus", "order-1041")?;
//! // Lease: how long the work may hold the claim before a redelivery may take it over.
//! // TTL: how long the sender may redeliver (see "The TTL" below).
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
//! Around an HTTP service, [`IdempotencyLayer`] does the same per request (see [`layer`], and
//! `examples/axum_stripe.rs`: a Stripe receiver in axum).
//!
//! # Features
//!
//! - `sqlite` (default): the embedded SQLite store (`engines::sqlite`), one file in a
//!   directory, nothing to run.
//! - `postgres`: the PostgreSQL store (`engines::postgres`), for several processes or hosts.
//! - `redis`: Redis or Redis Cluster as the store, or as a tier in front of either SQL store that
//!   answers known duplicates (`engines::redis`).
//!
//! A [`StoreConfig`] naming a store whose feature is not built fails to open with
//! [`OpenError::NotBuilt`], naming the feature.
//!
//! # Configuring a store
//!
//! [`StoreConfig`] is the gateway's `[store]` table as data: build it in code, or deserialize it
//! (serde) from your own configuration. Every field has a default but the PostgreSQL URL.
//!
//! SQLite, in a directory of your choosing (created if missing, migrated at open):
//!
//! ```no_run
//! use idemgate::{Dedup, StoreConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = StoreConfig {
//!     path: "/var/lib/my-service/idemgate".into(), // default ./idemgate-data
//!     ..StoreConfig::default()
//! };
//! let dedup = Dedup::open(&config).await?;
//! # drop(dedup); Ok(()) }
//! ```
//!
//! PostgreSQL (feature `postgres`): the schema is created or upgraded at open, under an advisory
//! lock; `config::PgSettings` holds the pool, the schema's name, expiry and TLS settings
//! (libpq's `sslmode`, `sslrootcert`, `sslcert` and `sslkey` are read from the URL too):
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use idemgate::config::PgSettings;
//! use idemgate::{Dedup, StoreConfig, StoreKind};
//! use std::num::NonZeroUsize;
//!
//! let config = StoreConfig {
//!     kind: StoreKind::Postgres,
//!     url: Some("postgres://app@db.internal/app?sslmode=verify-full".into()),
//!     postgres: PgSettings {
//!         schema: "idemgate".into(),                 // the default
//!         pool_size: NonZeroUsize::new(16).unwrap(), // the default
//!         ..PgSettings::default()
//!     },
//!     ..StoreConfig::default()
//! };
//! for problem in config.problems() {
//!     eprintln!("{problem}"); // each names its key: "store.url: required when ..."
//! }
//! let dedup = Dedup::open(&config).await?;
//! # drop(dedup); Ok(()) }
//! ```
//!
//! Redis (feature `redis`): `kind: StoreKind::Redis` with `redis: Some(..)` (an
//! `engines::redis::RedisSettings`) is the store; `redis: Some(..)` beside a SQL kind puts a
//! tier in front of it.
//!
//! # The TTL: from the sender's preset
//!
//! A claim must live as long as the sender may deliver the event again: `TTL = retry window +
//! queue lag + clock skew + replay margin`. Too short, and a late retry is processed a second
//! time; far too long, and the hot table grows for nothing. Every sender idemgate knows has a
//! [`Preset`] with that contract, its figures and where they come from ([`presets()`] lists them;
//! `idemgate providers` prints them):
//!
//! ```
//! use idemgate::{TtlPolicy, preset};
//! use std::time::Duration;
//!
//! let stripe = preset("stripe").and_then(|p| p.contract).expect("a built-in preset");
//! assert_eq!(stripe.retry_window, Duration::from_secs(3 * 86_400));
//! let ttl = stripe.ttl(); // 3 d of retries + 1 d queue lag + 10 min skew + 3 d replay margin
//! assert_eq!(ttl, Duration::from_secs(605_400));
//!
//! // Your own sender: the same terms, validated as the gateway validates a source's (a TTL
//! // below the retry window, or far above the contract, is refused, naming the term).
//! let mut contract = stripe;
//! contract.retry_window = Duration::from_secs(6 * 3_600);
//! let policy = TtlPolicy::new("orders-bus", contract, None)?;
//! # let _ = policy.ttl;
//! # Ok::<(), idemgate::engines::core::PolicyError>(())
//! ```
//!
//! # Beside the gateway
//!
//! The gateway (`idemgate serve`) is this library plus configuration, HTTP, forwarding and
//! maintenance. Where the library leaves a choice to you, here is what the gateway does:
//!
//! | | the gateway, per source | the library |
//! |---|---|---|
//! | TTL | from the provider's preset and the source's terms, validated | yours to give to each [`ClaimRequest`] (or [`layer::verified`]): take it from [`preset`] |
//! | lease | twice `forward_timeout` (10 s), at least 60 s, at most the TTL | yours to give; [`layer::verified`] takes 60 s (at most the TTL), as the gateway |
//! | a conflict (same id, other payload) | `on_conflict = "duplicate"`: 200 | [`OnConflict::Duplicate`]: 200, the same; [`IdempotencyLayer::on_conflict`] |
//! | late duplicates | `late_duplicates = "flag"`, horizon twice the TTL (at least 30 days) | the same ([`ClaimRequest`]'s defaults): processed again, flagged in [`Claimed::late_duplicate`] |
//! | what completes a claim | the downstream's 2xx | the service's 2xx ([`IdempotencyLayer::complete_on`]); `Ok` of the work ([`Dedup::process_once`]) |
//! | body limit | 1 MiB (`limits.body_limit`), raised to a provider's documented maximum (GitHub: 25 MB) | 1 MiB ([`IdempotencyLayer::body_limit`]) |
//! | signature tolerance | 5 minutes; Mailgun: its retry window plus clock skew | the [`Verifier`]'s: give Mailgun the longer one |
//! | body fingerprint as a second key (`dedupe_on_body`) | on for GitHub | not done |
//! | the store | `[store]`, by default SQLite in `./idemgate-data` | [`StoreConfig::default`]: the same |
//! | sweeping expired records | every `sweep_interval` (60 s) | **not started**: see below |
//! | history retention | 400 days, purged every hour | [`StoreConfig::history_retention`] is read by [`HistoryRetention::purge_history`]: run it yourself |
//! | a crashed process's claims | freed at its next boot (instance name, [`Instances`]) | wait out their lease, unless you give [`DedupBuilder::holder`] |
//!
//! Expired records count as absent whether or not they are swept, so an unswept store is
//! correct, only larger. Sweep it as the gateway does, in bounded batches with a pause
//! (PostgreSQL maintains its partitions in the same runs):
//!
//! ```no_run
//! use idemgate::{Dedup, StoreConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = StoreConfig::default();
//! let dedup = Dedup::open(&config).await?;
//! let stop = tokio_util::sync::CancellationToken::new();
//! let sweeper = idemgate::sweep::spawn(
//!     dedup.store().clone(),
//!     config.sweep_interval,
//!     config.sweep_options(),
//!     stop.clone(),
//!     |run| {
//!         if let Err(e) = run {
//!             eprintln!("sweep failed: {e}");
//!         }
//!     },
//! );
//! // ... serve ...
//! stop.cancel();
//! sweeper.await?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`Dedup`] (`dedup`): [`Dedup::process_once`], claim, run the caller's work, complete on
//!   `Ok`, release on `Err`, on a panic and on drop; the lease renewed while the work runs.
//!   [`Dedup::process_once_storing`] also keeps the work's result ([`StoredResult`]) with the
//!   completion and gives it back to the event's duplicates.
//! - [`IdempotencyLayer`] ([`layer`]): the same around a tower service, keyed by a closure over
//!   the request (see [`layer::verified`] for every webhook provider's scheme).
//! - [`store`]: [`AnyStore`], any store as one shared object: the engine chosen at run time
//!   from a [`StoreConfig`] (SQLite, PostgreSQL and Redis behind the features `sqlite`
//!   (default), `postgres`, `redis`), optionally behind a Redis tier, or a store of your own
//!   ([`AnyStore::new`]; `examples/own_store`); [`migrate`].
//! - [`answer`]: what a delivery that was not processed is answered (status, `Idemgate-Outcome`,
//!   `Retry-After`, body): one mapping for the layer and the gateway.
//! - [`config`]: [`StoreConfig`], the `[store]` table of the gateway's TOML, as data.
//! - `finish`: completions and releases the store did not take at once, retried until it does
//!   ([`Finisher`]).
//! - [`health`]: [`WriteHealth`], what the store's recent writes said (a store that answers
//!   reads but fails writes is failing), and how long a claim waits for the store.
//! - [`view`]: one event's record and history as JSON ([`EventReport`]).
//! - Re-exported from `idemgate-core`: keys, claims, outcomes, the store traits, the in-memory
//!   store, the provider presets and TTL policy; from `idemgate-providers`: [`Verifier`],
//!   [`Scheme`] and [`Provider`]. The crates themselves are in [`engines`].
//!
//! More: the gateway and its configuration,
//! <https://docs.rs/idemgate-gateway>; the command line, `idemgate --help`.

pub mod answer;
pub mod config;
pub mod health;
pub mod idempotency_key;
pub mod layer;
pub mod store;
pub mod view;

mod dedup;
mod error;
mod finish;

pub use crate::answer::OnConflict;
pub use crate::config::{StoreConfig, StoreConfigError, StoreKind};
pub use crate::dedup::{
    CLAIM_WAIT, ClaimObserver, Claimed, Dedup, DedupBuilder, FAILING_CLAIM_WAIT, Once, ProcessError,
};
pub use crate::error::ErrorChain;
pub use crate::finish::{Finish, Finisher};
pub use crate::health::NoAnswer;
pub use crate::health::WriteHealth;
pub use crate::layer::IdempotencyLayer;
pub use crate::store::{AnyStore, Migrated, OpenError, migrate};
pub use crate::view::EventReport;

/// The claim rules as pure functions (every engine is held to them), from `idemgate-core`.
pub use idemgate_core::machine;
/// Sweeping expired records: one bounded run, and `spawn`, the background sweeper, from
/// `idemgate-core`.
pub use idemgate_core::sweep;
pub use idemgate_core::{
    BootRequest, ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, DeliveryContract,
    EventId, EventView, Fingerprint, HistoryEntry, HistoryOutcome, HistoryQuery, HistoryRetention,
    Holder, InstanceName, Instances, Key, KeyError, LateDuplicates, LiveBoot, MemoryStore, Preset,
    RESULT_LIMIT, Record, RecordResult, RecordState, SourceName, Stats, StoreError, StoredResult,
    Sweep, Timeline, TimelineCounts, Timestamp, TtlPolicy, preset, presets,
};
pub use idemgate_providers::{Provider, Scheme, Secret, SignError, Verifier, VerifyError};

/// The README's code, compiled and run as doctests (its PostgreSQL example needs the feature).
#[cfg(all(doctest, feature = "postgres"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

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
