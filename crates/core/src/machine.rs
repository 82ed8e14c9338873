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
//! | ... but history shows it processed | `Claimed` flagged late, or `LateDuplicate` (policy) | insert |
//! | processing, lease over | `Claimed`, attempt + 1          | new lease, same `expires_at`          |
//! | processing, lease live | `InFlight { retry_after }`      | none                                  |
//! | done                   | `Duplicate`                     | none                                  |
//! | live, other fingerprint| `Conflict`                      | none                                  |
//!
//! A won claim in on-success mode records the request's holder; a takeover records the new one.
//! Besides claims: [`complete`] (and [`complete_keeping`], which keeps a result with the
//! completed record), [`release`], [`renew`] (a new lease for the token's own
//! processing record, never past its expiry, no history row) and [`abandon`] (what an
//! instance's new boot does to a claim an earlier boot of it still holds).

use std::time::Duration;

use crate::claim::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimToken, HistoryOutcome, Holder, LateDuplicates,
    Prior, Record, RecordState,
};
use crate::key::InstanceName;
use crate::result::RecordResult;
use crate::store::{BootRequest, LiveBoot};
use crate::time::Timestamp;

/// What a claim does: its answer, the record to write (if any) and the history row to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimStep {
    pub outcome: ClaimOutcome,
    /// The record to insert or overwrite; `None` writes nothing to the dedup table.
    pub write: Option<Record>,
    pub history: HistoryOutcome,
    pub attempt: Option<u32>,
    /// Time since first receipt, for answers about an existing record or a late duplicate.
    pub gap: Option<Duration>,
    /// The history row's `processed` flag.
    pub processed: bool,
}

/// A record counts only while `now < expires_at`.
pub fn live(record: Option<&Record>, now: Timestamp) -> Option<&Record> {
    record.filter(|r| now < r.expires_at)
}

/// Whether a claim of `req` finding `stored` must ask history for a [`Prior`]: only when no live
/// record exists and the late-duplicate policy is not off.
pub fn needs_prior(req: &ClaimRequest, stored: Option<&Record>, now: Timestamp) -> bool {
    req.late_duplicates != LateDuplicates::Off && live(stored, now).is_none()
}

/// Decides a claim against the stored record (expired or not) at the store's `now`.
///
/// `prior` is what history says of the key when [`needs_prior`] (else ignored); `nonce` is the
/// fresh nonce the new token gets if the claim is won.
pub fn claim(
    req: &ClaimRequest,
    stored: Option<&Record>,
    now: Timestamp,
    nonce: u64,
    prior: Option<Prior>,
) -> ClaimStep {
    let Some(rec) = live(stored, now) else {
        // A late duplicate: processed before, and first received within the horizon.
        let late = prior
            .filter(|p| {
                p.processed
                    && req.late_duplicates != LateDuplicates::Off
                    && now.since(p.first_seen) <= req.late_duplicate_horizon()
            })
            .map(|p| p.first_seen);
        let on_receipt = req.mode == ClaimMode::OnReceipt;
        let fresh = Record {
            state: if on_receipt {
                RecordState::Done
            } else {
                RecordState::Processing
            },
            attempt: 1,
            nonce,
            fingerprint: req.fingerprint,
            first_seen: late.unwrap_or(now),
            lease_until: (!on_receipt).then(|| now.plus(req.lease)),
            expires_at: now.plus(req.ttl),
            holder: if on_receipt { None } else { req.holder.clone() },
            completed: false,
            result: RecordResult::None,
        };
        return match (late, req.late_duplicates) {
            (Some(first_seen), LateDuplicates::Reject) => {
                let record = Record {
                    state: RecordState::Done,
                    lease_until: None,
                    holder: None,
                    ..fresh
                };
                ClaimStep {
                    outcome: ClaimOutcome::LateDuplicate {
                        first_seen,
                        expires_at: record.expires_at,
                    },
                    write: Some(record),
                    history: HistoryOutcome::LateDuplicate,
                    attempt: None,
                    gap: Some(now.since(first_seen)),
                    processed: true,
                }
            }
            (Some(first_seen), _) => ClaimStep {
                gap: Some(now.since(first_seen)),
                ..won(
                    req,
                    fresh,
                    HistoryOutcome::LateDuplicate,
                    None,
                    Some(first_seen),
                )
            },
            (None, _) => won(req, fresh, HistoryOutcome::Claimed, None, None),
        };
    };
    let gap = Some(now.since(rec.first_seen));
    let answer = |outcome, history| ClaimStep {
        outcome,
        write: None,
        history,
        attempt: Some(rec.attempt),
        gap,
        processed: false,
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
                holder: req.holder.clone(),
                ..rec.clone()
            };
            won(req, record, HistoryOutcome::Reclaimed, gap, None)
        }
        (RecordState::Done, _) => answer(
            ClaimOutcome::Duplicate {
                first_seen: rec.first_seen,
                state: RecordState::Done,
                expires_at: rec.expires_at,
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
    late_duplicate: Option<Timestamp>,
) -> ClaimStep {
    ClaimStep {
        outcome: ClaimOutcome::Claimed {
            token: ClaimToken {
                key: req.key.clone(),
                attempt: record.attempt,
                nonce: record.nonce,
            },
            expires_at: record.expires_at,
            late_duplicate,
        },
        attempt: Some(record.attempt),
        processed: record.state == RecordState::Done,
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
    /// Refused, nothing changed: a release of a record this token completed
    /// ([`StoreError::Completed`](crate::StoreError::Completed)).
    Completed,
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
    complete_keeping(token, stored, now, RecordResult::None)
}

/// Decides `complete_keeping(token, result)`: as [`complete`], the completed record keeping
/// `result`. A record already done is left as it is, its result with it ([`FinishStep::Nothing`]):
/// only the completion that makes a record done keeps a result.
pub fn complete_keeping(
    token: &ClaimToken,
    stored: Option<&Record>,
    now: Timestamp,
    result: RecordResult,
) -> Option<FinishStep> {
    let rec = holds(token, stored, now)?;
    Some(match rec.state {
        RecordState::Done => FinishStep::Nothing,
        RecordState::Processing => FinishStep::Update(
            Record {
                state: RecordState::Done,
                lease_until: None,
                holder: None,
                completed: true,
                result,
                ..rec
            },
            HistoryOutcome::Completed,
        ),
    })
}

/// Decides `release(token)`: `None` when the token is stale. A release deletes the record so the
/// sender's next retry is processed: a processing record, or one marked done on receipt (the
/// undo of mark-on-receipt when its work fails). A record this token completed stays:
/// [`FinishStep::Completed`].
pub fn release(token: &ClaimToken, stored: Option<&Record>, now: Timestamp) -> Option<FinishStep> {
    holds(token, stored, now).map(|rec| {
        if rec.completed {
            FinishStep::Completed
        } else {
            FinishStep::Delete(HistoryOutcome::Released)
        }
    })
}

/// What `renew(token, lease)` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewStep {
    /// The record to write (the new lease); `None` writes nothing.
    pub write: Option<Record>,
    /// The answer: the new `lease_until`, or a done record's `expires_at`.
    pub until: Timestamp,
}

/// Decides `renew(token, lease)`: `None` when the token is stale (taken over, released,
/// expired).
///
/// A processing record gets `lease_until = now + lease`, never beyond its `expires_at`; a holder
/// whose lease lapsed may still renew while nobody took the claim over. A record already done
/// under this token answers its `expires_at` and changes nothing.
pub fn renew(
    token: &ClaimToken,
    stored: Option<&Record>,
    now: Timestamp,
    lease: Duration,
) -> Option<RenewStep> {
    let rec = holds(token, stored, now)?;
    Some(match rec.state {
        RecordState::Done => RenewStep {
            write: None,
            until: rec.expires_at,
        },
        RecordState::Processing => {
            let until = now.plus(lease).min(rec.expires_at);
            RenewStep {
                write: Some(Record {
                    lease_until: Some(until),
                    ..rec
                }),
                until,
            }
        }
    })
}

/// Whether a new boot `boot` of `instance` frees `stored`, and how: a live record, processing
/// under a running lease held by an earlier boot of the same instance, gets its lease ended at
/// `now` (the store appends an `abandoned` history row with the record's attempt). Anything else
/// is left alone: other instances' claims, the current boot's, claims with no holder, done or
/// expired records, and leases that already lapsed (those are takeable already).
pub fn abandon(
    instance: &InstanceName,
    boot: u64,
    stored: Option<&Record>,
    now: Timestamp,
) -> Option<Record> {
    let rec = live(stored, now)?;
    let earlier =
        matches!(&rec.holder, Some(Holder { instance: i, boot: b }) if i == instance && *b < boot);
    let running = rec.lease_until.is_some_and(|until| until > now);
    (rec.state == RecordState::Processing && earlier && running).then(|| Record {
        lease_until: Some(now),
        ..rec.clone()
    })
}

/// An instance's latest boot, as a store keeps it (one row per instance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootRow {
    pub boot: u64,
    pub started_at: Timestamp,
    /// The end of its liveness lease; `None` for a boot registered before boots had leases,
    /// which is taken for dead.
    pub alive_until: Option<Timestamp>,
    pub host: String,
    pub pid: u32,
    /// Its [`BootRequest::process`].
    pub process: String,
}

impl BootRow {
    /// Whether the boot counts as alive at `now`: its lease runs.
    pub fn alive(&self, now: Timestamp) -> bool {
        self.alive_until.is_some_and(|until| until > now)
    }

    fn live(&self, instance: &InstanceName, now: Timestamp) -> LiveBoot {
        let until = self.alive_until.unwrap_or(now);
        LiveBoot {
            holder: Holder {
                instance: instance.clone(),
                boot: self.boot,
            },
            host: self.host.clone(),
            pid: self.pid,
            process: self.process.clone(),
            started_at: self.started_at,
            alive_until: until,
            remaining: until.since(now),
        }
    }
}

/// Decides `register_boot(req)` against the instance's latest boot: the new boot's row, or the
/// live boot that refuses it.
///
/// # Errors
/// The [`LiveBoot`] whose lease still runs.
pub fn register(
    req: &BootRequest,
    latest: Option<&BootRow>,
    now: Timestamp,
) -> Result<BootRow, LiveBoot> {
    if let Some(row) = latest.filter(|row| row.alive(now) && req.supersede != Some(row.boot)) {
        return Err(row.live(&req.instance, now));
    }
    Ok(BootRow {
        boot: latest.map_or(1, |row| row.boot.saturating_add(1)),
        started_at: now,
        alive_until: Some(now.plus(req.lease)),
        host: req.host.clone(),
        pid: req.pid,
        process: req.process.clone(),
    })
}

/// Decides `heartbeat(holder, lease)`: the renewed row, or the boot that superseded `holder`
/// (0 when the instance has no row at all: the store was wiped or restored).
///
/// # Errors
/// The newer boot's number.
pub fn heartbeat(
    holder: &Holder,
    latest: Option<&BootRow>,
    now: Timestamp,
    lease: Duration,
) -> Result<BootRow, u64> {
    match latest {
        Some(row) if row.boot == holder.boot => Ok(BootRow {
            alive_until: Some(now.plus(lease)),
            ..row.clone()
        }),
        Some(row) => Err(row.boot),
        None => Err(0),
    }
}

/// Decides `end_boot(holder)`: the row with its lease ended, or `None` when `holder` is no
/// longer the latest boot (nothing to change).
pub fn end_boot(holder: &Holder, latest: Option<&BootRow>, now: Timestamp) -> Option<BootRow> {
    latest
        .filter(|row| row.boot == holder.boot)
        .map(|row| BootRow {
            alive_until: Some(now),
            ..row.clone()
        })
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

/// A fresh random store id (32 hex digits), for stores whose id is not made by their database.
pub fn random_store_id() -> String {
    format!("{:016x}{:016x}", nonce(), nonce())
}
