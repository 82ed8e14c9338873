//! The PostgreSQL store of idemgate: one-round-trip claims, group commit, batched or partitioned
//! expiry, and a month-partitioned history.
//!
//! # Layout
//!
//! - [`config`]: [`PgConfig`] and [`Expiry`] (batched or partitioned), validated with errors
//!   that name the key; [`PgSettings`], the `[store.postgres]` table of a configuration file,
//!   deserialized as it is.
//! - [`tls`]: [`SslMode`] (libpq's five) and [`PgTls`], the `[store.postgres.tls]` table; the
//!   URL's `sslmode`, `sslrootcert`, `sslcert` and `sslkey` (which tokio-postgres does not know)
//!   taken out of it and settled with the settings. The README's *TLS* section has the rules, the
//!   default (`prefer`, and why) and what managed services (RDS, Cloud SQL, Neon, Supabase) need.
//! - [`connector`]: [`MakeRustls`], tokio-postgres's TLS over tokio-rustls (*ring*), for the pool
//!   and the migration connection alike, with `tls-server-end-point` channel binding.
//! - `testing` (feature `test-server`): `PrivatePg`, a private PostgreSQL cluster for tests and
//!   the chaos suite.
//! - [`migrate`](mod@migrate): versioned `.sql` migrations, applied in one transaction under an
//!   advisory lock; a schema migrated by a newer idemgate is refused untouched.
//! - `store`: [`PgStore`], the [`ClaimStore`](idemgate_core::ClaimStore),
//!   [`Sweep`](idemgate_core::Sweep), [`Stats`](idemgate_core::Stats),
//!   [`Identity`](idemgate_core::Identity) and [`Instances`](idemgate_core::Instances)
//!   implementations; [`PgStore::connect`] builds its pool, [`PgStore::from_pool`] takes yours.
//! - `inbox`: the [`Inbox`](idemgate_core::inbox::Inbox) implementation: enqueue (the claim and
//!   the queue item in one call of `enqueue_claim`), takes under a lease with
//!   `FOR UPDATE SKIP LOCKED`, reports fenced by the item's attempt, dead letters, replay, purge
//!   and queue stats.
//! - `batch`: the group-commit batcher: concurrent claims go to PostgreSQL as one `claim_batch`
//!   call over arrays; each batch's round trip is recorded for the sweeper's pacing.
//! - `db`: the pool and configuration the store and its batcher share, and the partitions rows
//!   need (created ahead, dropped past their time).
//! - `row`: rows read by column name into core's types (a column missing or mistyped is a
//!   [`PgError::Column`] naming it), and durations as milliseconds.
//!
//! Modules depend one way: `inbox` on `store`, `db` and `row`; `store` on `batch`, `db` and
//! `row`; `batch` on `db` and `row`; `db` on `row`; `sweeper` on `store`. None imports a module
//! that imports it back.
//! - [`sweeper`]: partition maintenance and the sweep run ([`idemgate_core::Sweep::sweep_run`],
//!   overridden to maintain partitions first), paced by the claim batches' round trips
//!   ([`PgConfig::sweep_pacing`]); the background sweeper is core's.
//! - [`error`]: [`PgError`], convertible into core's [`StoreError`](idemgate_core::StoreError).
//!
//! The SQL lives in `sql/`. `migrations/` holds the tables and the server-side functions (the
//! claim rules in PL/pgSQL), one file per schema version, from `0001_init.sql` to
//! `0011_stored_results.sql` ([`SCHEMA_VERSION`]); the dashboard's history index is
//! `0005_history_by_source_time.sql`. The other files are the statements the store sends.
//!
//! Every time is the database's: `clock_timestamp()` inside the functions, `now()` in the sweep
//! and in the inbox statements (each one statement, so `now()` is its start).
//! Timestamps reach Rust as epoch milliseconds.

pub mod config;
mod config_error;
pub mod connector;
pub mod error;
pub mod migrate;
pub mod sweeper;
#[cfg(feature = "test-server")]
pub mod testing;
pub mod tls;

mod batch;
mod db;
mod in_tx;
mod inbox;
mod row;
mod store;

pub use config::{ConfigError, Expiry, ExpiryMode, PgConfig, PgSettings};
pub use connector::MakeRustls;
pub use error::PgError;
pub use migrate::{MigrateReport, SCHEMA_VERSION, migrate};
pub use store::PgStore;
pub use sweeper::MaintenanceReport;
pub use tls::{PgTls, SslMode};
