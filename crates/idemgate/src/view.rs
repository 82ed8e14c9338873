//! One event as the API and the CLI show it: [`EventReport`], "did we process it, and when?".

use serde::Serialize;

use crate::{EventView, HistoryOutcome};

/// An event's live record (if any) and whole history, oldest first, ready to serialize.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventReport {
    /// The source name.
    pub source: String,
    /// The sender's event id.
    pub event_id: String,
    /// The first completion (or mark-on-receipt claim) in history, if any.
    pub processed_at: Option<String>,
    /// The first delivery history holds.
    pub first_seen: Option<String>,
    /// The live dedup record; `None` once released or expired.
    pub record: Option<RecordReport>,
    /// Every delivery and state change, oldest first.
    pub history: Vec<HistoryReport>,
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
        let processed = view
            .history
            .iter()
            .find(|h| h.processed || h.outcome == HistoryOutcome::Completed);
        Self {
            source: view.key.source.as_str().to_owned(),
            event_id: view.key.event_id.as_str().to_owned(),
            processed_at: processed.map(|h| h.at.to_string()),
            first_seen: view.history.first().map(|h| h.at.to_string()),
            record: view.record.as_ref().map(|r| RecordReport {
                state: r.state.as_str(),
                attempt: r.attempt,
                first_seen: r.first_seen.to_string(),
                lease_until: r.lease_until.map(|t| t.to_string()),
                expires_at: r.expires_at.to_string(),
                fingerprint: r.fingerprint.map(|f| f.to_hex()),
                holder: r.holder.as_ref().map(ToString::to_string),
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
