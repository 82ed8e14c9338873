//! The claim rules as pure functions.
//!
//! Stores that run the rules in Rust (SQLite, in-memory) read the record, call these with their
//! own clock's `now`, and apply the returned write and history row in one atomic step. The SQL and
//! Lua stores implement the same table in their own language; the conformance suite holds them all
//! to it.
//!
//! | record found           | outcome                         | write                                 |
//! |------------------------|---------------------------------|---------------------------------------|
//! | none, or expired       | `Claimed`, attempt 1            | insert: processing (or done), lease   |
//! | processing, lease over | `Claimed`, attempt + 1          | new lease, same `expires_at`          |
//! | processing, lease live | `InFlight { retry_after }`      | none                                  |
//! | done                   | `Duplicate`                     | none                                  |
//! | live, other fingerprint| `Conflict`                      | none                                  |

use std::time::Duration;

use crate::claim::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimToken, HistoryOutcome, Record, RecordState,
};
use crate::time::Timestamp;

/// What a claim does: its answer, the record to write (if any) and the history row to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimStep {
    pub outcome: ClaimOutcome,
    /// The record to insert or overwrite; `None` writes nothing to the dedup table.
    pub write: Option<Record>,
    pub history: HistoryOutcome,
    pub attempt: Option<u32>,
    /// Time since first receipt, for answers about an existing record.
    pub gap: Option<Duration>,
}

/// A record counts only while `now < expires_at`.
pub fn live(record: Option<&Record>, now: Timestamp) -> Option<&Record> {
    record.filter(|r| now < r.expires_at)
}

/// Decides a claim against the stored record (expired or not) at the store's `now`.
///
/// `nonce` is the fresh nonce the new token gets if the claim is won.
pub fn claim(req: &ClaimRequest, stored: Option<&Record>, now: Timestamp, nonce: u64) -> ClaimStep {
    let Some(rec) = live(stored, now) else {
        let record = match req.mode {
            ClaimMode::OnSuccess => Record {
                state: RecordState::Processing,
                attempt: 1,
                nonce,
                fingerprint: req.fingerprint,
                first_seen: now,
                lease_until: Some(now.plus(req.lease)),
                expires_at: now.plus(req.ttl),
            },
            ClaimMode::OnReceipt => Record {
                state: RecordState::Done,
                attempt: 1,
                nonce,
                fingerprint: req.fingerprint,
                first_seen: now,
                lease_until: None,
                expires_at: now.plus(req.ttl),
            },
        };
        return won(req, record, HistoryOutcome::Claimed, None);
    };
    let gap = Some(now.since(rec.first_seen));
    let answer = |outcome, history| ClaimStep {
        outcome,
        write: None,
        history,
        attempt: Some(rec.attempt),
        gap,
    };
    if let (Some(asked), Some(kept)) = (req.fingerprint, rec.fingerprint)
        && asked != kept
    {
        return answer(
            ClaimOutcome::Conflict {
                first_seen: rec.first_seen,
            },
            HistoryOutcome::Conflict,
        );
    }
    match (rec.state, rec.lease_until) {
        (RecordState::Processing, Some(until)) if until > now => answer(
            ClaimOutcome::InFlight {
                retry_after: until.since(now),
            },
            HistoryOutcome::InFlight,
        ),
        (RecordState::Processing, _) => {
            let record = Record {
                attempt: rec.attempt.saturating_add(1),
                nonce,
                lease_until: Some(now.plus(req.lease)),
                fingerprint: rec.fingerprint.or(req.fingerprint),
                ..rec.clone()
            };
            won(req, record, HistoryOutcome::Reclaimed, gap)
        }
        (RecordState::Done, _) => answer(
            ClaimOutcome::Duplicate {
                first_seen: rec.first_seen,
                state: RecordState::Done,
            },
            HistoryOutcome::Duplicate,
        ),
    }
}

fn won(
    req: &ClaimRequest,
    record: Record,
    history: HistoryOutcome,
    gap: Option<Duration>,
) -> ClaimStep {
    ClaimStep {
        outcome: ClaimOutcome::Claimed {
            token: ClaimToken {
                key: req.key.clone(),
                attempt: record.attempt,
                nonce: record.nonce,
            },
        },
        attempt: Some(record.attempt),
        write: Some(record),
        history,
        gap,
    }
}

/// What `complete` or `release` does to a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishStep {
    /// Write this record (complete) and append the history row.
    Update(Record, HistoryOutcome),
    /// Delete the record (release) and append the history row.
    Delete(HistoryOutcome),
    /// Nothing to change: the record is already done under this token.
    Nothing,
}

/// Whether `token` still holds the live record.
pub fn holds(token: &ClaimToken, stored: Option<&Record>, now: Timestamp) -> Option<Record> {
    live(stored, now)
        .filter(|r| r.attempt == token.attempt && r.nonce == token.nonce)
        .cloned()
}

/// Decides `complete(token)`: `None` when the token is stale (taken over, released, expired).
///
/// A holder whose lease lapsed may still complete while nobody took the claim over.
pub fn complete(token: &ClaimToken, stored: Option<&Record>, now: Timestamp) -> Option<FinishStep> {
    let rec = holds(token, stored, now)?;
    Some(match rec.state {
        RecordState::Done => FinishStep::Nothing,
        RecordState::Processing => FinishStep::Update(
            Record {
                state: RecordState::Done,
                lease_until: None,
                ..rec
            },
            HistoryOutcome::Completed,
        ),
    })
}

/// Decides `release(token)`: `None` when the token is stale. A release deletes the record so the
/// sender's next retry is processed.
pub fn release(token: &ClaimToken, stored: Option<&Record>, now: Timestamp) -> Option<FinishStep> {
    holds(token, stored, now).map(|_| FinishStep::Delete(HistoryOutcome::Released))
}

/// A fresh, unpredictable-enough nonce for a new token (never zero).
///
/// Tokens are not secrets (callers are authenticated separately); the nonce only tells two claims
/// with the same attempt number apart, so a per-process random seed and a counter suffice.
pub fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = SEED.get_or_init(Default::default).build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.finish().max(1)
}
