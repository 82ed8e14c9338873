//! The writer thread: one connection, group commit.
//!
//! The thread blocks for the first command, then takes every command already waiting (up to
//! `batch_max`), so under load one transaction (one fsync) carries many claims, and with one
//! caller each claim commits at once. Each command runs in its own savepoint: one that fails rolls
//! back alone. Callers hear their answers only after COMMIT returned; if COMMIT fails, every
//! caller in the batch hears the error and nothing of the batch is kept.

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idemgate_core::claim::{ClaimOutcome, ClaimRequest, ClaimToken, HistoryOutcome, Record};
use idemgate_core::machine::{self, FinishStep};
use idemgate_core::store::StoreError;
use idemgate_core::{Clock, Fingerprint, Key, Timestamp};
use rusqlite::{Connection, Transaction, params};
use tokio::sync::{mpsc, oneshot};

use crate::{read_record, sql};

/// Counts of the writer's work, for metrics and for seeing group commit at work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub commits: u64,
    /// Commands (claims, completes, releases, sweep batches) in those transactions.
    pub commands: u64,
    /// The most commands one transaction carried.
    pub largest_batch: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    commits: AtomicU64,
    commands: AtomicU64,
    largest_batch: AtomicU64,
}

impl Counters {
    fn committed(&self, size: usize) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.commands.fetch_add(size as u64, Ordering::Relaxed);
        self.largest_batch.fetch_max(size as u64, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> WriterStats {
        WriterStats {
            commits: self.commits.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            largest_batch: self.largest_batch.load(Ordering::Relaxed),
        }
    }
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// What callers ask the writer.
#[derive(Debug)]
pub(crate) enum Command {
    Claim(ClaimRequest, Reply<ClaimOutcome>),
    Complete(ClaimToken, Reply<()>),
    Release(ClaimToken, Reply<()>),
    Sweep(NonZeroU32, Reply<u64>),
}

/// An answer held until the batch commits.
enum Pending {
    Claim(Reply<ClaimOutcome>, Result<ClaimOutcome, StoreError>),
    Unit(Reply<()>, Result<(), StoreError>),
    Count(Reply<u64>, Result<u64, StoreError>),
}

impl Pending {
    /// Sends the answer, or the commit's failure instead of a success.
    fn answer(self, commit: Result<(), &rusqlite::Error>) {
        fn pick<T>(
            result: Result<T, StoreError>,
            commit: Result<(), &rusqlite::Error>,
        ) -> Result<T, StoreError> {
            match (result, commit) {
                (Ok(_), Err(e)) => Err(StoreError::backend(
                    "the transaction did not commit",
                    e.to_string(),
                )),
                (result, _) => result,
            }
        }
        // A caller that stopped waiting has no one to tell.
        let _ = match self {
            Self::Claim(tx, r) => tx.send(pick(r, commit)).map_err(drop),
            Self::Unit(tx, r) => tx.send(pick(r, commit)).map_err(drop),
            Self::Count(tx, r) => tx.send(pick(r, commit)).map_err(drop),
        };
    }
}

pub(crate) fn spawn(
    conn: Connection,
    rx: mpsc::Receiver<Command>,
    batch_max: usize,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
    path: &Path,
) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("idemgate-sqlite-writer".into())
        .spawn(move || run(conn, rx, batch_max, &*clock, &counters))
        .map(drop)
        .map_err(|e| {
            StoreError::backend(format!("cannot start the writer for {}", path.display()), e)
        })
}

fn run(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Command>,
    batch_max: usize,
    clock: &dyn Clock,
    counters: &Counters,
) {
    let mut batch = Vec::with_capacity(batch_max);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < batch_max {
            match rx.try_recv() {
                Ok(cmd) => batch.push(cmd),
                Err(_) => break,
            }
        }
        let size = batch.len();
        let mut pending = Vec::with_capacity(size);
        let commit = apply_batch(&mut conn, &mut batch, &mut pending, clock.now());
        match &commit {
            Ok(()) => counters.committed(size),
            Err(e) => {
                tracing::error!(size, error = %e, "a batch failed to commit; its callers were told")
            }
        }
        for p in pending {
            p.answer(commit.as_ref().map(|_| ()));
        }
    }
    tracing::debug!("writer stopped: every handle to the store was dropped");
}

fn apply_batch(
    conn: &mut Connection,
    batch: &mut Vec<Command>,
    pending: &mut Vec<Pending>,
    now: Timestamp,
) -> Result<(), rusqlite::Error> {
    let mut tx = match conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => {
            let msg = e.to_string();
            pending.extend(batch.drain(..).map(|cmd| {
                fail(cmd, || {
                    StoreError::backend("the transaction did not begin", msg.clone())
                })
            }));
            return Err(e);
        }
    };
    for cmd in batch.drain(..) {
        pending.push(apply(&mut tx, cmd, now));
    }
    tx.commit()
}

/// Answers a command with an error without running it.
fn fail(cmd: Command, err: impl Fn() -> StoreError) -> Pending {
    match cmd {
        Command::Claim(_, r) => Pending::Claim(r, Err(err())),
        Command::Complete(_, r) | Command::Release(_, r) => Pending::Unit(r, Err(err())),
        Command::Sweep(_, r) => Pending::Count(r, Err(err())),
    }
}

/// Runs one command in its own savepoint.
fn apply(tx: &mut Transaction<'_>, cmd: Command, now: Timestamp) -> Pending {
    let mut sp = match tx.savepoint() {
        Ok(sp) => sp,
        Err(e) => {
            return fail(cmd, || {
                StoreError::backend("cannot open a savepoint", e.to_string())
            });
        }
    };
    let (pending, ok) = match cmd {
        Command::Claim(req, reply) => {
            let r = claim(&sp, &req, now);
            let ok = r.is_ok();
            (Pending::Claim(reply, r), ok)
        }
        Command::Complete(token, reply) => {
            let r = finish(&sp, &token, now, machine::complete);
            let ok = r.is_ok();
            (Pending::Unit(reply, r), ok)
        }
        Command::Release(token, reply) => {
            let r = finish(&sp, &token, now, machine::release);
            let ok = r.is_ok();
            (Pending::Unit(reply, r), ok)
        }
        Command::Sweep(batch, reply) => {
            let r = sp
                .prepare_cached(include_str!("../sql/sweep.sql"))
                .and_then(|mut s| s.execute(params![now.as_millis(), batch.get()]))
                .map(|n| n as u64)
                .map_err(sql("cannot delete expired records"));
            let ok = r.is_ok();
            (Pending::Count(reply, r), ok)
        }
    };
    // A failed command leaves nothing behind; the others in the batch go on.
    let end = if ok {
        sp.commit()
    } else {
        sp.rollback().and_then(|()| sp.commit())
    };
    match end {
        Ok(()) => pending,
        Err(e) => {
            let err = StoreError::backend("cannot close a savepoint", e.to_string());
            match pending {
                Pending::Claim(r, _) => Pending::Claim(r, Err(err)),
                Pending::Unit(r, _) => Pending::Unit(r, Err(err)),
                Pending::Count(r, _) => Pending::Count(r, Err(err)),
            }
        }
    }
}

fn claim(
    conn: &Connection,
    req: &ClaimRequest,
    now: Timestamp,
) -> Result<ClaimOutcome, StoreError> {
    let failed = || sql(format!("cannot claim {}", req.key));
    let stored = read_record(conn, &req.key).map_err(failed())?;
    let step = machine::claim(req, stored.as_ref(), now, machine::nonce());
    if let Some(rec) = &step.write {
        write_record(conn, &req.key, rec).map_err(failed())?;
    }
    append_history(
        conn,
        &req.key,
        step.history,
        step.attempt,
        now,
        step.gap.map(|g| g.as_millis() as i64),
        req.fingerprint.as_ref(),
    )
    .map_err(failed())?;
    Ok(step.outcome)
}

fn finish(
    conn: &Connection,
    token: &ClaimToken,
    now: Timestamp,
    decide: fn(&ClaimToken, Option<&Record>, Timestamp) -> Option<FinishStep>,
) -> Result<(), StoreError> {
    let failed = || sql(format!("cannot finish the claim of {}", token.key));
    let stored = read_record(conn, &token.key).map_err(failed())?;
    let step = decide(token, stored.as_ref(), now).ok_or_else(|| StoreError::StaleToken {
        key: token.key.clone(),
        attempt: token.attempt,
    })?;
    let fingerprint = stored.as_ref().and_then(|r| r.fingerprint);
    let outcome = match step {
        FinishStep::Nothing => return Ok(()),
        FinishStep::Update(rec, outcome) => {
            write_record(conn, &token.key, &rec).map_err(failed())?;
            outcome
        }
        FinishStep::Delete(outcome) => {
            conn.prepare_cached("DELETE FROM dedup WHERE source = ?1 AND event_id = ?2")
                .and_then(|mut s| {
                    s.execute(params![
                        token.key.source.as_str(),
                        token.key.event_id.as_str()
                    ])
                })
                .map_err(failed())?;
            outcome
        }
    };
    append_history(
        conn,
        &token.key,
        outcome,
        Some(token.attempt),
        now,
        None,
        fingerprint.as_ref(),
    )
    .map_err(failed())
}

fn write_record(conn: &Connection, key: &Key, rec: &Record) -> rusqlite::Result<()> {
    conn.prepare_cached(include_str!("../sql/record_upsert.sql"))?
        .execute(params![
            key.source.as_str(),
            key.event_id.as_str(),
            rec.state.as_str(),
            rec.attempt,
            rec.nonce as i64,
            rec.fingerprint.as_ref().map(|f| f.as_bytes().as_slice()),
            rec.first_seen.as_millis(),
            rec.lease_until.map(Timestamp::as_millis),
            rec.expires_at.as_millis(),
        ])
        .map(drop)
}

fn append_history(
    conn: &Connection,
    key: &Key,
    outcome: HistoryOutcome,
    attempt: Option<u32>,
    now: Timestamp,
    gap_ms: Option<i64>,
    fingerprint: Option<&Fingerprint>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(include_str!("../sql/history_insert.sql"))?
        .execute(params![
            key.source.as_str(),
            key.event_id.as_str(),
            outcome.as_str(),
            attempt,
            now.as_millis(),
            gap_ms,
            fingerprint.map(|f| f.as_bytes().as_slice()),
        ])
        .map(drop)
}
