//! The writes every command shares: a claim (decided by `idemgate_core::machine`), a record
//! upsert, and a history row. The writer thread runs them for claims, completions and boots;
//! the inbox's commands run them for the claim of an enqueue and for their history rows.

use idemgate_core::claim::{ClaimOutcome, ClaimRequest, HistoryOutcome, Record};
use idemgate_core::machine;
use idemgate_core::store::StoreError;
use idemgate_core::{Fingerprint, Key, Prior, RecordResult, StoredResult, Timestamp};
use rusqlite::{Connection, params};

use crate::read_record;

pub(crate) fn claim(
    conn: &Connection,
    req: &ClaimRequest,
    now: Timestamp,
) -> Result<ClaimOutcome, StoreError> {
    let run = || -> rusqlite::Result<ClaimOutcome> {
        let stored = read_record(conn, &req.key)?;
        let prior = if machine::needs_prior(req, stored.as_ref(), now) {
            read_prior(conn, &req.key)?
        } else {
            None
        };
        let step = machine::claim(req, stored.as_ref(), now, machine::nonce(), prior);
        if let Some(rec) = &step.write {
            write_record(conn, &req.key, rec)?;
        }
        let row = Row {
            outcome: step.history,
            processed: step.processed,
            attempt: step.attempt,
            gap_ms: step.gap.map(|g| g.as_millis() as i64),
            fingerprint: req.fingerprint.as_ref(),
            note: None,
        };
        append_history(conn, &req.key, now, &row)?;
        Ok(step.outcome)
    };
    run().map_err(|e| StoreError::backend(format!("cannot claim {}", req.key), e))
}

pub(crate) fn write_record(conn: &Connection, key: &Key, rec: &Record) -> rusqlite::Result<()> {
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
            rec.holder.as_ref().map(|h| h.instance.as_str()),
            // Bit for bit, like the nonce.
            rec.holder.as_ref().map(|h| h.boot as i64),
            rec.completed,
            rec.result.stored().map(StoredResult::encode),
            match rec.result {
                RecordResult::Withheld { size } => Some(i64::try_from(size).unwrap_or(i64::MAX)),
                RecordResult::None | RecordResult::Stored(_) => None,
            },
        ])
        .map(drop)
}

/// What history says of a key whose record is absent.
fn read_prior(conn: &Connection, key: &Key) -> rusqlite::Result<Option<Prior>> {
    let (first, processed): (Option<i64>, Option<bool>) = conn
        .prepare_cached(include_str!("../sql/prior.sql"))?
        .query_row(params![key.source.as_str(), key.event_id.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    Ok(first.map(|first| Prior {
        first_seen: Timestamp::from_millis(first),
        processed: processed.unwrap_or(false),
    }))
}

/// One history row to append.
pub(crate) struct Row<'a> {
    pub outcome: HistoryOutcome,
    pub processed: bool,
    pub attempt: Option<u32>,
    pub gap_ms: Option<i64>,
    pub fingerprint: Option<&'a Fingerprint>,
    pub note: Option<&'a str>,
}

pub(crate) fn append_history(
    conn: &Connection,
    key: &Key,
    now: Timestamp,
    row: &Row<'_>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(include_str!("../sql/history_insert.sql"))?
        .execute(params![
            key.source.as_str(),
            key.event_id.as_str(),
            row.outcome.as_str(),
            row.processed,
            row.attempt,
            now.as_millis(),
            row.gap_ms,
            row.fingerprint.map(|f| f.as_bytes().as_slice()),
            row.note,
        ])
        .map(drop)
}
