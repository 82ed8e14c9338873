//! What a delivery that was not processed by this call is answered: one mapping from a claim's
//! outcome to an HTTP status, an `Idemgate-Outcome`, a `Retry-After` and a body, used by the
//! tower layer ([`crate::IdempotencyLayer`]) and by the gateway alike, so the two cannot answer
//! the same outcome differently.
//!
//! | outcome | status | body |
//! |---|---|---|
//! | duplicate, late duplicate | 200 | `{"outcome", "first_seen"}` |
//! | conflict, [`OnConflict::Duplicate`] | 200 | `{"outcome": "conflict", "first_seen"}` |
//! | conflict, [`OnConflict::Reject`] | 409 | problem+json with `first_seen` |
//! | in flight | 409 + `Retry-After` (the other lease's end, at least 1 s) | problem+json |

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use idemgate_core::{ClaimOutcome, Timestamp};

use crate::Once;

/// What to answer a delivery whose event id is live with another payload (a different SHA-256
/// of the body): [`Once::Conflict`]. The gateway's per-source `on_conflict`, with the same names
/// and the same default. Either way the service is not called, and the store records the
/// conflict in history (outcome `conflict`), where `idemgate lookup` and the dashboard show it.
///
/// Why a 200 by default: while the first record lives, every retry of the other payload is a
/// conflict again, so a 409 can never get it processed. It only keeps the sender retrying for
/// its whole retry window (Stripe: three days) and then marks the endpoint as failing. And some
/// senders resend one event id with bytes their signature does not cover changed (Mailgun's
/// `event-data`), which is the same event. Choose [`OnConflict::Reject`] where the sender reads
/// the status and another payload under one id is a bug it should hear of (an internal bus).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnConflict {
    /// Answer 200 with `Idemgate-Outcome: conflict` (the default): the sender stops retrying.
    #[default]
    Duplicate,
    /// Answer 409 `conflict` (a problem+json naming the first receipt): the sender retries.
    Reject,
}

impl OnConflict {
    /// The policy as written in configuration (`duplicate`, `reject`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Duplicate => "duplicate",
            Self::Reject => "reject",
        }
    }
}

/// A delivery this call did not process, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Processed before, within its TTL. `first_seen` is `None` when this process answered by
    /// itself (it processed the event a moment ago; the store has not taken the completion yet).
    Duplicate {
        /// The first receipt.
        first_seen: Option<Timestamp>,
    },
    /// Processed before, its record since expired; history remembers it.
    LateDuplicate {
        /// The first receipt.
        first_seen: Timestamp,
    },
    /// Being processed by another caller under a live lease.
    InFlight {
        /// Until the other caller's lease ends.
        retry_after: Duration,
    },
    /// Live with another payload.
    Conflict {
        /// The first receipt of the other payload.
        first_seen: Timestamp,
    },
}

impl Seen {
    /// A claim's outcome, unless it was claimed (`None`: go on and process it).
    pub fn of_claim(outcome: &ClaimOutcome) -> Option<Self> {
        match *outcome {
            ClaimOutcome::Claimed { .. } => None,
            ClaimOutcome::Duplicate { first_seen, .. } => Some(Self::Duplicate {
                first_seen: Some(first_seen),
            }),
            ClaimOutcome::LateDuplicate { first_seen, .. } => {
                Some(Self::LateDuplicate { first_seen })
            }
            ClaimOutcome::InFlight { retry_after } => Some(Self::InFlight { retry_after }),
            ClaimOutcome::Conflict { first_seen } => Some(Self::Conflict { first_seen }),
        }
    }

    /// [`crate::Dedup::process_once`]'s answer: what the work returned, or why it did not run.
    ///
    /// # Errors
    /// The [`Seen`] when the work did not run.
    pub fn of_once<T>(once: Once<T>) -> Result<T, Self> {
        match once {
            Once::Processed(t) => Ok(t),
            Once::Duplicate { first_seen, .. } => Err(Self::Duplicate { first_seen }),
            Once::LateDuplicate { first_seen } => Err(Self::LateDuplicate { first_seen }),
            Once::InFlight { retry_after } => Err(Self::InFlight { retry_after }),
            Once::Conflict { first_seen } => Err(Self::Conflict { first_seen }),
        }
    }

    /// The outcome's stable name: the `Idemgate-Outcome` header and the problem type's last part.
    pub fn name(self) -> &'static str {
        match self {
            Self::Duplicate { .. } => "duplicate",
            Self::LateDuplicate { .. } => "late_duplicate",
            Self::InFlight { .. } => "in_flight",
            Self::Conflict { .. } => "conflict",
        }
    }

    /// The first receipt, where one is known.
    pub fn first_seen(self) -> Option<Timestamp> {
        match self {
            Self::Duplicate { first_seen } => first_seen,
            Self::LateDuplicate { first_seen } | Self::Conflict { first_seen } => Some(first_seen),
            Self::InFlight { .. } => None,
        }
    }

    /// How it is answered under `on_conflict`.
    pub fn reply(self, on_conflict: OnConflict) -> Reply {
        let refusal = match self {
            Self::InFlight { retry_after } => {
                let s = retry_after.as_secs().max(1);
                Some((
                    format!("another delivery of this event is being processed; retry after {s} s"),
                    Some(s),
                ))
            }
            Self::Conflict { first_seen } if on_conflict == OnConflict::Reject => Some((
                format!(
                    "this event id was first received at {first_seen} with a different payload"
                ),
                None,
            )),
            _ => None,
        };
        let (status, problem, retry_after_s) = match refusal {
            Some((detail, retry_after)) => (StatusCode::CONFLICT, Some(detail), retry_after),
            None => (StatusCode::OK, None, None),
        };
        Reply {
            seen: self,
            status,
            problem,
            retry_after_s,
        }
    }
}

/// How a [`Seen`] is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// What it answers.
    pub seen: Seen,
    /// 200 (the sender should stop retrying) or 409 (it should come back).
    pub status: StatusCode,
    /// A refusal's detail, for a person: answered as problem+json (RFC 9457). `None`: a 200
    /// JSON answer.
    pub problem: Option<String>,
    /// `Retry-After`, in seconds.
    pub retry_after_s: Option<u64>,
}

impl Reply {
    /// The answer's body: `{"outcome", "first_seen"}`, or a problem (`type`
    /// `urn:idemgate:problem:{outcome}`) with `first_seen` where one is known.
    pub fn body(&self) -> serde_json::Value {
        let first_seen = self.seen.first_seen().map(|t| t.to_string());
        match &self.problem {
            None => serde_json::json!({
                "outcome": self.seen.name(),
                "first_seen": first_seen,
            }),
            Some(detail) => {
                let mut body = problem_body(self.status, self.seen.name(), detail);
                if let Some(first_seen) = first_seen {
                    body["first_seen"] = serde_json::json!(first_seen);
                }
                if let Some(s) = self.retry_after_s {
                    body["retry_after_s"] = serde_json::json!(s);
                }
                body
            }
        }
    }

    /// The whole answer, as the tower layer sends it: status, `Content-Type`,
    /// `Idemgate-Outcome`, `Retry-After` and [`body`](Self::body).
    pub fn into_response(self) -> Response<Full<Bytes>> {
        let content_type = if self.problem.is_some() {
            "application/problem+json"
        } else {
            "application/json"
        };
        let mut r = with_body(self.status, self.seen.name(), content_type, self.body());
        if let Some(s) = self.retry_after_s {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

pub(crate) fn problem_body(
    status: StatusCode,
    kind: &'static str,
    detail: &str,
) -> serde_json::Value {
    serde_json::json!({
        "type": format!("urn:idemgate:problem:{kind}"),
        "title": status.canonical_reason().unwrap_or("error"),
        "status": status.as_u16(),
        "detail": detail,
    })
}

pub(crate) fn with_body(
    status: StatusCode,
    outcome: &'static str,
    content_type: &'static str,
    body: serde_json::Value,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert("idemgate-outcome", HeaderValue::from_static(outcome));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Timestamp {
        Timestamp::from_millis(1_700_000_000_000)
    }

    #[test]
    fn each_outcome_is_answered_once_and_for_all() {
        let dup = Seen::Duplicate {
            first_seen: Some(at()),
        }
        .reply(OnConflict::Duplicate);
        assert_eq!((dup.status, dup.problem.is_none()), (StatusCode::OK, true));
        assert_eq!(dup.body()["outcome"], "duplicate");
        let conflict = Seen::Conflict { first_seen: at() };
        assert_eq!(conflict.reply(OnConflict::Duplicate).status, StatusCode::OK);
        let rejected = conflict.reply(OnConflict::Reject);
        assert_eq!(rejected.status, StatusCode::CONFLICT);
        assert_eq!(rejected.body()["type"], "urn:idemgate:problem:conflict");
        assert_eq!(rejected.body()["first_seen"], at().to_string());
        let busy = Seen::InFlight {
            retry_after: Duration::from_millis(200),
        }
        .reply(OnConflict::Duplicate)
        .into_response();
        assert_eq!(busy.status(), StatusCode::CONFLICT);
        assert_eq!(busy.headers()[header::RETRY_AFTER], "1");
        assert_eq!(busy.headers()["idemgate-outcome"], "in_flight");
    }
}
