//! The PostgreSQL store of idemgate: one-round-trip claims, group commit, batched or partitioned
//! expiry, and a month-partitioned history.
//!
//! # Layout
//!
//! - [`config`]: [`PgConfig`] and [`Expiry`] (batched or partitioned), validated with errors
//!   that name the key.
//! - [`migrate`](mod@migrate): versioned `.sql` migrations, applied in one transaction under an
//!   advisory lock; a schema migrated by a newer idemgate is refused untouched.
//! - `store`: [`PgStore`], the [`ClaimStore`](idemgate_core::ClaimStore),
//!   [`Sweep`](idemgate_core::Sweep), [`Stats`](idemgate_core::Stats),
//!   [`Identity`](idemgate_core::Identity) and [`Instances`](idemgate_core::Instances)
//!   implementations.
//! - `batch`: the group-commit batcher: concurrent claims go to PostgreSQL as one `claim_batch`
//!   call over arrays.
//! - [`sweeper`]: partition maintenance and the sweep run ([`idemgate_core::Sweep::sweep_run`],
//!   overridden to maintain partitions first); the background sweeper is core's.
//! - [`error`]: [`PgError`], convertible into core's [`StoreError`](idemgate_core::StoreError).
//!
//! The SQL lives in `sql/`: `migrations/0001_init.sql` and `0002_holders.sql` hold the tables and
//! the server-side functions (the claim rules in PL/pgSQL), the other files the statements the
//! store sends.
//!
//! Every time is the database's: `clock_timestamp()` inside the functions, `now()` in the sweep.
//! Timestamps reach Rust as epoch milliseconds.

pub mod config;
pub mod error;
pub mod migrate;
pub mod sweeper;

mod batch;
mod store;

pub use config::{ConfigError, Expiry, PgConfig};
pub use error::PgError;
pub use migrate::{MigrateReport, SCHEMA_VERSION, migrate};
pub use store::PgStore;
pub use sweeper::MaintenanceReport;
