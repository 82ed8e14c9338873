//! Claims: what a caller asks, what a store answers, what it keeps.

use std::fmt;
use std::time::Duration;

use crate::key::{Fingerprint, InstanceName, Key};
use crate::result::RecordResult;
use crate::time::Timestamp;

/// When a claimed record counts as processed. In configuration: `on_success` or `on_receipt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimMode {
    /// The record is `processing` under a lease until the caller calls `complete`; a crashed
    /// caller's lease lapses and the next delivery takes the claim over.
    #[default]
    OnSuccess,
    /// The claim itself marks the record `done` (the simple model: claim = processed). Every
    /// later delivery within the TTL is a duplicate, even while the first is still being handled.
    OnReceipt,
}

impl ClaimMode {
    /// The mode as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnSuccess => "on_success",
            Self::OnReceipt => "on_receipt",
        }
    }
}

/// What a claim does when it finds no live record but history shows the event was processed
/// before: a delivery after its TTL (too short a TTL, or a replayed request). In configuration:
/// `off`, `flag` or `reject`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LateDuplicates {
    /// Do not look: the claim is a first receipt.
    Off,
    /// Process it again, but record a `late_duplicate` history row with the gap since first
    /// receipt, and say so in [`ClaimOutcome::Claimed::late_duplicate`].
    #[default]
    Flag,
    /// Do not process it: answer [`ClaimOutcome::LateDuplicate`] and keep a `done` record again
    /// for the TTL, so the retries after it are plain duplicates.
    Reject,
}

impl LateDuplicates {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Flag => "flag",
            Self::Reject => "reject",
        }
    }
}

/// One claim: "I received this event; may I process it?"
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    pub key: Key,
    /// SHA-256 of the payload, when known. A live record with a different fingerprint answers
    /// [`ClaimOutcome::Conflict`].
    pub fingerprint: Option<Fingerprint>,
    /// How long the caller may hold the claim before another delivery may take it over.
    pub lease: Duration,
    /// How long the record lives, from first receipt (the source's [`crate::TtlPolicy`]).
    pub ttl: Duration,
    pub mode: ClaimMode,
    pub late_duplicates: LateDuplicates,
    /// How far back history is asked about a late duplicate: a delivery is one when its event
    /// was processed and first received within this long. `None`: the default for the TTL,
    /// [`default_late_horizon`]. See [`ClaimRequest::late_duplicate_horizon`].
    pub late_horizon: Option<Duration>,
    /// Who will hold the claim: the gateway process and boot asking. A won claim (first receipt
    /// or takeover) in [`ClaimMode::OnSuccess`] records it, so that the process's next boot can
    /// free the claim at once ([`crate::Instances::register_boot`]) instead of waiting out the
    /// lease. `None` (the default) records none; such a claim waits out its lease.
    pub holder: Option<Holder>,
}

impl ClaimRequest {
    /// A claim in [`ClaimMode::OnSuccess`] with no fingerprint and no holder.
    pub fn new(key: Key, lease: Duration, ttl: Duration) -> Self {
        Self {
            key,
            fingerprint: None,
            lease,
            ttl,
            mode: ClaimMode::OnSuccess,
            late_duplicates: LateDuplicates::default(),
            late_horizon: None,
            holder: None,
        }
    }

    /// The late-duplicate horizon this claim asks history with: the `late_horizon` field as
    /// set, else [`default_late_horizon`] of its TTL. A store reads no history received
    /// before it (on PostgreSQL, the monthly partitions before it are not read at all), so a
    /// claim's cost does not grow with history's retention.
    pub fn late_duplicate_horizon(&self) -> Duration {
        self.late_horizon
            .unwrap_or_else(|| default_late_horizon(self.ttl))
    }

    #[must_use]
    pub fn holder(mut self, holder: Holder) -> Self {
        self.holder = Some(holder);
        self
    }

    #[must_use]
    pub fn fingerprint(mut self, fingerprint: Fingerprint) -> Self {
        self.fingerprint = Some(fingerprint);
        self
    }

    #[must_use]
    pub fn mode(mut self, mode: ClaimMode) -> Self {
        self.mode = mode;
        self
    }

    #[must_use]
    pub fn late_duplicates(mut self, policy: LateDuplicates) -> Self {
        self.late_duplicates = policy;
        self
    }

    #[must_use]
    pub fn late_horizon(mut self, horizon: Duration) -> Self {
        self.late_horizon = Some(horizon);
        self
    }
}

/// The shortest default late-duplicate horizon: Stripe resends events up to 30 days old from its
/// dashboard, the longest manual redelivery among the senders idemgate knows.
pub const MIN_DEFAULT_LATE_HORIZON: Duration = Duration::from_secs(30 * 86_400);

/// The late-duplicate horizon of a claim that sets none: twice its TTL, and at least
/// [`MIN_DEFAULT_LATE_HORIZON`]. Past the TTL a sender no longer retries on its own; what comes
/// later is an operator's redelivery, which comes within days or weeks, not a year.
pub fn default_late_horizon(ttl: Duration) -> Duration {
    ttl.saturating_mul(2).max(MIN_DEFAULT_LATE_HORIZON)
}

/// Who holds a claim: one boot of one gateway process.
///
/// `boot` counts the starts of `instance`, from 1, as the store registered them
/// ([`crate::Instances::register_boot`]). When an instance starts again, the claims still
/// processing under an earlier boot of it were abandoned by a process that is gone, and become
/// takeable at once.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    pub instance: InstanceName,
    pub boot: u64,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (boot {})", self.instance, self.boot)
    }
}

/// Proof of holding a claim, needed to `complete`, `release` or `renew` it.
///
/// `attempt` is the fencing number (1 on first receipt, +1 on each takeover); `nonce` tells apart
/// two claims with the same attempt number (a claim released and claimed again). A store refuses
/// a token whose attempt or nonce no longer matches the live record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClaimToken {
    pub key: Key,
    pub attempt: u32,
    pub nonce: u64,
}

impl ClaimToken {
    /// The fence as text, `{attempt}.{nonce:016x}`, as the claim API hands it out.
    pub fn fence(&self) -> String {
        format!("{}.{:016x}", self.attempt, self.nonce)
    }

    /// Rebuilds a token from a key and a fence written by [`ClaimToken::fence`].
    ///
    /// # Errors
    /// [`TokenParseError`] when the fence is not `{attempt}.{16 hex digits}`.
    pub fn from_fence(key: Key, fence: &str) -> Result<Self, TokenParseError> {
        let (attempt, nonce) = fence.split_once('.').ok_or(TokenParseError)?;
        // Exactly what `fence` writes: decimal digits (no sign, no leading zero), 16 lowercase hex.
        let digits = !attempt.is_empty()
            && !attempt.starts_with('0')
            && attempt.bytes().all(|b| b.is_ascii_digit());
        let hex = nonce.len() == 16
            && nonce
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !digits || !hex {
            return Err(TokenParseError);
        }
        let attempt = attempt.parse::<u32>().map_err(|_| TokenParseError)?;
        let nonce = u64::from_str_radix(nonce, 16).map_err(|_| TokenParseError)?;
        Ok(Self {
            key,
            attempt,
            nonce,
        })
    }
}

/// A fence that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid claim token: expected {{attempt}}.{{16 hex digits}}")]
pub struct TokenParseError;

/// The state of a live record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordState {
    /// Claimed, under a lease, not yet completed.
    Processing,
    /// Completed (or claimed in mark-on-receipt mode).
    Done,
}

impl RecordState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::Done => "done",
        }
    }

    /// Parses [`RecordState::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "processing" => Some(Self::Processing),
            "done" => Some(Self::Done),
            _ => None,
        }
    }
}

impl fmt::Display for RecordState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A store's answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The caller holds the claim and processes the event.
    Claimed {
        token: ClaimToken,
        /// When the record expires (by the store's clock).
        expires_at: Timestamp,
        /// Under [`LateDuplicates::Flag`]: the event's first receipt, when history shows it was
        /// processed before and its record has since expired.
        late_duplicate: Option<Timestamp>,
    },
    /// A live record exists and processing finished (or the source marks on receipt): ack the
    /// sender, do nothing.
    Duplicate {
        first_seen: Timestamp,
        state: RecordState,
        expires_at: Timestamp,
    },
    /// Under [`LateDuplicates::Reject`]: the record had expired, but history shows the event was
    /// processed before. Ack the sender, do nothing.
    LateDuplicate {
        first_seen: Timestamp,
        expires_at: Timestamp,
    },
    /// Another caller holds a live lease: try again after `retry_after`.
    InFlight { retry_after: Duration },
    /// A live record of this id has a different payload fingerprint.
    Conflict { first_seen: Timestamp },
}

impl ClaimOutcome {
    /// A short lowercase name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Claimed { .. } => "claimed",
            Self::Duplicate { .. } => "duplicate",
            Self::LateDuplicate { .. } => "late_duplicate",
            Self::InFlight { .. } => "in_flight",
            Self::Conflict { .. } => "conflict",
        }
    }
}

/// The outcome a history row records: one row per delivery attempt or state change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HistoryOutcome {
    Claimed,
    Duplicate,
    InFlight,
    Conflict,
    Reclaimed,
    Completed,
    Released,
    LateDuplicate,
    /// A processing claim whose holder's instance started again: its lease was ended at once so
    /// the next delivery takes it over (with attempt + 1, `reclaimed`).
    Abandoned,
    /// Inbox mode: the event's queue item ran out of attempts or grew too old, and is kept as a
    /// dead letter.
    DeadLettered,
    /// Inbox mode: a dead letter moved back to the queue (the row's `note` says why).
    Replayed,
    /// Inbox mode: one delivery from the queue failed and will be tried again (the row's `note`
    /// says how: the downstream's status and the error).
    AttemptFailed,
}

impl HistoryOutcome {
    pub const ALL: [HistoryOutcome; 12] = [
        Self::Claimed,
        Self::Duplicate,
        Self::InFlight,
        Self::Conflict,
        Self::Reclaimed,
        Self::Completed,
        Self::Released,
        Self::LateDuplicate,
        Self::Abandoned,
        Self::DeadLettered,
        Self::Replayed,
        Self::AttemptFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Claimed => "claimed",
            Self::Duplicate => "duplicate",
            Self::InFlight => "in_flight",
            Self::Conflict => "conflict",
            Self::Reclaimed => "reclaimed",
            Self::Completed => "completed",
            Self::Released => "released",
            Self::LateDuplicate => "late_duplicate",
            Self::Abandoned => "abandoned",
            Self::DeadLettered => "dead_lettered",
            Self::Replayed => "replayed",
            Self::AttemptFailed => "attempt_failed",
        }
    }

    /// Parses [`HistoryOutcome::as_str`]'s output.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }
}

impl fmt::Display for HistoryOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A dedup record as a store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub state: RecordState,
    pub attempt: u32,
    pub nonce: u64,
    pub fingerprint: Option<Fingerprint>,
    pub first_seen: Timestamp,
    /// When the current lease lapses; `None` once done.
    pub lease_until: Option<Timestamp>,
    pub expires_at: Timestamp,
    /// Who holds a processing record, when its claim said ([`ClaimRequest::holder`]); `None`
    /// once done.
    pub holder: Option<Holder>,
    /// Done by a completion (`complete`), not marked done on receipt: the event was processed
    /// and nobody may undo it, so a `release` of it is refused
    /// ([`StoreError::Completed`](crate::StoreError::Completed)). Always `false` while processing.
    pub completed: bool,
    /// What its completion kept of the work's result
    /// ([`ClaimStore::complete_with`](crate::ClaimStore::complete_with)): always
    /// [`RecordResult::None`] unless `completed`. Written with the completion, in the same atomic
    /// step, and never changed after it: a completed record is immutable until it expires, and
    /// its result goes with it.
    pub result: RecordResult,
}

/// One history row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub outcome: HistoryOutcome,
    /// Whether, as of this row, the event counts as processed: a completion, a claim in
    /// mark-on-receipt mode, a rejected late duplicate. A later `released` row undoes it.
    pub processed: bool,
    /// The attempt the row speaks of, where there is one.
    pub attempt: Option<u32>,
    pub at: Timestamp,
    /// For duplicates, in-flight answers and conflicts: the time since first receipt.
    pub gap: Option<Duration>,
    pub fingerprint: Option<Fingerprint>,
    /// An operator's words: a replay's reason (`None` on every other row).
    pub note: Option<String>,
}

/// What history says of an event whose record is absent: when it was first received, and whether
/// it counts as processed (the last processed-or-released row was processed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prior {
    pub first_seen: Timestamp,
    pub processed: bool,
}

impl Prior {
    /// Reads it off a key's history, oldest first.
    pub fn of(history: &[HistoryEntry]) -> Option<Self> {
        let first_seen = history.first()?.at;
        let processed = history
            .iter()
            .rev()
            .find(|h| h.processed || h.outcome == HistoryOutcome::Released)
            .is_some_and(|h| h.processed);
        Some(Self {
            first_seen,
            processed,
        })
    }
}

/// Everything a store knows of one event: its live record, if any, and its history, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventView {
    pub key: Key,
    pub record: Option<Record>,
    pub history: Vec<HistoryEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_round_trip() {
        let key = Key::parse("s", "e").unwrap();
        let t = ClaimToken {
            key: key.clone(),
            attempt: 3,
            nonce: 0xdead_beef,
        };
        assert_eq!(t.fence(), "3.00000000deadbeef");
        assert_eq!(ClaimToken::from_fence(key.clone(), &t.fence()).unwrap(), t);
        for bad in [
            "",
            "3",
            "0.00000000deadbeef",
            "x.00000000deadbeef",
            "3.dead",
            "3.zz000000deadbeef",
            "+3.00000000deadbeef",
            "03.00000000deadbeef",
            "3.00000000DEADBEEF",
            "3.+0000000deadbeef",
            "4294967296.00000000deadbeef",
        ] {
            assert!(ClaimToken::from_fence(key.clone(), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn history_outcome_names_round_trip() {
        for o in HistoryOutcome::ALL {
            assert_eq!(HistoryOutcome::parse(o.as_str()), Some(o));
        }
    }
}
