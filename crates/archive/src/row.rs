//! One archived history row: every column history has, as plain values.

use idemgate_core::{Fingerprint, HistoryEntry, HistoryOutcome, Timestamp};

/// A history row as the archive keeps it. Read back, the outcome is kept as text: an archive
/// outlives versions, and a reader must not refuse an outcome it does not know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedRow {
    pub source: String,
    pub event_id: String,
    pub outcome: String,
    /// Whether, as of this row, the event counts as processed.
    pub processed: bool,
    pub attempt: Option<i32>,
    /// When the row was written (UTC, milliseconds).
    pub received_at: Timestamp,
    /// For answers about an existing record: milliseconds since its first receipt.
    pub gap_ms: Option<i64>,
    /// The request fingerprint (32 bytes) where there was one.
    pub fingerprint: Option<Vec<u8>>,
    /// An operator's words (a replay's reason) or a failed attempt's error.
    pub note: Option<String>,
}

impl ArchivedRow {
    /// The row of `entry`, of event `event_id` of `source`.
    pub fn new(source: &str, event_id: &str, entry: &HistoryEntry) -> Self {
        Self {
            source: source.to_owned(),
            event_id: event_id.to_owned(),
            outcome: entry.outcome.as_str().to_owned(),
            processed: entry.processed,
            attempt: entry.attempt.map(|a| i32::try_from(a).unwrap_or(i32::MAX)),
            received_at: entry.at,
            gap_ms: entry
                .gap
                .map(|g| i64::try_from(g.as_millis()).unwrap_or(i64::MAX)),
            fingerprint: entry.fingerprint.map(|f| f.0.to_vec()),
            note: entry.note.clone(),
        }
    }

    /// Back to a history entry; `None` when the outcome is one this version does not know.
    pub fn entry(&self) -> Option<HistoryEntry> {
        Some(HistoryEntry {
            outcome: HistoryOutcome::parse(&self.outcome)?,
            processed: self.processed,
            attempt: self.attempt.and_then(|a| u32::try_from(a).ok()),
            at: self.received_at,
            gap: self
                .gap_ms
                .and_then(|g| u64::try_from(g).ok())
                .map(std::time::Duration::from_millis),
            fingerprint: self
                .fingerprint
                .as_deref()
                .and_then(|f| <[u8; 32]>::try_from(f).ok())
                .map(Fingerprint),
            note: self.note.clone(),
        })
    }
}
