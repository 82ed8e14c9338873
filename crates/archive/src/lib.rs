//! idemgate's history archive: history moved out of the database into Parquet files that
//! outlive its retention, read back by `idemgate lookup` and by any query engine.
//!
//! - [`config`]: `[history.archive]` (`file:///path` or `s3://bucket/prefix`).
//! - [`layout`]: Hive-style directories, `source=S/day=YYYY-MM-DD/part-<partition>-<n>.parquet`,
//!   with a `_manifest.json` per day.
//! - [`parquet_file`]: the schema, writing and reading files (zstd; rows sorted by event id in
//!   row groups with `event_id` statistics and bloom filters).
//! - [`manifest`]: what a day holds: files, rows, sizes, SHA-256.
//! - [`archive`]: an opened archive: write a day, confirm it against the database's count, look
//!   an event up reading only the footers, filters and row groups it needs.
//! - [`export`]: a store's history days into the archive.
//! - [`s3`]: S3's transport over hyper and rustls (ring), as the gateway's forwards go.

pub mod archive;
pub mod config;
pub mod error;
pub mod export;
pub mod layout;
pub mod manifest;
pub mod parquet_file;
pub mod row;
pub mod s3;

pub use archive::{Archive, DayWriter, FILE_ROWS, Found};
pub use config::{ArchiveConfig, Format, Location};
pub use error::ArchiveError;
pub use export::{Plan, export_day, plan};
pub use layout::Day;
pub use manifest::{FileEntry, Manifest};
pub use row::ArchivedRow;

/// `url` with anything between `://` and `@` hidden.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://<hidden>{}", &url[..s], &url[at..]),
        _ => url.to_owned(),
    }
}
