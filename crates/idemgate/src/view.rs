//! One event as the API and the CLI show it: [`EventReport`], "did we process it, and when?".

use serde::Serialize;

use crate::{EventView, HistoryOutcome};
use idemgate_core::inbox::QueueEntry;

/// An event's live record (if any) and whole history, oldest first, ready to serialize.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventReport {
    /// The source name.
    pub source: String,
    /// The sender's event id.
    pub event_id: String,
    /// The first completion (or mark-on-receipt claim) in history, if any; for an inbox event,
    /// its delivery from the queue ([`InboxReport::delivered_at`]).
    pub processed_at: Option<String>,
    /// The first delivery history holds.
    pub first_seen: Option<String>,
    /// The live dedup record; `None` once released or expired.
    pub record: Option<RecordReport>,
    /// Every delivery and state change, oldest first.
    pub history: Vec<HistoryReport>,
    /// Inbox mode: what became of the event's queue item (`None` for an event that was never
    /// queued).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inbox: Option<InboxReport>,
}

/// An inbox event's way through the queue: queued, each failed attempt, dead-lettered,
/// replayed, delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InboxReport {
    /// Where it stands: `queued` (waiting for its first delivery), `in_flight` (a dispatcher is
    /// delivering it), `retrying` (failed; due again at `next_attempt_at`), `dead` (a dead letter,
    /// kept for replay), `delivered`, or `purged` (a dead letter past its retention).
    pub state: &'static str,
    /// When it was queued (its first receipt).
    pub queued_at: Option<String>,
    /// Every failed attempt, oldest first.
    pub attempts: Vec<AttemptReport>,
    /// When it was last dead-lettered.
    pub dead_lettered_at: Option<String>,
    /// Every replay, oldest first, with its reason.
    pub replays: Vec<ReplayReport>,
    /// When the downstream took it.
    pub delivered_at: Option<String>,
    /// While `retrying`: when it is due again.
    pub next_attempt_at: Option<String>,
}

/// One failed delivery attempt from the queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttemptReport {
    /// The attempt number.
    pub attempt: Option<u32>,
    /// When it failed.
    pub at: String,
    /// The downstream's status, when it answered and the queue still holds the item.
    pub status: Option<u16>,
    /// What went wrong, in words.
    pub error: Option<String>,
}

/// One replay of a dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    /// When.
    pub at: String,
    /// The operator's reason.
    pub reason: Option<String>,
}

/// The live dedup record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordReport {
    /// `processing` or `done`.
    pub state: &'static str,
    /// The fencing attempt: 1, more after each takeover.
    pub attempt: u32,
    /// The first receipt (RFC 3339).
    pub first_seen: String,
    /// When a processing claim's lease ends.
    pub lease_until: Option<String>,
    /// When the record expires, by the store's clock.
    pub expires_at: String,
    /// The payload's SHA-256, hex.
    pub fingerprint: Option<String>,
    /// The instance and boot holding a processing claim.
    pub holder: Option<String>,
    /// What its completion kept of the work's result (an `Idempotency-Key` request's response):
    /// absent when it kept none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultReport>,
}

/// What a completed record kept of its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResultReport {
    /// `stored` (given back to duplicates) or `withheld` (over the limit: only its size kept).
    pub kept: &'static str,
    /// The stored result's status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Its size, as the store's limit counts it.
    pub bytes: usize,
}

impl ResultReport {
    fn of(result: &idemgate_core::RecordResult) -> Option<Self> {
        match result {
            idemgate_core::RecordResult::None => None,
            idemgate_core::RecordResult::Stored(r) => Some(Self {
                kept: "stored",
                status: Some(r.status),
                bytes: r.size(),
            }),
            idemgate_core::RecordResult::Withheld { size } => Some(Self {
                kept: "withheld",
                status: None,
                bytes: *size,
            }),
        }
    }
}

/// One history row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryReport {
    /// `claimed`, `duplicate`, `completed`, ... ([`HistoryOutcome`]).
    pub outcome: &'static str,
    /// The attempt the row speaks of.
    pub attempt: Option<u32>,
    /// When (RFC 3339, by the store's clock).
    pub at: String,
    /// For answers about an existing record: the time since its first receipt.
    pub gap_ms: Option<u64>,
    /// The delivery's payload SHA-256, hex.
    pub fingerprint: Option<String>,
    /// An operator's words: a replay's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<&EventView> for EventReport {
    fn from(view: &EventView) -> Self {
        Self::new(view, &[])
    }
}

impl EventReport {
    /// The report of `view`, with the event's queue items as
    /// [`Inbox::queued`](idemgate_core::inbox::Inbox::queued) reads them (none for a store or
    /// source without an inbox).
    pub fn new(view: &EventView, queued: &[QueueEntry]) -> Self {
        let inbox = InboxReport::of(view, queued);
        let processed = match &inbox {
            Some(inbox) => inbox.delivered_at.clone(),
            None => view
                .history
                .iter()
                .find(|h| h.processed || h.outcome == HistoryOutcome::Completed)
                .map(|h| h.at.to_string()),
        };
        Self {
            inbox,
            source: view.key.source.as_str().to_owned(),
            event_id: view.key.event_id.as_str().to_owned(),
            processed_at: processed,
            first_seen: view.history.first().map(|h| h.at.to_string()),
            record: view.record.as_ref().map(|r| RecordReport {
                state: r.state.as_str(),
                attempt: r.attempt,
                first_seen: r.first_seen.to_string(),
                lease_until: r.lease_until.map(|t| t.to_string()),
                expires_at: r.expires_at.to_string(),
                fingerprint: r.fingerprint.map(|f| f.to_hex()),
                holder: r.holder.as_ref().map(ToString::to_string),
                result: ResultReport::of(&r.result),
            }),
            history: view
                .history
                .iter()
                .map(|h| HistoryReport {
                    outcome: h.outcome.as_str(),
                    attempt: h.attempt,
                    at: h.at.to_string(),
                    gap_ms: h
                        .gap
                        .map(|g| u64::try_from(g.as_millis()).unwrap_or(u64::MAX)),
                    fingerprint: h.fingerprint.map(|f| f.to_hex()),
                    note: h.note.clone(),
                })
                .collect(),
        }
    }
}

impl InboxReport {
    /// The inbox story of `view`, or `None` when the event was never queued: it has queue items,
    /// inbox rows in history (a failed attempt, a dead letter, a replay), or a completion after a
    /// claim that was done on receipt (which only a queued delivery has).
    fn of(view: &EventView, queued: &[QueueEntry]) -> Option<Self> {
        use HistoryOutcome as O;
        let h = &view.history;
        let on_receipt = h
            .iter()
            .position(|r| r.outcome == O::Claimed && r.processed);
        let completed_after =
            on_receipt.is_some_and(|i| h[i..].iter().any(|r| r.outcome == O::Completed));
        let inbox_rows = h
            .iter()
            .any(|r| matches!(r.outcome, O::AttemptFailed | O::DeadLettered | O::Replayed));
        if queued.is_empty() && !inbox_rows && !completed_after {
            return None;
        }
        let status_of = |attempt: Option<u32>| {
            queued
                .iter()
                .flat_map(|q| &q.attempts)
                .find(|a| Some(a.attempt) == attempt)
                .and_then(|a| a.status)
        };
        let attempts: Vec<AttemptReport> = h
            .iter()
            .filter(|r| matches!(r.outcome, O::AttemptFailed | O::DeadLettered))
            .map(|r| AttemptReport {
                attempt: r.attempt,
                at: r.at.to_string(),
                status: status_of(r.attempt),
                error: r.note.clone(),
            })
            .collect();
        let replays = h
            .iter()
            .filter(|r| r.outcome == O::Replayed)
            .map(|r| ReplayReport {
                at: r.at.to_string(),
                reason: r.note.clone(),
            })
            .collect();
        let last = |o: O| h.iter().rev().find(|r| r.outcome == o);
        let delivered = last(O::Completed).filter(|_| completed_after || inbox_rows);
        let live = queued.iter().rev().find(|q| q.dead_at.is_none());
        let dead = queued.iter().rev().find(|q| q.dead_at.is_some());
        let (state, next_attempt_at) = match (live, dead, delivered) {
            (Some(q), _, _) if q.in_flight_until.is_some() => ("in_flight", None),
            (Some(q), _, _) if !q.attempts.is_empty() => ("retrying", Some(q.due_at.to_string())),
            (Some(_), _, _) => ("queued", None),
            // A dead letter left behind by an event queued again and delivered since.
            (None, Some(d), Some(r)) if d.dead_at.is_some_and(|at| at < r.at) => {
                ("delivered", None)
            }
            (None, Some(_), _) => ("dead", None),
            (None, None, Some(_)) => ("delivered", None),
            (None, None, None) => ("purged", None),
        };
        Some(Self {
            state,
            queued_at: h
                .iter()
                .find(|r| r.outcome == O::Claimed)
                .map(|r| r.at.to_string())
                .or_else(|| queued.first().map(|q| q.received_at.to_string())),
            attempts,
            dead_lettered_at: last(O::DeadLettered).map(|r| r.at.to_string()),
            replays,
            delivered_at: delivered.map(|r| r.at.to_string()),
            next_attempt_at,
        })
    }
}
