//! The embedded SQLite store of idemgate: zero setup, one node.
//!
//! # Layout
//!
//! - One database file, `idemgate.db`, in the data directory, in WAL mode with
//!   `synchronous = FULL`: a commit is on disk before anyone hears of it.
//! - `writer`: one writer thread owns the only writing connection. Callers send it commands over
//!   a channel; it takes every command waiting (up to `batch_max`), applies them in order in one
//!   transaction (each in its own savepoint), commits once, and only then answers each caller.
//!   Concurrent claims thus share one fsync (group commit), and two claims of one key in a batch
//!   resolve exactly as if sent one by one.
//! - Reads ([`ClaimStore::lookup`], [`Stats`]) run on their own connections on tokio's blocking
//!   pool and never wait for the writer.
//! - The claim rules are [`idemgate_core::machine`]'s, run with the store's clock: the host's, as
//!   the store is embedded, but carried by the monotonic clock ([`SteadyClock`]), so a step of
//!   the host's wall clock moves no lease or expiry of a running process (the writer logs the
//!   step); injectable for tests.
//! - The schema lives in `sql/`, versioned by `PRAGMA user_version`. Its `meta` table holds the
//!   store's [`Identity`], created with the schema.
//! - `records`: the writes every command shares: a claim, a record upsert, a history row.
//! - `inbox`: the [`idemgate_core::inbox::Inbox`] queue's SQL (`sql/0003_inbox.sql`); each of
//!   its writes is one writer command, so one transaction, the enqueue's claim included. The
//!   trait is implemented here, beside the others, sending those commands.

mod inbox;
mod records;
mod writer;

use idemgate_core::HistoryRetention;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use idemgate_core::advise::{Observation, Tally};
use idemgate_core::claim::{ClaimOutcome, ClaimRequest, ClaimToken, EventView, HistoryEntry};
use idemgate_core::store::{
    Boot, BootRequest, ClaimStore, HistoryQuery, Identity, Instances, SourceStats, Stats,
    StoreError, StoreStats, Sweep, Timeline, TimelineCounts,
};
use idemgate_core::{
    Clock, Fingerprint, HistoryOutcome, Holder, InstanceName, Key, Record, RecordResult,
    RecordState, SourceName, SteadyClock, StoredResult, Timestamp,
};
use rusqlite::types::Type;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot};

use crate::inbox::TakeArgs;
use crate::writer::Command;
pub use crate::writer::WriterStats;
use idemgate_core::inbox::{
    DeadLetter, Failure, Inbox, InboxStats, ItemRef, QueueEntry, QueuedItem, ReplayFilter, Taken,
};

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "idemgate.db";

/// The newest schema version this build knows (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Schema migrations, in order; `PRAGMA user_version` counts how many were applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../sql/0001_init.sql"),
    include_str!("../sql/0002_holders.sql"),
    include_str!("../sql/0003_inbox.sql"),
    include_str!("../sql/0004_history_by_source_time.sql"),
    include_str!("../sql/0005_completed.sql"),
    include_str!("../sql/0006_boot_leases.sql"),
    include_str!("../sql/0007_inbox_by_key.sql"),
    include_str!("../sql/0008_stored_results.sql"),
];

const SELECT_RECORD: &str = include_str!("../sql/claim_select.sql");
const SELECT_HISTORY: &str = "SELECT outcome, attempt, received_at, gap_ms, fingerprint, processed, \
     note FROM history WHERE source = ?1 AND event_id = ?2 ORDER BY id";

/// How the store runs.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// The most commands one transaction takes.
    pub batch_max: usize,
    /// How long the writer may wait for more commands when fewer are waiting than recent batches
    /// held. A lone caller never waits: its batch size is one. The default, 150 µs, is about
    /// half a commit on a virtual disk: callers in a closed loop (workers claiming back to back)
    /// are back within it, so their batches stay whole, while requests arriving on their own
    /// (a sidecar, a gateway below its ceiling) wait little for company (BENCHMARKS.md, "The
    /// SQLite writer's linger").
    pub linger: Duration,
    /// The store's clock.
    pub clock: Arc<dyn Clock>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            batch_max: 1024,
            linger: Duration::from_micros(150),
            clock: Arc::new(SteadyClock::new()),
        }
    }
}

/// The SQLite store. Clones share one writer thread.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    commands: mpsc::Sender<Command>,
    /// Bounds the commands waiting for the writer (backpressure).
    permits: Semaphore,
    counters: Arc<writer::Counters>,
    /// Each claim's time from its caller's side (queue, writer transaction, answer), which the
    /// sweeper paces itself by: a sweep batch delays the claims queued behind it.
    claim_latency: idemgate_core::sweep::ClaimLatency,
    readers: Mutex<Vec<Connection>>,
    path: PathBuf,
    clock: Arc<dyn Clock>,
    /// The store's identity, read from `meta` when it was opened.
    store_id: String,
}

fn sql(context: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> StoreError {
    let context = context.into();
    move |e| StoreError::backend(context, e)
}

impl SqliteStore {
    /// Opens (creating if needed) the store in `dir`, on the host's clock (a [`SteadyClock`]).
    ///
    /// # Errors
    /// [`StoreError::Backend`] when the directory or database cannot be created or opened;
    /// [`StoreError::NewerSchema`] when a newer idemgate wrote it.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(dir, SqliteOptions::default())
    }

    /// Opens the store with explicit options.
    ///
    /// # Errors
    /// As [`SqliteStore::open`].
    pub fn open_with(dir: impl AsRef<Path>, opts: SqliteOptions) -> Result<Self, StoreError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::backend(format!("cannot create data directory {}", dir.display()), e)
        })?;
        let path = dir.join(DB_FILE);
        let mut conn = open_connection(&path, false)?;
        migrate(&mut conn, &path)?;
        Self::start(conn, path, opts)
    }

    /// Opens a store that already exists in `dir` at the current schema, creating and migrating
    /// nothing: for tools that only read, or sweep.
    ///
    /// # Errors
    /// [`StoreError::NoStore`] when `dir` holds no store, [`StoreError::OlderSchema`] when it
    /// needs `idemgate migrate`, and what [`SqliteStore::open`] refuses.
    pub fn open_existing(dir: impl AsRef<Path>, opts: SqliteOptions) -> Result<Self, StoreError> {
        let dir = dir.as_ref();
        let path = dir.join(DB_FILE);
        if !path.is_file() {
            // Where it looked, whole: a relative path read from another directory is the usual
            // mistake, and `migrate` there would only make an empty store.
            let looked = std::path::absolute(&path).unwrap_or_else(|_| path.clone());
            return Err(StoreError::NoStore {
                what: format!(
                    "no idemgate store in {} (looked for {}); point the command at the store the gateway uses: --data-dir with its store.path, --config with its config file (or IDEMGATE_DATA_DIR, IDEMGATE_CONFIG), or --postgres",
                    dir.display(),
                    looked.display(),
                ),
            });
        }
        let conn = open_connection(&path, false)?;
        let known = MIGRATIONS.len() as i64;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(sql("cannot read the schema version"))?;
        if found > known {
            return Err(StoreError::NewerSchema { found, known });
        }
        if found < known {
            return Err(StoreError::OlderSchema { found, known });
        }
        Self::start(conn, path, opts)
    }

    fn start(conn: Connection, path: PathBuf, opts: SqliteOptions) -> Result<Self, StoreError> {
        let store_id: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |r| {
                r.get(0)
            })
            .map_err(sql(format!(
                "cannot read the store id of {}",
                path.display()
            )))?;
        let (commands, rx) = mpsc::channel();
        let counters = Arc::new(writer::Counters::default());
        let batch_max = opts.batch_max.max(1);
        writer::spawn(
            conn,
            rx,
            writer::Batching {
                max: batch_max,
                linger: opts.linger,
            },
            opts.clock.clone(),
            counters.clone(),
            &path,
        )?;
        Ok(Self {
            inner: Arc::new(Inner {
                commands,
                permits: Semaphore::new(batch_max * 4),
                counters,
                claim_latency: Default::default(),
                readers: Mutex::default(),
                path,
                clock: opts.clock,
                store_id,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The store's clock: how far the host's wall clock has stepped away from it is its
    /// [`Clock::wall_divergence_ms`].
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// What the writer thread has done since the store was opened.
    pub fn writer_stats(&self) -> WriterStats {
        self.inner.counters.snapshot()
    }

    async fn send<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
    ) -> Result<T, StoreError> {
        let _permit = self
            .inner
            .permits
            .acquire()
            .await
            .map_err(|_| StoreError::Closed)?;
        let (tx, rx) = oneshot::channel();
        self.inner
            .commands
            .send(make(tx))
            .map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// The schema's version as the file holds it now (`PRAGMA user_version`), beside the newest
    /// this build knows ([`SCHEMA_VERSION`]): a newer binary may have migrated it since.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    pub async fn schema_version(&self) -> Result<(i64, i64), StoreError> {
        self.read(|conn, _| {
            conn.query_row("PRAGMA user_version", [], |r| r.get(0))
                .map(|found| (found, SCHEMA_VERSION))
                .map_err(sql("cannot read the schema version"))
        })
        .await
    }

    /// Runs `f` on a reader connection on the blocking pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, Timestamp) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match inner
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop()
            {
                Some(c) => c,
                None => open_connection(&inner.path, true)?,
            };
            let result = f(&conn, inner.clock.now());
            inner
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn);
            result
        })
        .await
        .map_err(|e| StoreError::backend("a read task failed", e))?
    }
}

fn open_connection(path: &Path, read_only: bool) -> Result<Connection, StoreError> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let open = sql(format!("cannot open {}", path.display()));
    let conn = Connection::open_with_flags(path, flags).map_err(open)?;
    let setup = sql(format!("cannot configure {}", path.display()));
    // Another process (a CLI sweep beside a running gateway) may hold the write lock briefly.
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(setup)?;
    if !read_only {
        let setup = sql(format!("cannot configure {}", path.display()));
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             PRAGMA foreign_keys = ON;",
        )
        .map_err(setup)?;
    }
    Ok(conn)
}

/// Applies the migrations this build has and the database lacks, all in one transaction.
fn migrate(conn: &mut Connection, path: &Path) -> Result<(), StoreError> {
    let known = MIGRATIONS.len() as i64;
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(sql(format!("cannot lock {} to migrate it", path.display())))?;
    let found: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql("cannot read the schema version"))?;
    if found > known {
        return Err(StoreError::NewerSchema { found, known });
    }
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.execute_batch(migration)
            .map_err(sql(format!("migration {} failed", i + 1)))?;
    }
    tx.pragma_update(None, "user_version", known)
        .map_err(sql("cannot record the schema version"))?;
    tx.commit().map_err(sql("cannot commit the migration"))
}

/// A value in the database that this build cannot read.
#[derive(Debug, thiserror::Error)]
#[error("unreadable {what}: {value}")]
struct Unreadable {
    what: &'static str,
    value: String,
}

fn unreadable(col: usize, what: &'static str, value: impl Into<String>) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        col,
        Type::Text,
        Box::new(Unreadable {
            what,
            value: value.into(),
        }),
    )
}

/// Reads a fingerprint column: NULL or 32 bytes.
fn fingerprint_at(row: &rusqlite::Row<'_>, col: usize) -> rusqlite::Result<Option<Fingerprint>> {
    row.get::<_, Option<Vec<u8>>>(col)?
        .map(|b| {
            Fingerprint::from_slice(&b)
                .ok_or_else(|| unreadable(col, "fingerprint", format!("{} bytes", b.len())))
        })
        .transpose()
}

/// Reads a record whose columns, as [`SELECT_RECORD`] returns them, start at `at`. A value this
/// build does not know (a state, a holder) is an error, never a default.
pub(crate) fn record_at(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Record> {
    let state: String = row.get(at)?;
    let holder = match (
        row.get::<_, Option<String>>(at + 7)?,
        row.get::<_, Option<i64>>(at + 8)?,
    ) {
        (None, None) => None,
        (Some(instance), Some(boot)) => Some(Holder {
            instance: InstanceName::new(instance)
                .map_err(|e| unreadable(at + 7, "holder instance", e.to_string()))?,
            // Kept bit for bit, like the nonce.
            boot: boot as u64,
        }),
        (instance, boot) => {
            return Err(unreadable(
                at + 7,
                "holder",
                format!("instance {instance:?} with boot {boot:?}"),
            ));
        }
    };
    Ok(Record {
        state: RecordState::parse(&state)
            .ok_or_else(|| unreadable(at, "record state", state.clone()))?,
        attempt: row.get(at + 1)?,
        nonce: row.get::<_, i64>(at + 2)? as u64,
        fingerprint: fingerprint_at(row, at + 3)?,
        first_seen: Timestamp::from_millis(row.get(at + 4)?),
        lease_until: row
            .get::<_, Option<i64>>(at + 5)?
            .map(Timestamp::from_millis),
        expires_at: Timestamp::from_millis(row.get(at + 6)?),
        holder,
        completed: row.get(at + 9)?,
        result: result_at(row, at + 10)?,
    })
}

/// A record's result: its stored bytes at `at`, or the size of a withheld one at `at + 1`.
fn result_at(row: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<RecordResult> {
    match (
        row.get::<_, Option<Vec<u8>>>(at)?,
        row.get::<_, Option<i64>>(at + 1)?,
    ) {
        (None, None) => Ok(RecordResult::None),
        (Some(bytes), None) => StoredResult::decode(&bytes)
            .map(RecordResult::Stored)
            .map_err(|e| unreadable(at, "stored result", e.to_string())),
        (None, Some(size)) => Ok(RecordResult::Withheld {
            size: usize::try_from(size)
                .map_err(|e| unreadable(at + 1, "withheld result size", e.to_string()))?,
        }),
        (Some(_), Some(size)) => Err(unreadable(
            at,
            "stored result",
            format!("both stored and withheld ({size} bytes)"),
        )),
    }
}

fn read_record(conn: &Connection, key: &Key) -> rusqlite::Result<Option<Record>> {
    conn.prepare_cached(SELECT_RECORD)?
        .query_row(params![key.source.as_str(), key.event_id.as_str()], |row| {
            record_at(row, 0)
        })
        .optional()
}

impl ClaimStore for SqliteStore {
    #[tracing::instrument(name = "sqlite_claim", level = "debug", skip_all, fields(source = %req.key.source, event_id = %req.key.event_id))]
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        let sent = std::time::Instant::now();
        let outcome = self.send(|reply| Command::Claim(req, reply)).await;
        self.inner.claim_latency.record(sent.elapsed(), 1);
        outcome
    }

    #[tracing::instrument(name = "sqlite_complete", level = "debug", skip_all, fields(source = %token.key.source, event_id = %token.key.event_id))]
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        let token = token.clone();
        self.send(|reply| Command::Complete(token, reply)).await
    }

    #[tracing::instrument(name = "sqlite_complete", level = "debug", skip_all, fields(source = %token.key.source, event_id = %token.key.event_id, result = result.name()))]
    async fn complete_keeping(
        &self,
        token: &ClaimToken,
        result: RecordResult,
    ) -> Result<(), StoreError> {
        let token = token.clone();
        self.send(|reply| Command::CompleteKeeping(token, result, reply))
            .await
    }

    #[tracing::instrument(name = "sqlite_release", level = "debug", skip_all, fields(source = %token.key.source, event_id = %token.key.event_id))]
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        let token = token.clone();
        self.send(|reply| Command::Release(token, reply)).await
    }

    #[tracing::instrument(name = "sqlite_renew", level = "debug", skip_all, fields(source = %token.key.source, event_id = %token.key.event_id))]
    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        let token = token.clone();
        self.send(|reply| Command::Renew(token, lease, reply)).await
    }

    #[tracing::instrument(name = "sqlite_lookup", level = "debug", skip_all, fields(source = %key.source, event_id = %key.event_id))]
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        let key = key.clone();
        self.read(move |conn, now| {
            let failed = || sql(format!("cannot look up {key}"));
            let record = read_record(conn, &key)
                .map_err(failed())?
                .filter(|r| now < r.expires_at);
            let mut stmt = conn.prepare_cached(SELECT_HISTORY).map_err(failed())?;
            let history = stmt
                .query_map(params![key.source.as_str(), key.event_id.as_str()], |row| {
                    let outcome: String = row.get(0)?;
                    Ok(HistoryEntry {
                        outcome: HistoryOutcome::parse(&outcome)
                            .ok_or_else(|| unreadable(0, "history outcome", outcome.clone()))?,
                        processed: row.get(5)?,
                        attempt: row.get(1)?,
                        at: Timestamp::from_millis(row.get(2)?),
                        gap: row
                            .get::<_, Option<i64>>(3)?
                            .map(|ms| std::time::Duration::from_millis(ms.max(0) as u64)),
                        fingerprint: fingerprint_at(row, 4)?,
                        note: row.get(6)?,
                    })
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(failed())?;
            Ok(EventView {
                key,
                record,
                history,
            })
        })
        .await
    }

    #[tracing::instrument(name = "sqlite_record", level = "debug", skip_all, fields(source = %key.source, event_id = %key.event_id))]
    async fn record(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        let key = key.clone();
        self.read(move |conn, now| {
            Ok(read_record(conn, &key)
                .map_err(sql(format!("cannot read the record of {key}")))?
                .filter(|r| now < r.expires_at))
        })
        .await
    }
}

impl Identity for SqliteStore {
    fn store_id(&self) -> &str {
        &self.inner.store_id
    }
}

impl Instances for SqliteStore {
    #[tracing::instrument(name = "sqlite_register_boot", level = "debug", skip_all, fields(instance = %req.instance))]
    async fn register_boot(&self, req: &BootRequest) -> Result<Boot, StoreError> {
        let req = req.clone();
        self.send(|reply| Command::Boot(req, reply)).await
    }

    #[tracing::instrument(name = "sqlite_heartbeat", level = "debug", skip_all, fields(instance = %holder.instance))]
    async fn heartbeat(&self, holder: &Holder, lease: Duration) -> Result<Timestamp, StoreError> {
        let holder = holder.clone();
        self.send(|reply| Command::Heartbeat(holder, Some(lease), reply))
            .await
    }

    #[tracing::instrument(name = "sqlite_end_boot", level = "debug", skip_all, fields(instance = %holder.instance))]
    async fn end_boot(&self, holder: &Holder) -> Result<(), StoreError> {
        let holder = holder.clone();
        match self
            .send(|reply| Command::Heartbeat(holder, None, reply))
            .await
        {
            Ok(_) | Err(StoreError::Superseded { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Sweep for SqliteStore {
    #[tracing::instrument(name = "sqlite_sweep", level = "debug", skip(self))]
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        self.send(|reply| Command::Sweep(batch, reply)).await
    }

    /// Each claim's time as its caller saw it (the writer's own transaction times would miss
    /// the wait in its queue, which is where a sweep batch delays claims).
    fn claim_latency(&self) -> Option<&idemgate_core::sweep::ClaimLatency> {
        Some(&self.inner.claim_latency)
    }
}

impl HistoryQuery for SqliteStore {
    async fn has_source(&self, source: &SourceName) -> Result<bool, StoreError> {
        let source = source.as_str().to_owned();
        self.read(move |conn, _| {
            conn.query_row(
                "SELECT EXISTS (SELECT 1 FROM history WHERE source = ?1) \
                     OR EXISTS (SELECT 1 FROM dedup WHERE source = ?1)",
                params![source],
                |r| r.get(0),
            )
            .map_err(sql("cannot look for a source"))
        })
        .await
    }

    #[tracing::instrument(name = "sqlite_observe", level = "debug", skip(self))]
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        self.read(move |conn, now| {
            let failed = || sql("cannot read history");
            let mut stmt = conn
                .prepare_cached(include_str!("../sql/observe.sql"))
                .map_err(failed())?;
            let mut rows = stmt
                .query(params![now.minus(period).as_millis()])
                .map_err(failed())?;
            let mut tally = Tally::default();
            while let Some(row) = rows.next().map_err(failed())? {
                let source: String = row.get(0).map_err(failed())?;
                let outcome: String = row.get(1).map_err(failed())?;
                let gap: Option<i64> = row.get(2).map_err(failed())?;
                let at: i64 = row.get(3).map_err(failed())?;
                // Only valid names and known outcomes are ever stored.
                if let (Ok(source), Some(outcome)) =
                    (SourceName::new(source), HistoryOutcome::parse(&outcome))
                {
                    tally.add(
                        source.clone(),
                        outcome,
                        gap.map(|ms| Duration::from_millis(ms.max(0) as u64)),
                    );
                    tally.seen(&source, now.since(Timestamp::from_millis(at)));
                }
            }
            Ok(tally.finish(period))
        })
        .await
    }
}

impl idemgate_core::HistoryExport for SqliteStore {
    #[tracing::instrument(name = "sqlite_history_days", level = "debug", skip(self))]
    async fn history_days(
        &self,
        source: Option<&SourceName>,
        since: Timestamp,
        until: Timestamp,
    ) -> Result<idemgate_core::HistoryDays, StoreError> {
        let source = source.map(|s| s.as_str().to_owned());
        self.read(move |conn, now| {
            let failed = || sql("cannot count history per day");
            // Walks history_by_time over the range; one group per source and UTC day.
            let mut stmt = conn
                .prepare_cached(
                    "SELECT source, received_at - (received_at % 86400000) AS day, count(*) \
                     FROM history \
                     WHERE received_at >= ?1 AND received_at < ?2 AND (?3 IS NULL OR source = ?3) \
                     GROUP BY day, source ORDER BY day, source",
                )
                .map_err(failed())?;
            let mut rows = stmt
                .query(params![since.as_millis(), until.as_millis(), source])
                .map_err(failed())?;
            let mut days = Vec::new();
            while let Some(row) = rows.next().map_err(failed())? {
                let source: String = row.get(0).map_err(failed())?;
                let n: i64 = row.get(2).map_err(failed())?;
                days.push(idemgate_core::HistoryDay {
                    source: SourceName::new(source.clone())
                        .map_err(|_| unreadable(0, "history source", source))
                        .map_err(failed())?,
                    start: Timestamp::from_millis(row.get(1).map_err(failed())?),
                    rows: n.max(0) as u64,
                    partition: "sqlite".to_owned(),
                });
            }
            Ok(idemgate_core::HistoryDays { now, days })
        })
        .await
    }

    #[tracing::instrument(name = "sqlite_history_rows", level = "debug", skip(self))]
    async fn history_rows(
        &self,
        source: &SourceName,
        from: Timestamp,
        until: Timestamp,
        after: Option<idemgate_core::HistoryCursor>,
        limit: NonZeroU32,
    ) -> Result<Vec<idemgate_core::HistoryRow>, StoreError> {
        let source = source.clone();
        self.read(move |conn, _| {
            let failed = || sql("cannot read history rows");
            let (after_at, after_id) = after.map_or((i64::MIN, i64::MIN), |c| (c.position, c.id));
            // history_by_source_time gives (source, received_at) order; ties by id.
            let mut stmt = conn
                .prepare_cached(
                    "SELECT event_id, outcome, attempt, received_at, gap_ms, fingerprint, processed, note, id \
                     FROM history \
                     WHERE source = ?1 AND received_at >= ?2 AND received_at < ?3 \
                       AND (received_at > ?4 OR (received_at = ?4 AND id > ?5)) \
                     ORDER BY received_at, id LIMIT ?6",
                )
                .map_err(failed())?;
            let rows = stmt
                .query_map(
                    params![
                        source.as_str(),
                        from.as_millis(),
                        until.as_millis(),
                        after_at,
                        after_id,
                        limit.get()
                    ],
                    |row| {
                        let event_id: String = row.get(0)?;
                        let outcome: String = row.get(1)?;
                        let at = Timestamp::from_millis(row.get(3)?);
                        Ok(idemgate_core::HistoryRow {
                            source: source.clone(),
                            event_id: idemgate_core::EventId::new(event_id.clone())
                                .map_err(|_| unreadable(0, "history event id", event_id))?,
                            entry: HistoryEntry {
                                outcome: HistoryOutcome::parse(&outcome)
                                    .ok_or_else(|| unreadable(1, "history outcome", outcome.clone()))?,
                                processed: row.get(6)?,
                                attempt: row.get(2)?,
                                at,
                                gap: row
                                    .get::<_, Option<i64>>(4)?
                                    .map(|ms| std::time::Duration::from_millis(ms.max(0) as u64)),
                                fingerprint: fingerprint_at(row, 5)?,
                                note: row.get(7)?,
                            },
                            cursor: idemgate_core::HistoryCursor {
                                position: at.as_millis(),
                                id: row.get(8)?,
                            },
                        })
                    },
                )
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(failed())?;
            Ok(rows)
        })
        .await
    }

    #[tracing::instrument(name = "sqlite_history_past", level = "debug", skip(self))]
    async fn history_past(
        &self,
        retention: Duration,
    ) -> Result<Vec<idemgate_core::RetentionUnit>, StoreError> {
        self.read(move |conn, now| {
            const DAY: i64 = 86_400_000;
            // The oldest row, off history_by_time.
            let oldest: Option<i64> = conn
                .query_row("SELECT min(received_at) FROM history", [], |r| r.get(0))
                .map_err(sql("cannot read the oldest history row"))?;
            let cutoff = now.minus(retention).as_millis();
            let mut units = Vec::new();
            let Some(oldest) = oldest else {
                return Ok(units);
            };
            let mut day = oldest.div_euclid(DAY) * DAY;
            while day + DAY <= cutoff {
                let from = Timestamp::from_millis(day);
                units.push(idemgate_core::RetentionUnit {
                    name: from.to_string()[..10].to_owned(),
                    from,
                    until: Timestamp::from_millis(day + DAY),
                });
                day += DAY;
            }
            Ok(units)
        })
        .await
    }

    async fn drop_history(
        &self,
        unit: &idemgate_core::RetentionUnit,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        let before = unit.until;
        self.send(|reply| Command::PurgeHistory(retention, Some(before), batch, reply))
            .await
    }
}

impl Timeline for SqliteStore {
    #[tracing::instrument(name = "sqlite_recent", level = "debug", skip(self))]
    async fn recent(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
    ) -> Result<Vec<idemgate_core::Recent>, StoreError> {
        let source = source.as_str().to_owned();
        self.read(move |conn, _| {
            let failed = || sql("cannot read recent history");
            // Walks history_by_source_time backwards from now.
            let mut stmt = conn
                .prepare_cached(
                    "SELECT event_id, outcome, received_at, attempt FROM history \
                     WHERE source = ?1 ORDER BY received_at DESC LIMIT ?2",
                )
                .map_err(failed())?;
            let mut rows = stmt.query(params![source, limit.get()]).map_err(failed())?;
            let mut recent = Vec::new();
            while let Some(row) = rows.next().map_err(failed())? {
                let event_id: String = row.get(0).map_err(failed())?;
                let outcome: String = row.get(1).map_err(failed())?;
                let (Ok(event_id), Some(outcome)) = (
                    idemgate_core::EventId::new(event_id),
                    HistoryOutcome::parse(&outcome),
                ) else {
                    continue;
                };
                recent.push(idemgate_core::Recent {
                    event_id,
                    outcome,
                    at: Timestamp::from_millis(row.get(2).map_err(failed())?),
                    attempt: row.get(3).map_err(failed())?,
                });
            }
            Ok(recent)
        })
        .await
    }

    #[tracing::instrument(name = "sqlite_timeline", level = "debug", skip(self))]
    async fn timeline(
        &self,
        source: &SourceName,
        bucket_secs: NonZeroU32,
        buckets: NonZeroU32,
    ) -> Result<TimelineCounts, StoreError> {
        let source = source.as_str().to_owned();
        self.read(move |conn, now| {
            let failed = || sql("cannot count history");
            let (start, width) = TimelineCounts::window(now, bucket_secs, buckets);
            let mut stmt = conn
                .prepare_cached(include_str!("../sql/timeline.sql"))
                .map_err(failed())?;
            let mut rows = stmt
                .query(params![source, start.as_millis(), width.as_millis() as i64])
                .map_err(failed())?;
            let mut counts = Vec::new();
            while let Some(row) = rows.next().map_err(failed())? {
                let bucket: i64 = row.get(0).map_err(failed())?;
                let outcome: String = row.get(1).map_err(failed())?;
                let n: i64 = row.get(2).map_err(failed())?;
                // Only known outcomes are ever stored.
                if let Some(outcome) = HistoryOutcome::parse(&outcome) {
                    counts.push((bucket, outcome, n.max(0) as u64));
                }
            }
            Ok(TimelineCounts::from_rows(now, bucket_secs, buckets, counts))
        })
        .await
    }
}

impl HistoryRetention for SqliteStore {
    #[tracing::instrument(name = "sqlite_purge_history", level = "debug", skip_all)]
    async fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        self.send(|reply| Command::PurgeHistory(retention, None, batch, reply))
            .await
    }
}

/// Inbox mode: every write is one writer command (one transaction); reads go to the readers.
impl Inbox for SqliteStore {
    #[tracing::instrument(name = "sqlite_enqueue", level = "debug", skip_all, fields(source = %req.key.source, event_id = %req.key.event_id))]
    async fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> Result<ClaimOutcome, StoreError> {
        self.send(|reply| Command::Enqueue(req, item, reply)).await
    }

    #[tracing::instrument(name = "sqlite_requeue", level = "debug", skip_all, fields(source = %req.key.source, event_id = %req.key.event_id))]
    async fn requeue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        let reason = reason.to_owned();
        self.send(|reply| Command::Requeue(req, item, reason, reply))
            .await
    }

    #[tracing::instrument(name = "sqlite_take", level = "debug", skip_all, fields(source = %source, limit = limit.get()))]
    async fn take(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&Holder>,
    ) -> Result<Vec<Taken>, StoreError> {
        let args = TakeArgs {
            source: source.clone(),
            limit,
            lease,
            holder: holder.cloned(),
        };
        self.send(|reply| Command::Take(args, reply)).await
    }

    #[tracing::instrument(name = "sqlite_delivered", level = "debug", skip_all, fields(source = %item.key.source, event_id = %item.key.event_id, item = item.id))]
    async fn delivered(&self, item: ItemRef) -> Result<(), StoreError> {
        self.send(|reply| Command::Delivered(item, reply)).await
    }

    #[tracing::instrument(name = "sqlite_retry_later", level = "debug", skip_all, fields(source = %item.key.source, event_id = %item.key.event_id, item = item.id))]
    async fn retry_later(
        &self,
        item: ItemRef,
        failure: &Failure,
        delay: Duration,
    ) -> Result<(), StoreError> {
        let failure = failure.clone();
        self.send(|reply| Command::RetryLater(item, failure, delay, reply))
            .await
    }

    #[tracing::instrument(name = "sqlite_dead_letter", level = "debug", skip_all, fields(source = %item.key.source, event_id = %item.key.event_id, item = item.id))]
    async fn dead_letter(&self, item: ItemRef, failure: &Failure) -> Result<(), StoreError> {
        let failure = failure.clone();
        self.send(|reply| Command::DeadLetter(item, failure, reply))
            .await
    }

    #[tracing::instrument(name = "sqlite_dead_letters", level = "debug", skip_all, fields(source = filter.source.as_ref().map(SourceName::as_str)))]
    async fn dead_letters(
        &self,
        filter: &ReplayFilter,
        limit: NonZeroU32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let filter = filter.clone();
        self.read(move |conn, now| {
            inbox::read_dead_letters(conn, &filter, limit, now)
                .map_err(sql("cannot read dead letters"))
        })
        .await
    }

    #[tracing::instrument(name = "sqlite_queued", level = "debug", skip_all, fields(source = %key.source, event_id = %key.event_id))]
    async fn queued(&self, key: &Key) -> Result<Vec<QueueEntry>, StoreError> {
        let key = key.clone();
        self.read(move |conn, now| {
            inbox::read_queued(conn, &key, now).map_err(sql("cannot read an event's queue items"))
        })
        .await
    }

    #[tracing::instrument(name = "sqlite_replay_dead_letters", level = "debug", skip_all, fields(source = filter.source.as_ref().map(SourceName::as_str)))]
    async fn replay_dead_letters(
        &self,
        filter: &ReplayFilter,
        reason: &str,
    ) -> Result<u64, StoreError> {
        let (filter, reason) = (filter.clone(), reason.to_owned());
        self.send(|reply| Command::Replay(filter, reason, reply))
            .await
    }

    #[tracing::instrument(name = "sqlite_purge_dead_letters", level = "debug", skip_all)]
    async fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        self.send(|reply| Command::PurgeDeadLetters(retention, batch, reply))
            .await
    }

    #[tracing::instrument(name = "sqlite_inbox_stats", level = "debug", skip_all)]
    async fn inbox_stats(&self) -> Result<Vec<InboxStats>, StoreError> {
        self.read(move |conn, now| {
            inbox::read_stats(conn, now).map_err(sql("cannot count the inbox"))
        })
        .await
    }
}

impl Stats for SqliteStore {
    #[tracing::instrument(name = "sqlite_stats", level = "debug", skip_all)]
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let path = self.inner.path.clone();
        self.read(move |conn, now| {
            let failed = || sql("cannot count records");
            let mut stmt = conn
                .prepare_cached(include_str!("../sql/stats.sql"))
                .map_err(failed())?;
            let per_source = stmt
                .query_map(params![now.as_millis()], |row| {
                    let source: String = row.get(0)?;
                    Ok((
                        source,
                        row.get::<_, i64>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, i64>(3)?,
                    ))
                })
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(failed())?
                .into_iter()
                .filter_map(|(source, live, expired, oldest)| {
                    Some(SourceStats {
                        // Only valid names are ever stored.
                        source: SourceName::new(source).ok()?,
                        live: live as u64,
                        expired: expired as u64,
                        oldest: Some(Timestamp::from_millis(oldest)),
                    })
                })
                .collect::<Vec<_>>();
            let history_rows: i64 = conn
                .query_row("SELECT count(*) FROM history", [], |r| r.get(0))
                .map_err(failed())?;
            let size = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            let mut wal = path.clone().into_os_string();
            wal.push("-wal");
            Ok(StoreStats {
                live: per_source.iter().map(|s| s.live).sum(),
                expired: per_source.iter().map(|s| s.expired).sum(),
                oldest: per_source.iter().filter_map(|s| s.oldest).min(),
                per_source,
                size_bytes: Some(size(path.clone()) + size(PathBuf::from(wal))),
                history_rows: history_rows as u64,
            })
        })
        .await
    }
}

impl idemgate_core::Capabilities for SqliteStore {
    fn engine(&self) -> &'static str {
        "sqlite"
    }
    fn instances(&self) -> Option<&dyn idemgate_core::object::DynInstances> {
        Some(self)
    }
    fn sweep(&self) -> Option<&dyn idemgate_core::object::DynSweep> {
        Some(self)
    }
    fn history(&self) -> Option<&dyn idemgate_core::object::DynHistory> {
        Some(self)
    }
    fn stats(&self) -> Option<&dyn idemgate_core::object::DynStats> {
        Some(self)
    }
    fn timeline(&self) -> Option<&dyn idemgate_core::object::DynTimeline> {
        Some(self)
    }
    fn export(&self) -> Option<&dyn idemgate_core::object::DynHistoryExport> {
        Some(self)
    }
    fn inbox(&self) -> Option<&dyn idemgate_core::object::DynInbox> {
        Some(self)
    }
    fn clock(&self) -> Option<&dyn idemgate_core::Clock> {
        Some(self.clock().as_ref())
    }
    fn schema_version(
        &self,
    ) -> idemgate_core::BoxFuture<'_, Result<Option<(i64, i64)>, StoreError>> {
        Box::pin(async { self.schema_version().await.map(Some) })
    }
}
