//! The inbox queue (`sql/0003_inbox.sql`): every write is one writer command, so each
//! [`Inbox`] step is one transaction (a savepoint of the batch's); reads run on reader
//! connections.
//!
//! An enqueue is the claim of [`records::claim`] (on receipt: the record is done at once) and,
//! when the claim is won, the item, in the same command. A report (`delivered`, `retry_later`,
//! `dead_letter`) is fenced by the item's id and attempt and by its being taken (`lease_until`
//! set): a lapsed lease is still the reporter's while nobody took the item again. History rows:
//! `completed` (processed) on delivery; `attempt_failed` and `dead_lettered` (with the error in
//! `note`) and `replayed` (with the reason) not processed, as the event was never delivered. They never undo the enqueue's
//! processed `claimed` row: late-duplicate detection reads only processed and `released` rows.

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::claim::{ClaimMode, ClaimOutcome, ClaimRequest, HistoryOutcome, Holder};
use idemgate_core::inbox::{
    AttemptLog, DeadLetter, Failure, InboxStats, ItemRef, LastFailure, QueueEntry, QueuedItem,
    ReplayFilter, Taken,
};
use idemgate_core::store::StoreError;
use idemgate_core::{InstanceName, Key, SourceName, Timestamp};
use rusqlite::{Connection, OptionalExtension, params};

use crate::records::{self, Row};
use crate::{read_record, sql, unreadable};

/// What [`Inbox::take`] asks the writer.
#[derive(Debug)]
pub(crate) struct TakeArgs {
    pub source: SourceName,
    pub limit: NonZeroU32,
    pub lease: Duration,
    pub holder: Option<Holder>,
}

/// The fence every report checks: this attempt of this item, still taken.
const FENCE: &str = "id = ?1 AND attempt = ?2 AND lease_until IS NOT NULL";

fn stale(item: &ItemRef) -> StoreError {
    StoreError::StaleToken {
        key: item.key.clone(),
        attempt: item.attempt,
    }
}

fn key_at(row: &rusqlite::Row<'_>, source: usize, event_id: usize) -> rusqlite::Result<Key> {
    let (s, e): (String, String) = (row.get(source)?, row.get(event_id)?);
    Key::parse(&s, &e).map_err(|err| unreadable(source, "queue item key", err.to_string()))
}

pub(crate) fn enqueue(
    conn: &Connection,
    req: &ClaimRequest,
    item: &QueuedItem,
    now: Timestamp,
) -> Result<ClaimOutcome, StoreError> {
    let req = req.clone().mode(ClaimMode::OnReceipt);
    let outcome = records::claim(conn, &req, now)?;
    if matches!(outcome, ClaimOutcome::Claimed { .. }) {
        // A failure here fails the command, and the writer rolls the claim back with it.
        insert_item(conn, &req.key, item, now)
            .map_err(|e| StoreError::backend(format!("cannot queue {}", req.key), e))?;
    }
    Ok(outcome)
}

/// An operator's forced replay: the claim as `enqueue` makes it, the item queued whatever it
/// answered, and a `replayed` row with the reason, in the writer's one transaction.
pub(crate) fn requeue(
    conn: &Connection,
    req: &ClaimRequest,
    item: &QueuedItem,
    reason: &str,
    now: Timestamp,
) -> Result<ClaimOutcome, StoreError> {
    let req = req.clone().mode(ClaimMode::OnReceipt);
    let outcome = records::claim(conn, &req, now)?;
    insert_item(conn, &req.key, item, now)
        .and_then(|()| {
            append(
                conn,
                &req.key,
                HistoryOutcome::Replayed,
                0,
                now,
                Some(reason),
            )
        })
        .map_err(|e| StoreError::backend(format!("cannot queue {} again", req.key), e))?;
    Ok(outcome)
}

fn insert_item(
    conn: &Connection,
    key: &Key,
    item: &QueuedItem,
    now: Timestamp,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO inbox_items (source, event_id, body, content_type, received_at, due_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?5)",
    )?
    .execute(params![
        key.source.as_str(),
        key.event_id.as_str(),
        item.body,
        item.content_type,
        now.as_millis(),
    ])?;
    let id = conn.last_insert_rowid();
    let mut insert = conn.prepare_cached(
        "INSERT INTO inbox_headers (item_id, position, name, value) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (position, (name, value)) in item.headers.iter().enumerate() {
        insert.execute(params![id, position as i64, name, value])?;
    }
    Ok(())
}

fn headers(conn: &Connection, id: i64) -> rusqlite::Result<Vec<(String, String)>> {
    conn.prepare_cached(
        "SELECT name, value FROM inbox_headers WHERE item_id = ?1 ORDER BY position",
    )?
    .query_map(params![id], |r| Ok((r.get(0)?, r.get(1)?)))?
    .collect()
}

fn attempts(conn: &Connection, id: i64) -> rusqlite::Result<Vec<AttemptLog>> {
    conn.prepare_cached(
        "SELECT attempt, at, status, error FROM inbox_attempts WHERE item_id = ?1 \
         ORDER BY attempt",
    )?
    .query_map(params![id], |r| {
        Ok(AttemptLog {
            attempt: r.get(0)?,
            at: Timestamp::from_millis(r.get(1)?),
            status: r.get(2)?,
            error: r.get(3)?,
        })
    })?
    .collect()
}

pub(crate) fn take(
    conn: &Connection,
    args: &TakeArgs,
    now: Timestamp,
) -> Result<Vec<Taken>, StoreError> {
    let run = || -> rusqlite::Result<Vec<Taken>> {
        let lease_until = now.plus(args.lease);
        let mut rows = conn
            .prepare_cached(include_str!("../sql/inbox_take.sql"))?
            .query_map(
                params![
                    args.source.as_str(),
                    now.as_millis(),
                    args.limit.get(),
                    lease_until.as_millis(),
                    args.holder.as_ref().map(|h| h.instance.as_str()),
                    // Bit for bit, like the claims' holder.
                    args.holder.as_ref().map(|h| h.boot as i64),
                ],
                |r| {
                    let id: i64 = r.get(0)?;
                    let event_id: String = r.get(1)?;
                    let key = Key::parse(args.source.as_str(), &event_id)
                        .map_err(|e| unreadable(1, "queue item event id", e.to_string()))?;
                    Ok((
                        id,
                        key,
                        r.get::<_, Vec<u8>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        Timestamp::from_millis(r.get(4)?),
                        r.get::<_, u32>(5)?,
                        r.get::<_, u32>(6)?,
                    ))
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.sort_unstable_by_key(|r| r.0);
        rows.into_iter()
            .map(
                |(id, key, body, content_type, received_at, attempt, tries)| {
                    Ok(Taken {
                        item: ItemRef {
                            id,
                            attempt,
                            key: key.clone(),
                        },
                        key,
                        queued: QueuedItem {
                            body,
                            content_type,
                            headers: headers(conn, id)?,
                        },
                        received_at,
                        lease_until,
                        tries,
                    })
                },
            )
            .collect()
    };
    run().map_err(|e| StoreError::backend(format!("cannot take items of {}", args.source), e))
}

/// Appends an inbox history row, with the record's fingerprint while it is stored.
fn append(
    conn: &Connection,
    key: &Key,
    outcome: HistoryOutcome,
    attempt: u32,
    now: Timestamp,
    note: Option<&str>,
) -> rusqlite::Result<()> {
    append_gap(conn, key, outcome, attempt, now, note, None)
}

/// As [`append`], with the row's gap (a delivery's time since receipt: the queue lag).
fn append_gap(
    conn: &Connection,
    key: &Key,
    outcome: HistoryOutcome,
    attempt: u32,
    now: Timestamp,
    note: Option<&str>,
    gap_ms: Option<i64>,
) -> rusqlite::Result<()> {
    let fingerprint = read_record(conn, key)?.and_then(|r| r.fingerprint);
    let row = Row {
        outcome,
        processed: outcome == HistoryOutcome::Completed,
        attempt: Some(attempt),
        gap_ms,
        fingerprint: fingerprint.as_ref(),
        note,
    };
    records::append_history(conn, key, now, &row)
}

fn log_attempt(
    conn: &Connection,
    item: &ItemRef,
    failure: &Failure,
    now: Timestamp,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO inbox_attempts (item_id, attempt, at, status, error) \
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        item.id,
        item.attempt,
        now.as_millis(),
        failure.status,
        failure.error
    ])
    .map(drop)
}

/// Runs a fenced report: `Ok(false)` from `run` means stale, and nothing was written.
fn report(
    item: &ItemRef,
    what: &str,
    run: impl FnOnce() -> rusqlite::Result<bool>,
) -> Result<(), StoreError> {
    match run() {
        Ok(true) => Ok(()),
        Ok(false) => Err(stale(item)),
        Err(e) => Err(StoreError::backend(
            format!("cannot {what} item {} of {}", item.id, item.key),
            e,
        )),
    }
}

pub(crate) fn delivered(
    conn: &Connection,
    item: &ItemRef,
    now: Timestamp,
) -> Result<(), StoreError> {
    report(item, "complete", || {
        // The headers and attempts go with it (ON DELETE CASCADE).
        let Some((key, received_at)) = conn
            .prepare_cached(&format!(
                "DELETE FROM inbox_items WHERE {FENCE} RETURNING source, event_id, received_at"
            ))?
            .query_row(params![item.id, item.attempt], |r| {
                Ok((key_at(r, 0, 1)?, r.get::<_, i64>(2)?))
            })
            .optional()?
        else {
            return Ok(false);
        };
        // The gap of a delivered item: its time in the queue and on the way (the queue lag).
        append_gap(
            conn,
            &key,
            HistoryOutcome::Completed,
            item.attempt,
            now,
            None,
            Some((now.as_millis() - received_at).max(0)),
        )?;
        Ok(true)
    })
}

pub(crate) fn retry_later(
    conn: &Connection,
    item: &ItemRef,
    failure: &Failure,
    delay: Duration,
    now: Timestamp,
) -> Result<(), StoreError> {
    report(item, "retry", || {
        let updated = conn
            .prepare_cached(&format!(
                "UPDATE inbox_items SET due_at = ?3, lease_until = NULL, holder_instance = NULL, \
                 holder_boot = NULL WHERE {FENCE}"
            ))?
            .execute(params![item.id, item.attempt, now.plus(delay).as_millis()])?;
        if updated == 0 {
            return Ok(false);
        }
        log_attempt(conn, item, failure, now)?;
        append(
            conn,
            &item.key,
            HistoryOutcome::AttemptFailed,
            item.attempt,
            now,
            Some(&failure.error),
        )?;
        Ok(true)
    })
}

pub(crate) fn dead_letter(
    conn: &Connection,
    item: &ItemRef,
    failure: &Failure,
    now: Timestamp,
) -> Result<(), StoreError> {
    report(item, "dead-letter", || {
        let Some(key) = conn
            .prepare_cached(&format!(
                "UPDATE inbox_items SET dead_at = ?3, lease_until = NULL, holder_instance = NULL, \
                 holder_boot = NULL WHERE {FENCE} RETURNING source, event_id"
            ))?
            .query_row(params![item.id, item.attempt, now.as_millis()], |r| {
                key_at(r, 0, 1)
            })
            .optional()?
        else {
            return Ok(false);
        };
        log_attempt(conn, item, failure, now)?;
        append(
            conn,
            &key,
            HistoryOutcome::DeadLettered,
            item.attempt,
            now,
            Some(&failure.error),
        )?;
        Ok(true)
    })
}

pub(crate) fn replay(
    conn: &Connection,
    filter: &ReplayFilter,
    reason: &str,
    now: Timestamp,
) -> Result<u64, StoreError> {
    let run = || -> rusqlite::Result<u64> {
        let mut moved = conn
            .prepare_cached(
                "UPDATE inbox_items SET dead_at = NULL, due_at = ?1, tries = 0 \
                 WHERE dead_at IS NOT NULL AND (?2 IS NULL OR source = ?2) \
                   AND (?3 IS NULL OR dead_at >= ?3) \
                   AND (?4 IS NULL OR (?2 IS NOT NULL AND event_id = ?4)) \
                 RETURNING id, source, event_id, attempt",
            )?
            .query_map(
                params![
                    now.as_millis(),
                    filter.source.as_ref().map(SourceName::as_str),
                    filter.since.map(|d| now.minus(d).as_millis()),
                    filter.event_id.as_ref().map(|e| e.as_str()),
                ],
                |r| Ok((r.get::<_, i64>(0)?, key_at(r, 1, 2)?, r.get::<_, u32>(3)?)),
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        moved.sort_unstable_by_key(|m| m.0);
        for (_, key, attempt) in &moved {
            append(
                conn,
                key,
                HistoryOutcome::Replayed,
                *attempt,
                now,
                Some(reason),
            )?;
        }
        Ok(moved.len() as u64)
    };
    run().map_err(sql("cannot replay dead letters"))
}

pub(crate) fn purge_dead_letters(
    conn: &Connection,
    retention: Duration,
    batch: NonZeroU32,
    now: Timestamp,
) -> Result<u64, StoreError> {
    conn.prepare_cached(
        "DELETE FROM inbox_items WHERE id IN ( \
             SELECT id FROM inbox_items WHERE dead_at < ?1 ORDER BY dead_at LIMIT ?2)",
    )
    .and_then(|mut s| s.execute(params![now.minus(retention).as_millis(), batch.get()]))
    .map(|n| n as u64)
    .map_err(sql("cannot delete old dead letters"))
}

/// Ends the running leases that earlier boots (below `boot`) of `instance` hold on queue items,
/// so they are due at once: in the boot's transaction. Reads the queue whole, as the claims'
/// scan reads `dedup`: boots are rare.
pub(crate) fn free_held(
    conn: &Connection,
    instance: &InstanceName,
    boot: u64,
    now: Timestamp,
) -> rusqlite::Result<usize> {
    conn.prepare_cached(
        "UPDATE inbox_items SET lease_until = NULL \
         WHERE holder_instance = ?1 AND holder_boot < ?2 AND dead_at IS NULL \
           AND lease_until > ?3",
    )?
    .execute(params![instance.as_str(), boot as i64, now.as_millis()])
}

pub(crate) fn read_dead_letters(
    conn: &Connection,
    filter: &ReplayFilter,
    limit: NonZeroU32,
    now: Timestamp,
) -> rusqlite::Result<Vec<DeadLetter>> {
    // Two statements, so that one source's are found by inbox_by_source (an `?1 IS NULL OR`
    // would scan the queue for them too).
    let query = if filter.source.is_some() {
        "SELECT id, source, event_id, body, content_type, received_at, dead_at \
         FROM inbox_items WHERE source = ?1 AND dead_at IS NOT NULL \
           AND (?3 IS NULL OR dead_at >= ?3) AND (?4 IS NULL OR event_id = ?4) \
         ORDER BY dead_at, id LIMIT ?2"
    } else {
        "SELECT id, source, event_id, body, content_type, received_at, dead_at \
         FROM inbox_items WHERE dead_at IS NOT NULL AND ?1 IS NULL \
           AND (?3 IS NULL OR dead_at >= ?3) AND ?4 IS NULL \
         ORDER BY dead_at, id LIMIT ?2"
    };
    let rows = conn
        .prepare_cached(query)?
        .query_map(
            params![
                filter.source.as_ref().map(SourceName::as_str),
                limit.get(),
                filter.since.map(|d| now.minus(d).as_millis()),
                filter.event_id.as_ref().map(|e| e.as_str()),
            ],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    key_at(r, 1, 2)?,
                    r.get::<_, Vec<u8>>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    Timestamp::from_millis(r.get(5)?),
                    Timestamp::from_millis(r.get(6)?),
                ))
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(id, key, body, content_type, received_at, dead_at)| {
            Ok(DeadLetter {
                id,
                key,
                queued: QueuedItem {
                    body,
                    content_type,
                    headers: headers(conn, id)?,
                },
                received_at,
                dead_at,
                attempts: attempts(conn, id)?,
            })
        })
        .collect()
}

/// `key`'s queue items, oldest first, with their failed attempts (through inbox_by_key).
pub(crate) fn read_queued(
    conn: &Connection,
    key: &Key,
    now: Timestamp,
) -> rusqlite::Result<Vec<QueueEntry>> {
    let rows = conn
        .prepare_cached(
            "SELECT id, received_at, due_at, attempt, lease_until, dead_at FROM inbox_items \
             WHERE source = ?1 AND event_id = ?2 ORDER BY id",
        )?
        .query_map(params![key.source.as_str(), key.event_id.as_str()], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, u32>(3)?,
                r.get::<_, Option<i64>>(4)?,
                r.get::<_, Option<i64>>(5)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(id, received_at, due_at, attempt, lease_until, dead_at)| {
            Ok(QueueEntry {
                id,
                received_at: Timestamp::from_millis(received_at),
                due_at: Timestamp::from_millis(due_at),
                attempt,
                in_flight_until: lease_until
                    .filter(|until| dead_at.is_none() && *until > now.as_millis())
                    .map(Timestamp::from_millis),
                dead_at: dead_at.map(Timestamp::from_millis),
                attempts: attempts(conn, id)?,
            })
        })
        .collect()
}

pub(crate) fn read_stats(conn: &Connection, now: Timestamp) -> rusqlite::Result<Vec<InboxStats>> {
    conn.prepare_cached(include_str!("../sql/inbox_stats.sql"))?
        .query_map(params![now.as_millis()], |r| {
            let source: String = r.get(0)?;
            Ok(InboxStats {
                source: SourceName::new(source.clone())
                    .map_err(|_| unreadable(0, "queue item source", source))?,
                pending: r.get::<_, i64>(1)? as u64,
                in_flight: r.get::<_, i64>(2)? as u64,
                dead: r.get::<_, i64>(3)? as u64,
                oldest_pending: r
                    .get::<_, Option<i64>>(4)?
                    .map(|oldest| now.since(Timestamp::from_millis(oldest))),
                failing: r.get::<_, i64>(5)? as u64,
                last_failure: match r.get::<_, Option<String>>(6)? {
                    None => None,
                    Some(event_id) => Some(LastFailure {
                        event_id: idemgate_core::EventId::new(event_id.clone())
                            .map_err(|_| unreadable(6, "queue item event id", event_id))?,
                        attempt: AttemptLog {
                            attempt: r.get(7)?,
                            at: Timestamp::from_millis(r.get(8)?),
                            status: r.get(9)?,
                            error: r.get(10)?,
                        },
                    }),
                },
            })
        })?
        .collect()
}
