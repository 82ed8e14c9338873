//! SQL values and Rust values: rows read by column name into core's types, and durations as the
//! milliseconds the statements take.
//!
//! Every column is read by the name its statement gives it (the `sql/` files alias every computed
//! column); a column missing or of another type is a [`PgError::Column`] naming it.

use std::time::Duration;

use idemgate_core::inbox::{
    AttemptLog, DeadLetter, InboxStats, ItemRef, LastFailure, QueueEntry, QueuedItem, Taken,
};
use idemgate_core::{
    Boot, ClaimOutcome, ClaimToken, EventId, Fingerprint, HistoryEntry, HistoryOutcome, Holder,
    InstanceName, Key, LiveBoot, Record, RecordResult, RecordState, SourceName, SourceStats,
    StoredResult, Timestamp,
};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use crate::error::PgError;

/// The value of `column` in `row`.
pub(crate) fn get<'a, T: FromSql<'a>>(
    row: &'a Row,
    column: &'static str,
    context: &'static str,
) -> Result<T, PgError> {
    row.try_get(column).map_err(|source| PgError::Column {
        context,
        column,
        source,
    })
}

/// Milliseconds for SQL intervals, capped at 100 years so no interval overflows.
pub(crate) fn millis(d: Duration) -> i64 {
    const CAP: u128 = 100 * 365 * 86_400 * 1_000;
    d.as_millis().min(CAP) as i64
}

/// A duration from milliseconds (a negative count is zero).
pub(crate) fn ms(v: i64) -> Duration {
    Duration::from_millis(u64::try_from(v).unwrap_or(0))
}

/// A count from a bigint (a negative count is zero).
pub(crate) fn count(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

pub(crate) fn unexpected(context: &'static str, what: impl Into<String>) -> PgError {
    PgError::Unexpected {
        context,
        what: what.into(),
    }
}

fn fingerprint(
    bytes: Option<Vec<u8>>,
    context: &'static str,
) -> Result<Option<Fingerprint>, PgError> {
    bytes
        .map(|b| {
            Fingerprint::from_slice(&b)
                .ok_or_else(|| unexpected(context, format!("a fingerprint of {} bytes", b.len())))
        })
        .transpose()
}

fn timestamp(
    row: &Row,
    column: &'static str,
    context: &'static str,
) -> Result<Option<Timestamp>, PgError> {
    Ok(get::<Option<i64>>(row, column, context)?.map(Timestamp::from_millis))
}

/// One row of `claim_batch` (`sql/claim_batch.sql`): the outcome of the claim of `key`.
pub(crate) fn outcome_of(key: &Key, row: &Row) -> Result<ClaimOutcome, PgError> {
    const CONTEXT: &str = "claiming";
    let outcome: &str = get(row, "r_outcome", CONTEXT)?;
    let first_seen = || -> Result<Timestamp, PgError> {
        timestamp(row, "r_first_seen_ms", CONTEXT)?
            .ok_or_else(|| unexpected(CONTEXT, "no first_seen"))
    };
    let expires_at = || -> Result<Timestamp, PgError> {
        timestamp(row, "r_expires_ms", CONTEXT)?.ok_or_else(|| unexpected(CONTEXT, "no expires_at"))
    };
    Ok(match outcome {
        "claimed" => ClaimOutcome::Claimed {
            token: ClaimToken {
                key: key.clone(),
                attempt: get::<Option<i32>>(row, "r_attempt", CONTEXT)?
                    .and_then(|a| u32::try_from(a).ok())
                    .ok_or_else(|| unexpected(CONTEXT, "a claim without an attempt"))?,
                // Bit for bit: the nonce is a u64 kept in a bigint.
                nonce: get::<Option<i64>>(row, "r_nonce", CONTEXT)?
                    .ok_or_else(|| unexpected(CONTEXT, "a claim without a nonce"))?
                    as u64,
            },
            expires_at: expires_at()?,
            late_duplicate: timestamp(row, "r_late_first_ms", CONTEXT)?,
        },
        "duplicate" => {
            let state: Option<&str> = get(row, "r_state", CONTEXT)?;
            ClaimOutcome::Duplicate {
                first_seen: first_seen()?,
                state: state
                    .and_then(RecordState::parse)
                    .ok_or_else(|| unexpected(CONTEXT, format!("record state {state:?}")))?,
                expires_at: expires_at()?,
            }
        }
        "late_duplicate" => ClaimOutcome::LateDuplicate {
            first_seen: first_seen()?,
            expires_at: expires_at()?,
        },
        "in_flight" => ClaimOutcome::InFlight {
            retry_after: ms(get::<Option<i64>>(row, "r_retry_after_ms", CONTEXT)?.unwrap_or(0)),
        },
        "conflict" => ClaimOutcome::Conflict {
            first_seen: first_seen()?,
        },
        other => return Err(unexpected(CONTEXT, format!("claim outcome {other:?}"))),
    })
}

/// One row of `sql/lookup_record.sql`: a live dedup record.
pub(crate) fn record_of(row: &Row, context: &'static str) -> Result<Record, PgError> {
    let state: &str = get(row, "state", context)?;
    let holder = match (
        get::<Option<String>>(row, "holder_instance", context)?,
        get::<Option<i64>>(row, "holder_boot", context)?,
    ) {
        (None, None) => None,
        (Some(instance), Some(boot)) => Some(Holder {
            instance: InstanceName::new(instance)
                .map_err(|e| unexpected(context, e.to_string()))?,
            // Bit for bit, like the nonce.
            boot: boot as u64,
        }),
        (instance, boot) => {
            return Err(unexpected(
                context,
                format!("holder {instance:?} with boot {boot:?}"),
            ));
        }
    };
    Ok(Record {
        state: RecordState::parse(state)
            .ok_or_else(|| unexpected(context, format!("record state {state:?}")))?,
        attempt: u32::try_from(get::<i32>(row, "attempt", context)?)
            .map_err(|_| unexpected(context, "a negative attempt"))?,
        // Bit for bit: the nonce is a u64 kept in a bigint.
        nonce: get::<i64>(row, "nonce", context)? as u64,
        fingerprint: fingerprint(get(row, "fingerprint", context)?, context)?,
        first_seen: Timestamp::from_millis(get(row, "first_seen_ms", context)?),
        lease_until: timestamp(row, "lease_until_ms", context)?,
        expires_at: Timestamp::from_millis(get(row, "expires_ms", context)?),
        holder,
        completed: get(row, "completed", context)?,
        result: match (
            get::<Option<Vec<u8>>>(row, "result", context)?,
            get::<Option<i64>>(row, "result_withheld", context)?,
        ) {
            (None, None) => RecordResult::None,
            (Some(bytes), None) => RecordResult::Stored(
                StoredResult::decode(&bytes).map_err(|e| unexpected(context, e.to_string()))?,
            ),
            (None, Some(size)) => RecordResult::Withheld {
                size: usize::try_from(size)
                    .map_err(|_| unexpected(context, format!("a withheld size of {size}")))?,
            },
            (Some(_), Some(size)) => {
                return Err(unexpected(
                    context,
                    format!("a result both stored and withheld ({size} bytes)"),
                ));
            }
        },
    })
}

/// One row of `sql/lookup_history.sql`.
pub(crate) fn history_entry_of(row: &Row, context: &'static str) -> Result<HistoryEntry, PgError> {
    let outcome: &str = get(row, "outcome", context)?;
    Ok(HistoryEntry {
        outcome: HistoryOutcome::parse(outcome)
            .ok_or_else(|| unexpected(context, format!("history outcome {outcome:?}")))?,
        processed: get(row, "processed", context)?,
        attempt: get::<Option<i32>>(row, "attempt", context)?
            .map(|a| u32::try_from(a).unwrap_or(0)),
        at: Timestamp::from_millis(get(row, "received_ms", context)?),
        gap: get::<Option<i64>>(row, "gap_ms", context)?.map(ms),
        fingerprint: fingerprint(get(row, "fingerprint", context)?, context)?,
        note: get(row, "note", context)?,
    })
}

/// The row of `sql/register_boot.sql`: the new boot of `instance`, or the live one that
/// refused it.
pub(crate) fn boot_of(
    instance: &InstanceName,
    row: &Row,
    context: &'static str,
) -> Result<Result<Boot, LiveBoot>, PgError> {
    let holder = Holder {
        instance: instance.clone(),
        boot: count(get(row, "r_boot", context)?),
    };
    let started_at = Timestamp::from_millis(get(row, "r_started_ms", context)?);
    if get::<bool>(row, "r_live", context)? {
        let until = Timestamp::from_millis(get(row, "r_alive_until_ms", context)?);
        let now = Timestamp::from_millis(get(row, "r_now_ms", context)?);
        return Ok(Err(LiveBoot {
            holder,
            host: get(row, "r_host", context)?,
            pid: u32::try_from(get::<i32>(row, "r_pid", context)?).unwrap_or(0),
            process: get(row, "r_process", context)?,
            started_at,
            alive_until: until,
            remaining: until.since(now),
        }));
    }
    Ok(Ok(Boot {
        holder,
        started_at,
        freed: count(get(row, "r_freed", context)?),
    }))
}

/// One row of `sql/stats_sources.sql`.
pub(crate) fn source_stats_of(row: &Row, context: &'static str) -> Result<SourceStats, PgError> {
    let name: &str = get(row, "source", context)?;
    Ok(SourceStats {
        source: SourceName::new(name).map_err(|e| unexpected(context, e.to_string()))?,
        live: count(get(row, "live", context)?),
        expired: count(get(row, "expired", context)?),
        oldest: timestamp(row, "oldest_ms", context)?,
    })
}

/// A key as the inbox statements name it (`source`, `event_id`).
fn key_of(row: &Row, context: &'static str) -> Result<Key, PgError> {
    Key::parse(get(row, "source", context)?, get(row, "event_id", context)?)
        .map_err(|e| unexpected(context, e.to_string()))
}

/// A count of attempts (`integer`, never negative in the table).
fn attempts(row: &Row, column: &'static str, context: &'static str) -> Result<u32, PgError> {
    u32::try_from(get::<i32>(row, column, context)?)
        .map_err(|_| unexpected(context, format!("a negative {column}")))
}

/// The body, content type and headers of a queue item's row.
fn queued_of(row: &Row, context: &'static str) -> Result<QueuedItem, PgError> {
    let names: Vec<String> = get(row, "header_names", context)?;
    let values: Vec<String> = get(row, "header_values", context)?;
    if names.len() != values.len() {
        return Err(unexpected(
            context,
            format!("{} header names for {} values", names.len(), values.len()),
        ));
    }
    Ok(QueuedItem {
        body: get(row, "body", context)?,
        content_type: get(row, "content_type", context)?,
        headers: names.into_iter().zip(values).collect(),
    })
}

/// One row of `sql/inbox_take.sql`.
pub(crate) fn taken_of(row: &Row, context: &'static str) -> Result<Taken, PgError> {
    let key = key_of(row, context)?;
    Ok(Taken {
        item: ItemRef {
            id: get(row, "id", context)?,
            attempt: attempts(row, "attempt", context)?,
            key: key.clone(),
        },
        key,
        queued: queued_of(row, context)?,
        received_at: Timestamp::from_millis(get(row, "received_ms", context)?),
        lease_until: Timestamp::from_millis(get(row, "lease_until_ms", context)?),
        tries: attempts(row, "tries", context)?,
    })
}

/// One row of `sql/inbox_dead_letters.sql`, its attempts included.
pub(crate) fn dead_letter_of(row: &Row, context: &'static str) -> Result<DeadLetter, PgError> {
    Ok(DeadLetter {
        id: get(row, "id", context)?,
        key: key_of(row, context)?,
        queued: queued_of(row, context)?,
        received_at: Timestamp::from_millis(get(row, "received_ms", context)?),
        dead_at: Timestamp::from_millis(get(row, "dead_ms", context)?),
        attempts: attempts_of(row, context)?,
    })
}

/// One row of `sql/inbox_queued.sql`.
pub(crate) fn queue_entry_of(row: &Row, context: &'static str) -> Result<QueueEntry, PgError> {
    let attempt: i32 = get(row, "attempt", context)?;
    Ok(QueueEntry {
        id: get(row, "id", context)?,
        received_at: Timestamp::from_millis(get(row, "received_ms", context)?),
        due_at: Timestamp::from_millis(get(row, "due_ms", context)?),
        attempt: u32::try_from(attempt).map_err(|_| unexpected(context, "a negative attempt"))?,
        in_flight_until: get::<Option<i64>>(row, "in_flight_until_ms", context)?
            .map(Timestamp::from_millis),
        dead_at: get::<Option<i64>>(row, "dead_ms", context)?.map(Timestamp::from_millis),
        attempts: attempts_of(row, context)?,
    })
}

/// The attempt arrays of a row of `sql/inbox_dead_letters.sql` or `sql/inbox_queued.sql`.
fn attempts_of(row: &Row, context: &'static str) -> Result<Vec<AttemptLog>, PgError> {
    // NULL arrays: no attempt was logged.
    let numbers: Vec<i32> = get::<Option<_>>(row, "attempts", context)?.unwrap_or_default();
    let ats: Vec<i64> = get::<Option<_>>(row, "ats_ms", context)?.unwrap_or_default();
    let statuses: Vec<Option<i32>> =
        get::<Option<_>>(row, "statuses", context)?.unwrap_or_default();
    let errors: Vec<String> = get::<Option<_>>(row, "errors", context)?.unwrap_or_default();
    if [ats.len(), statuses.len(), errors.len()] != [numbers.len(); 3] {
        return Err(unexpected(context, "attempt arrays of different lengths"));
    }
    numbers
        .into_iter()
        .zip(ats)
        .zip(statuses)
        .zip(errors)
        .map(|(((attempt, at), status), error)| attempt_log(context, attempt, at, status, error))
        .collect()
}

fn attempt_log(
    context: &'static str,
    attempt: i32,
    at: i64,
    status: Option<i32>,
    error: String,
) -> Result<AttemptLog, PgError> {
    Ok(AttemptLog {
        attempt: u32::try_from(attempt).map_err(|_| unexpected(context, "a negative attempt"))?,
        at: Timestamp::from_millis(at),
        status: status
            .map(|s| u16::try_from(s).map_err(|_| unexpected(context, format!("a status of {s}"))))
            .transpose()?,
        error,
    })
}

/// One row of `sql/inbox_stats.sql`.
pub(crate) fn inbox_stats_of(row: &Row, context: &'static str) -> Result<InboxStats, PgError> {
    let name: &str = get(row, "source", context)?;
    Ok(InboxStats {
        source: SourceName::new(name).map_err(|e| unexpected(context, e.to_string()))?,
        pending: count(get(row, "pending", context)?),
        in_flight: count(get(row, "in_flight", context)?),
        dead: count(get(row, "dead", context)?),
        oldest_pending: get::<Option<i64>>(row, "oldest_pending_ms", context)?.map(ms),
        failing: count(get(row, "failing", context)?),
        last_failure: match get::<Option<String>>(row, "failed_event_id", context)? {
            None => None,
            Some(event_id) => Some(LastFailure {
                event_id: EventId::new(event_id).map_err(|e| unexpected(context, e.to_string()))?,
                attempt: attempt_log(
                    context,
                    get(row, "failed_attempt", context)?,
                    get(row, "failed_ms", context)?,
                    get(row, "failed_status", context)?,
                    get(row, "failed_error", context)?,
                )?,
            }),
        },
    })
}
