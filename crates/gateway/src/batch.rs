//! A delivery that is a batch of events (SendGrid's Event Webhook: a JSON array, one
//! `sg_event_id` per event), verified as a whole, then each event claimed on its own.
//!
//! Every event is its own delivery downstream: its JSON object as the body, its own
//! `Idempotency-Key` (`{source}:{sg_event_id}`), forwarded under its own claim (or, in inbox mode,
//! queued on its own), [`CONCURRENCY`] at a time. The answer's JSON lists what became of each
//! event, in order:
//!
//! - **200** when every event was processed (forwarded, accepted, queued) or is a duplicate;
//! - **5xx** when any event failed (its forward failed, the store failed, another delivery holds
//!   its claim): the sender retries the whole batch, and the events done this time are duplicates
//!   the next;
//! - **400** otherwise, when an event was refused: one without a usable `sg_event_id` (it cannot
//!   be deduplicated, so it is not forwarded), or a conflict the source rejects. The other events
//!   are processed all the same; none is dropped for its neighbour.
//!
//! An id repeated within one batch is processed once; its later copies are answered
//! `duplicate`, naming the first. An empty array is refused before anything is claimed (400
//! `missing_event_id`), as is a batch in which no event has a usable id.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use idemgate_core::{Fingerprint, Key};
use idemgate_providers::BatchEvent;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

use crate::error::AppError;
use crate::event::{Handled, handle};
use crate::outcome::Outcome;
use crate::{AppState, Source};

/// How many events of one batch are processed at once.
pub(crate) const CONCURRENCY: usize = 8;

/// What became of one event.
#[derive(Debug, Serialize)]
struct Event {
    /// Its position in the batch, from 0.
    index: usize,
    /// Its id, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    /// `forwarded`, `accepted`, `queued`, `duplicate`, `late_duplicate`, `conflict`, or the
    /// refusal or failure (`missing_event_id`, `forward_failed`, `in_flight`, ...).
    outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    downstream_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_seen: Option<String>,
    /// Why it was refused or failed, or which earlier event it repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(skip)]
    verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Done,
    Refused,
    Failed(StatusCode),
}

impl Event {
    fn new(index: usize, id: Option<String>, outcome: Outcome, verdict: Verdict) -> Self {
        Self {
            index,
            id,
            outcome,
            attempt: None,
            downstream_status: None,
            first_seen: None,
            detail: None,
            verdict,
        }
    }

    fn handled(index: usize, id: String, result: Result<Handled, AppError>) -> Self {
        match result {
            Ok(h) => Self {
                attempt: h.answer.attempt,
                downstream_status: h.answer.downstream_status,
                first_seen: h.answer.first_seen.clone(),
                ..Self::new(index, Some(id), h.outcome, Verdict::Done)
            },
            Err(e) => {
                let (status, outcome) = e.status_and_outcome();
                let verdict = match e {
                    AppError::Refused(ref r)
                        if matches!(r.seen, idemgate::answer::Seen::Conflict { .. }) =>
                    {
                        Verdict::Refused
                    }
                    _ => Verdict::Failed(status),
                };
                Self {
                    detail: Some(e.to_string()),
                    ..Self::new(index, Some(id), outcome, verdict)
                }
            }
        }
    }
}

#[derive(Debug, Serialize)]
struct Answer {
    outcome: Outcome,
    /// How many events were processed now, were duplicates, were refused, failed.
    processed: usize,
    duplicates: usize,
    refused: usize,
    failed: usize,
    events: Vec<Event>,
}

/// Claims and processes every event of a verified batch; the answer says what became of each.
pub(crate) async fn receive(
    state: &AppState,
    src: &Source,
    body: &Bytes,
    events: Vec<BatchEvent>,
    content_type: Option<HeaderValue>,
    held: std::sync::Arc<crate::budget::BodyPermit>,
) -> Response {
    let mut answers = Vec::with_capacity(events.len());
    let mut first_of: HashMap<String, usize> = HashMap::new();
    let mut tasks = JoinSet::new();
    for event in events {
        let id = match event.id {
            Ok(id) => id,
            Err(why) => {
                answers.push(Event {
                    detail: Some(why),
                    ..Event::new(event.index, None, Outcome::MissingEventId, Verdict::Refused)
                });
                continue;
            }
        };
        if let Some(first) = first_of.get(id.as_str()) {
            answers.push(Event {
                detail: Some(format!("repeats event {first} of this batch")),
                ..Event::new(
                    event.index,
                    Some(id.as_str().to_owned()),
                    Outcome::Duplicate,
                    Verdict::Done,
                )
            });
            continue;
        }
        first_of.insert(id.as_str().to_owned(), event.index);
        while tasks.len() >= CONCURRENCY {
            collect(&mut tasks, &mut answers).await;
        }
        let bytes = body.slice(event.span);
        let fingerprint = Fingerprint(Sha256::digest(&bytes).into());
        let shown = id.as_str().to_owned();
        let claim = src
            .claim_request(Key::new(src.name.clone(), id))
            .fingerprint(fingerprint);
        let (state, name, content_type, held) = (
            state.clone(),
            src.name.to_string(),
            content_type.clone(),
            held.clone(),
        );
        let index = event.index;
        // Each event is finished even if the sender hangs up: its claim is completed or released.
        tasks.spawn(async move {
            let result = match state.source(&name) {
                Ok(src) => {
                    let carried = crate::forward::BodyHeaders {
                        content_type,
                        content_encoding: None,
                    };
                    handle(&state, src, claim, bytes, carried, held).await
                }
                Err(e) => Err(e),
            };
            Event::handled(index, shown, result)
        });
    }
    while !tasks.is_empty() {
        collect(&mut tasks, &mut answers).await;
    }
    answers.sort_by_key(|e| e.index);
    respond(answers)
}

async fn collect(tasks: &mut JoinSet<Event>, answers: &mut Vec<Event>) {
    match tasks.join_next().await {
        Some(Ok(event)) => answers.push(event),
        // A panic in one event's processing: its claim's guard released it; the batch is retried.
        Some(Err(e)) => tracing::error!(error = %e, "an event of a batch was not processed"),
        None => {}
    }
}

fn respond(events: Vec<Event>) -> Response {
    let count = |f: &dyn Fn(&Event) -> bool| events.iter().filter(|e| f(e)).count();
    let duplicates = count(&|e| {
        e.verdict == Verdict::Done
            && matches!(
                e.outcome,
                Outcome::Duplicate | Outcome::LateDuplicate | Outcome::Conflict
            )
    });
    let done = count(&|e| e.verdict == Verdict::Done);
    let refused = count(&|e| e.verdict == Verdict::Refused);
    let failures: Vec<StatusCode> = events
        .iter()
        .filter_map(|e| match e.verdict {
            Verdict::Failed(status) => Some(status),
            _ => None,
        })
        .collect();
    let status = if failures.is_empty() {
        if refused > 0 {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        }
    } else if failures.contains(&StatusCode::SERVICE_UNAVAILABLE)
        || failures.contains(&StatusCode::CONFLICT)
    {
        // The store, a timeout or a claim held elsewhere: come back later.
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::BAD_GATEWAY
    };
    let answer = Answer {
        outcome: Outcome::Batch,
        processed: done - duplicates,
        duplicates,
        refused,
        failed: failures.len(),
        events,
    };
    Outcome::Batch.on((status, axum::Json(answer)).into_response())
}
