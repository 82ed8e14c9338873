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
use idemgate_core::inbox::{Failure, ItemRef, QueuedItem, ReplayFilter, Taken};
use idemgate_core::machine::{self, BootRow, FinishStep};
use idemgate_core::store::{Boot, BootRequest, StoreError};
use idemgate_core::{Clock, Holder, InstanceName, Key, RecordResult, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::inbox::{self, TakeArgs};
use crate::records::{Row, append_history, claim, write_record};
use crate::{read_record, record_at, sql};

/// Counts of the writer's work, for metrics and for seeing group commit at work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions committed.
    pub commits: u64,
    /// Commands (claims, completes, releases, renewals, boots, sweep batches, inbox steps) in
    /// those transactions.
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
    /// Complete, the record keeping the result.
    CompleteKeeping(ClaimToken, RecordResult, Reply<()>),
    Release(ClaimToken, Reply<()>),
    Renew(ClaimToken, Duration, Reply<Timestamp>),
    /// Register a new boot of an instance and free its earlier boots' claims.
    Boot(BootRequest, Reply<Boot>),
    /// Renew a boot's liveness lease by the duration, or (`None`) end it now.
    Heartbeat(Holder, Option<Duration>, Reply<Timestamp>),
    Sweep(NonZeroU32, Reply<u64>),
    /// Delete history older than the retention, in one bounded batch.
    /// Delete history older than the retention (and, if set, received before the time), in
    /// one bounded batch.
    PurgeHistory(Duration, Option<Timestamp>, NonZeroU32, Reply<u64>),
    /// Claim (on receipt) and queue the item when the claim is won.
    Enqueue(ClaimRequest, QueuedItem, Reply<ClaimOutcome>),
    /// An operator's forced replay: claim (on receipt) and queue the item whatever the claim
    /// answers, with the reason.
    Requeue(ClaimRequest, QueuedItem, String, Reply<ClaimOutcome>),
    Take(TakeArgs, Reply<Vec<Taken>>),
    Delivered(ItemRef, Reply<()>),
    RetryLater(ItemRef, Failure, Duration, Reply<()>),
    DeadLetter(ItemRef, Failure, Reply<()>),
    /// Move dead letters back to the queue, with the reason.
    Replay(ReplayFilter, String, Reply<u64>),
    /// Delete dead letters older than the retention, in one bounded batch.
    PurgeDeadLetters(Duration, NonZeroU32, Reply<u64>),
}

/// A command's answer, held until its transaction commits.
enum Answer {
    Claim(Result<ClaimOutcome, StoreError>),
    Unit(Result<(), StoreError>),
    Count(Result<u64, StoreError>),
    Time(Result<Timestamp, StoreError>),
    Boot(Result<Boot, StoreError>),
    Taken(Result<Vec<Taken>, StoreError>),
}

impl Answer {
    /// Whether the engine failed (a stale token is an answer, not a failure).
    fn failed(&self) -> bool {
        let backend = |e: &StoreError| matches!(e, StoreError::Backend { .. });
        match self {
            Self::Claim(r) => r.as_ref().err().is_some_and(backend),
            Self::Unit(r) => r.as_ref().err().is_some_and(backend),
            Self::Count(r) => r.as_ref().err().is_some_and(backend),
            Self::Time(r) => r.as_ref().err().is_some_and(backend),
            Self::Boot(r) => r.as_ref().err().is_some_and(backend),
            Self::Taken(r) => r.as_ref().err().is_some_and(backend),
        }
    }
}

impl Command {
    /// Sends `answer` (or, when the batch failed, the batch's error) to the caller. A caller that
    /// stopped waiting has no one to tell.
    fn reply(self, answer: Result<Answer, &str>) {
        fn pick<T>(
            answer: Result<Answer, &str>,
            take: impl FnOnce(Answer) -> Option<Result<T, StoreError>>,
        ) -> Result<T, StoreError> {
            let why = match answer {
                Ok(a) => match take(a) {
                    Some(r) => return r,
                    None => "the writer mixed up its answers",
                },
                Err(why) => why,
            };
            Err(StoreError::backend(
                "the transaction did not commit",
                why.to_owned(),
            ))
        }
        match self {
            Command::Claim(_, tx) | Command::Enqueue(_, _, tx) | Command::Requeue(_, _, _, tx) => {
                drop(tx.send(pick(answer, |a| match a {
                    Answer::Claim(r) => Some(r),
                    _ => None,
                })))
            }
            Command::Complete(_, tx)
            | Command::CompleteKeeping(_, _, tx)
            | Command::Release(_, tx)
            | Command::Delivered(_, tx)
            | Command::RetryLater(_, _, _, tx)
            | Command::DeadLetter(_, _, tx) => drop(tx.send(pick(answer, |a| match a {
                Answer::Unit(r) => Some(r),
                _ => None,
            }))),
            Command::Renew(_, _, tx) | Command::Heartbeat(_, _, tx) => {
                drop(tx.send(pick(answer, |a| match a {
                    Answer::Time(r) => Some(r),
                    _ => None,
                })))
            }
            Command::Boot(_, tx) => drop(tx.send(pick(answer, |a| match a {
                Answer::Boot(r) => Some(r),
                _ => None,
            }))),
            Command::Take(_, tx) => drop(tx.send(pick(answer, |a| match a {
                Answer::Taken(r) => Some(r),
                _ => None,
            }))),
            Command::Sweep(_, tx)
            | Command::PurgeHistory(_, _, _, tx)
            | Command::Replay(_, _, tx)
            | Command::PurgeDeadLetters(_, _, tx) => drop(tx.send(pick(answer, |a| match a {
                Answer::Count(r) => Some(r),
                _ => None,
            }))),
        }
    }
}

pub(crate) fn spawn(
    conn: Connection,
    rx: mpsc::Receiver<Command>,
    batching: Batching,
    clock: Arc<dyn Clock>,
    counters: Arc<Counters>,
    path: &Path,
) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("idemgate-sqlite-writer".into())
        .spawn(move || run(conn, &rx, batching, &*clock, &counters))
        .map(drop)
        .map_err(|e| {
            StoreError::backend(format!("cannot start the writer for {}", path.display()), e)
        })
}

/// How the writer gathers a batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batching {
    pub max: usize,
    pub linger: Duration,
}

/// How many recent batch sizes the writer remembers when deciding whether to wait for more.
const RECENT: usize = 8;

fn run(
    mut conn: Connection,
    rx: &mpsc::Receiver<Command>,
    batching: Batching,
    clock: &dyn Clock,
    counters: &Counters,
) {
    let mut batch = Vec::with_capacity(batching.max);
    let mut recent = [1usize; RECENT];
    let mut turn = 0;
    let mut steps = StepWatch::new(clock);
    while let Ok(first) = rx.recv() {
        batch.push(first);
        // Callers answered by the last commits come back with their next command within a few
        // microseconds; committing before they do halves the batch. Wait for as many commands as
        // recent batches held, but never longer than `linger`.
        let target = recent.iter().copied().max().unwrap_or(1).min(batching.max);
        let deadline = Instant::now() + batching.linger;
        while batch.len() < batching.max {
            match rx.try_recv() {
                Ok(cmd) => batch.push(cmd),
                Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) if batch.len() >= target => break,
                Err(TryRecvError::Empty) => {
                    match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                        Ok(cmd) => batch.push(cmd),
                        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                    }
                }
            }
        }
        recent[turn % RECENT] = batch.len();
        turn += 1;
        let size = batch.len();
        steps.check(clock);
        match commit_batch(&mut conn, &batch, clock.now()) {
            Ok(answers) => {
                counters.committed(size);
                for (cmd, answer) in batch.drain(..).zip(answers) {
                    cmd.reply(Ok(answer));
                }
            }
            Err(e) => {
                tracing::error!(size, error = %e, "a batch failed to commit; its callers were told");
                let why = e.to_string();
                for cmd in batch.drain(..) {
                    cmd.reply(Err(&why));
                }
            }
        }
    }
    tracing::debug!("writer stopped: every handle to the store was dropped");
}

/// Says when the host's wall clock steps away from the store's clock (which rides the step out:
/// [`idemgate_core::SteadyClock`]), once per step, looking at most once a second.
struct StepWatch {
    checked: Instant,
    seen_ms: Option<i64>,
}

impl StepWatch {
    fn new(clock: &dyn Clock) -> Self {
        Self {
            checked: Instant::now(),
            seen_ms: clock.wall_divergence_ms(),
        }
    }

    fn check(&mut self, clock: &dyn Clock) {
        if self.checked.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.checked = Instant::now();
        let Some(now) = clock.wall_divergence_ms() else {
            return;
        };
        // The store's clock follows the wall clock by at most 10 ms a second: a change of a
        // second or more since the last look is the wall clock's own step.
        if let Some(seen) = self.seen_ms
            && (now - seen).abs() >= 1_000
        {
            tracing::warn!(
                step_ms = now - seen,
                wall_ahead_ms = now,
                "the host's wall clock stepped; the store keeps its own time (leases and expiries of this process are unaffected) and follows the wall clock at 1% of the time that passes"
            );
        }
        self.seen_ms = Some(now);
    }
}

/// Runs a batch in one transaction and commits it.
///
/// The fast path runs every command straight in the transaction. If the engine fails on one, the
/// transaction is rolled back and the batch runs again with each command in its own savepoint, so
/// the failure is that command's alone and the others still commit.
fn commit_batch(
    conn: &mut Connection,
    batch: &[Command],
    now: Timestamp,
) -> rusqlite::Result<Vec<Answer>> {
    match run_batch(conn, batch, now, false)? {
        Some(answers) => Ok(answers),
        None => run_batch(conn, batch, now, true).map(|a| a.unwrap_or_default()),
    }
}

/// `Ok(None)`: a command failed on the fast path; nothing was kept.
fn run_batch(
    conn: &mut Connection,
    batch: &[Command],
    now: Timestamp,
    isolate: bool,
) -> rusqlite::Result<Option<Vec<Answer>>> {
    let mut tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut answers = Vec::with_capacity(batch.len());
    for cmd in batch {
        if isolate {
            let mut sp = tx.savepoint()?;
            let answer = execute(&sp, cmd, now);
            if answer.failed() {
                sp.rollback()?;
            }
            sp.commit()?;
            answers.push(answer);
        } else {
            let answer = execute(&tx, cmd, now);
            if answer.failed() {
                // Dropping the transaction rolls it back.
                return Ok(None);
            }
            answers.push(answer);
        }
    }
    tx.commit()?;
    Ok(Some(answers))
}

fn execute(conn: &Connection, cmd: &Command, now: Timestamp) -> Answer {
    match cmd {
        Command::Claim(req, _) => Answer::Claim(claim(conn, req, now)),
        Command::Complete(token, _) => Answer::Unit(finish(conn, token, now, machine::complete)),
        Command::CompleteKeeping(token, result, _) => {
            Answer::Unit(finish(conn, token, now, |token, stored, now| {
                machine::complete_keeping(token, stored, now, result.clone())
            }))
        }
        Command::Release(token, _) => Answer::Unit(finish(conn, token, now, machine::release)),
        Command::Renew(token, lease, _) => Answer::Time(renew(conn, token, *lease, now)),
        Command::Boot(req, _) => Answer::Boot(boot(conn, req, now)),
        Command::Heartbeat(holder, lease, _) => Answer::Time(heartbeat(conn, holder, *lease, now)),
        Command::Sweep(batch, _) => Answer::Count(
            conn.prepare_cached(include_str!("../sql/sweep.sql"))
                .and_then(|mut s| s.execute(params![now.as_millis(), batch.get()]))
                .map(|n| n as u64)
                .map_err(sql("cannot delete expired records")),
        ),
        Command::PurgeHistory(retention, before, batch, _) => Answer::Count(
            conn.prepare_cached(include_str!("../sql/purge_history.sql"))
                .and_then(|mut s| {
                    let cutoff = now.minus(*retention);
                    let cutoff = before.map_or(cutoff, |b| b.min(cutoff));
                    s.execute(params![cutoff.as_millis(), batch.get()])
                })
                .map(|n| n as u64)
                .map_err(sql("cannot delete old history")),
        ),
        Command::Enqueue(req, item, _) => Answer::Claim(inbox::enqueue(conn, req, item, now)),
        Command::Requeue(req, item, reason, _) => {
            Answer::Claim(inbox::requeue(conn, req, item, reason, now))
        }
        Command::Take(args, _) => Answer::Taken(inbox::take(conn, args, now)),
        Command::Delivered(item, _) => Answer::Unit(inbox::delivered(conn, item, now)),
        Command::RetryLater(item, failure, delay, _) => {
            Answer::Unit(inbox::retry_later(conn, item, failure, *delay, now))
        }
        Command::DeadLetter(item, failure, _) => {
            Answer::Unit(inbox::dead_letter(conn, item, failure, now))
        }
        Command::Replay(filter, reason, _) => {
            Answer::Count(inbox::replay(conn, filter, reason, now))
        }
        Command::PurgeDeadLetters(retention, batch, _) => {
            Answer::Count(inbox::purge_dead_letters(conn, *retention, *batch, now))
        }
    }
}

fn finish(
    conn: &Connection,
    token: &ClaimToken,
    now: Timestamp,
    decide: impl FnOnce(&ClaimToken, Option<&Record>, Timestamp) -> Option<FinishStep>,
) -> Result<(), StoreError> {
    // `Ok(None)`: the token is stale; `Ok(Some(false))`: refused, the claim was completed.
    let run = || -> rusqlite::Result<Option<bool>> {
        let stored = read_record(conn, &token.key)?;
        let Some(step) = decide(token, stored.as_ref(), now) else {
            return Ok(None);
        };
        let fingerprint = stored.as_ref().and_then(|r| r.fingerprint);
        let outcome = match step {
            FinishStep::Nothing => return Ok(Some(true)),
            FinishStep::Completed => return Ok(Some(false)),
            FinishStep::Update(rec, outcome) => {
                write_record(conn, &token.key, &rec)?;
                outcome
            }
            FinishStep::Delete(outcome) => {
                conn.prepare_cached("DELETE FROM dedup WHERE source = ?1 AND event_id = ?2")?
                    .execute(params![
                        token.key.source.as_str(),
                        token.key.event_id.as_str()
                    ])?;
                outcome
            }
        };
        let row = Row {
            outcome,
            processed: outcome == HistoryOutcome::Completed,
            attempt: Some(token.attempt),
            gap_ms: None,
            fingerprint: fingerprint.as_ref(),
            note: None,
        };
        append_history(conn, &token.key, now, &row)?;
        Ok(Some(true))
    };
    match run() {
        Ok(Some(true)) => Ok(()),
        Ok(Some(false)) => Err(StoreError::Completed {
            key: token.key.clone(),
            attempt: token.attempt,
        }),
        Ok(None) => Err(StoreError::StaleToken {
            key: token.key.clone(),
            attempt: token.attempt,
        }),
        Err(e) => Err(StoreError::backend(
            format!("cannot finish the claim of {}", token.key),
            e,
        )),
    }
}

fn renew(
    conn: &Connection,
    token: &ClaimToken,
    lease: Duration,
    now: Timestamp,
) -> Result<Timestamp, StoreError> {
    // `Ok(None)`: the token is stale.
    let run = || -> rusqlite::Result<Option<Timestamp>> {
        let stored = read_record(conn, &token.key)?;
        let Some(step) = machine::renew(token, stored.as_ref(), now, lease) else {
            return Ok(None);
        };
        if let Some(rec) = &step.write {
            write_record(conn, &token.key, rec)?;
        }
        Ok(Some(step.until))
    };
    match run() {
        Ok(Some(until)) => Ok(until),
        Ok(None) => Err(StoreError::StaleToken {
            key: token.key.clone(),
            attempt: token.attempt,
        }),
        Err(e) => Err(StoreError::backend(
            format!("cannot renew the claim of {}", token.key),
            e,
        )),
    }
}

/// Registers a new boot of `instance` and ends the running leases its earlier boots hold, each
/// claim's with an `abandoned` history row, each queue item's with none (its record is done), in
/// the batch's transaction.
fn boot(conn: &Connection, req: &BootRequest, now: Timestamp) -> Result<Boot, StoreError> {
    let instance = &req.instance;
    let run = || -> rusqlite::Result<Result<Boot, StoreError>> {
        let row = match machine::register(req, read_boot(conn, instance)?.as_ref(), now) {
            Ok(row) => row,
            Err(live) => {
                return Ok(Err(StoreError::InstanceLive {
                    live: Box::new(live),
                }));
            }
        };
        write_boot(conn, instance, &row)?;
        let boot = row.boot;
        let held: Vec<(Key, Record)> = conn
            .prepare_cached(include_str!("../sql/boot_held.sql"))?
            .query_map(
                params![instance.as_str(), boot as i64, now.as_millis()],
                |row| {
                    let (source, event_id): (String, String) = (row.get(0)?, row.get(1)?);
                    let key = Key::parse(&source, &event_id).map_err(|e| {
                        rusqlite::Error::FromSqlConversionFailure(
                            0,
                            rusqlite::types::Type::Text,
                            Box::new(e),
                        )
                    })?;
                    Ok((key, record_at(row, 2)?))
                },
            )?
            .collect::<Result<_, _>>()?;
        let mut freed = 0;
        for (key, rec) in held {
            // The query chose by the same rule; the machine has the last word.
            let Some(rec) = machine::abandon(instance, boot, Some(&rec), now) else {
                continue;
            };
            write_record(conn, &key, &rec)?;
            let row = Row {
                outcome: HistoryOutcome::Abandoned,
                processed: false,
                attempt: Some(rec.attempt),
                gap_ms: None,
                fingerprint: rec.fingerprint.as_ref(),
                note: None,
            };
            append_history(conn, &key, now, &row)?;
            freed += 1;
        }
        inbox::free_held(conn, instance, boot, now)?;
        Ok(Ok(Boot {
            holder: Holder {
                instance: instance.clone(),
                boot,
            },
            started_at: now,
            freed,
        }))
    };
    run()
        .map_err(|e| StoreError::backend(format!("cannot register a boot of {instance}"), e))
        .flatten()
}

/// An instance's latest boot.
fn read_boot(conn: &Connection, instance: &InstanceName) -> rusqlite::Result<Option<BootRow>> {
    conn.prepare_cached(
        "SELECT boot, started_at, alive_until, host, pid, process FROM instances WHERE instance = ?1",
    )?
    .query_row(params![instance.as_str()], |r| {
        Ok(BootRow {
            boot: r.get::<_, i64>(0)? as u64,
            started_at: Timestamp::from_millis(r.get(1)?),
            alive_until: r.get::<_, Option<i64>>(2)?.map(Timestamp::from_millis),
            host: r.get(3)?,
            pid: r.get::<_, i64>(4)? as u32,
            process: r.get(5)?,
        })
    })
    .optional()
}

fn write_boot(conn: &Connection, instance: &InstanceName, row: &BootRow) -> rusqlite::Result<()> {
    conn.prepare_cached(include_str!("../sql/boot_register.sql"))?
        .execute(params![
            instance.as_str(),
            row.boot as i64,
            row.started_at.as_millis(),
            row.alive_until.map(Timestamp::as_millis),
            row.host,
            i64::from(row.pid),
            row.process,
        ])
        .map(drop)
}

/// Renews `holder`'s liveness lease by `lease`, or ends it now (`None`), as
/// [`machine::heartbeat`] and [`machine::end_boot`] decide; answers the lease's new end.
fn heartbeat(
    conn: &Connection,
    holder: &Holder,
    lease: Option<Duration>,
    now: Timestamp,
) -> Result<Timestamp, StoreError> {
    let run = || -> rusqlite::Result<Result<Timestamp, StoreError>> {
        let latest = read_boot(conn, &holder.instance)?;
        let decided = match lease {
            Some(lease) => machine::heartbeat(holder, latest.as_ref(), now, lease),
            None => machine::end_boot(holder, latest.as_ref(), now)
                .ok_or_else(|| latest.as_ref().map_or(0, |row| row.boot)),
        };
        match decided {
            Ok(row) => {
                write_boot(conn, &holder.instance, &row)?;
                Ok(Ok(row.alive_until.unwrap_or(now)))
            }
            Err(by) => Ok(Err(StoreError::Superseded {
                holder: holder.clone(),
                by,
            })),
        }
    };
    run()
        .map_err(|e| StoreError::backend(format!("cannot renew the liveness lease of {holder}"), e))
        .flatten()
}
