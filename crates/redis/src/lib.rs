//! The Redis engine of idemgate, in two modes.
//!
//! - **Tier mode** ([`TieredStore`]): a read-through cache of *done* records in front of the SQL
//!   store, the source of truth. A Redis hit on a done record answers `Duplicate` without touching
//!   SQL; a miss asks the SQL store and caches a done answer until just before the record expires.
//!   Nothing is ever claimed through Redis alone, so a flushed, restarted or evicting Redis can
//!   only cost a round trip, never let a duplicate through; a Redis outage degrades to SQL only.
//! - **Store mode** ([`RedisStore`]): Redis (standalone or Cluster) as the only store, for
//!   scale-out. The whole claim state machine runs in one Lua script per operation on the server's
//!   clock; records expire by `PXAT`; it refuses to start under an evicting `maxmemory-policy`
//!   unless told otherwise.
//!
//! # Layout
//!
//! - [`config`]: [`RedisConfig`] (store mode), [`TierConfig`] (tier mode), the [`Target`] (one
//!   URL or Cluster seed nodes), [`RedisTls`] (the CA file and client certificate of a
//!   `rediss://` target) and [`ConfigError`].
//! - [`settings`]: [`RedisSettings`], the gateway's `[store.redis]` table as data (serde), and
//!   the two configurations built from it.
//! - `keys`: the key layout. One event's keys share a hash tag, so a script touching them runs on
//!   one Cluster slot; event ids are escaped so no id can break the tag or collide.
//! - `conn`: one connection type over standalone and Cluster, and the per-master commands the
//!   start-up checks need.
//! - `tls`: [`RedisTls`], its files checked against the target and read for the redis crate,
//!   and TLS failures in words (for a Cluster, learnt from its first seed node).
//! - [`store`]: [`RedisStore`], one file per concern: `script` (the Lua, which lives in
//!   `src/lua/`, as a function library or scripts), `checks` (start-up), `claims`, `record`, `history` (the source streams),
//!   `stats`, `instances`.
//! - `reply`: what the scripts answer (a table whose first element names it), decoded into one
//!   enum per script; an unknown name is an error naming the script and the reply.
//! - [`tier`]: [`TieredStore`] (claim and release through Redis), its cache `entry` text, its
//!   [`TierCounters`], and the traits it leaves to the inner store (`delegated`).
//! - [`error`]: [`RedisError`], and how it becomes core's `StoreError`.
//!
//! The crate README explains the design choices (history, eviction, tier semantics) and carries
//! the benchmark figures.

pub mod config;
mod conn;
pub mod error;
mod keys;
mod limiter;
mod reply;
pub mod settings;
pub mod store;
pub mod tier;
mod tls;

pub use config::{ConfigError, RedisConfig, RedisTls, Target, TierConfig};
pub use error::RedisError;
pub use settings::RedisSettings;
pub use store::RedisStore;
pub use tier::{TierCounters, TieredStore};
