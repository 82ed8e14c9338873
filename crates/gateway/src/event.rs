//! One event, claimed: queued (inbox mode), or forwarded (or just accepted) under its claim, and
//! the answer's body. What a single delivery (`ingest.rs`) and each event of a batch
//! (`batch.rs`) go through alike.

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

use idemgate::answer::Seen;
use idemgate::{Claimed, Finish, ProcessError};
use idemgate_core::inbox::QueuedItem;
use idemgate_core::{ClaimMode, ClaimOutcome, ClaimToken};
use serde::Serialize;

use std::sync::Arc;

use crate::budget::BodyPermit;
use crate::config::{Mode, OnConflict};
use crate::error::AppError;
use crate::forward::{BodyHeaders, Delivery, Failure};
use crate::outcome::Outcome;
use crate::{AppState, Source};

/// What became of one event: its outcome and the answer's body, and the status (200, or 202
/// when queued).
pub(crate) struct Handled {
    pub(crate) outcome: Outcome,
    pub(crate) answer: Answer,
    pub(crate) status: StatusCode,
}

impl Handled {
    pub(crate) fn ok(outcome: Outcome, answer: Answer) -> Self {
        Self {
            outcome,
            answer,
            status: StatusCode::OK,
        }
    }

    pub(crate) fn into_response(mut self) -> Response {
        if self.answer.challenge.is_none() {
            self.answer.outcome = Some(self.outcome);
        }
        self.outcome
            .on((self.status, axum::Json(self.answer)).into_response())
    }
}

/// One event, claimed under `claim`: queued (inbox mode), or forwarded (or just accepted) under
/// the claim, whose 2xx completes it while anything else releases it so the sender's retry is
/// processed.
///
/// The claim and the forward run on a task of their own ([`AppState::forwards`]): once a forward
/// is sent, the downstream may have the event, so its outcome is settled by the forward's own
/// answer or `forward_timeout`, never by this request being dropped (a sender that hangs up
/// before a slow downstream answers, `limits.request_timeout`, the end of shutdown's grace).
/// Meanwhile the sender's retry is answered `in_flight`. Dropped before the claim's answer, the
/// task still claims, forwards and completes: the event is processed once, and the retry hears
/// `duplicate`.
///
/// # Errors
/// The [`AppError`] to answer with: in flight, a conflict the source rejects, a store failure,
/// a forward that failed.
pub(crate) async fn handle(
    state: &AppState,
    src: &Source,
    claim: idemgate_core::ClaimRequest,
    body: Bytes,
    carried: BodyHeaders,
    held: Arc<BodyPermit>,
) -> Result<Handled, AppError> {
    if src.mode == Mode::Inbox {
        let guard = match guard_body(state, src, &claim).await? {
            Guarded::Claimed(guard) => guard,
            Guarded::Answered(handled) => return Ok(handled),
        };
        let lease = claim.lease;
        let result = queue(state, src, claim, body, carried).await;
        settle_guard(state, guard, lease, &result).await;
        return result;
    }
    let task = {
        let state = state.clone();
        let name = src.name.clone();
        state.clone().forwards.spawn(async move {
            // The body's share of the budget goes back once the forward is done with it.
            let _held = held;
            let src = state.source(name.as_str())?;
            let guard = match guard_body(&state, src, &claim).await? {
                Guarded::Claimed(guard) => guard,
                Guarded::Answered(handled) => return Ok(handled),
            };
            let lease = claim.lease;
            let result = forward_once(&state, src, claim, body, carried).await;
            settle_guard(&state, guard, lease, &result).await;
            result
        })
    };
    task.await.unwrap_or_else(|e| {
        // A panic is logged and counted as the background tasks' are; the claim's guard
        // released it as the task unwound.
        if !e.is_panic() {
            tracing::error!(source = %src.name, error = %e, "a forward's task failed");
        }
        state.tasks.reap(&format!("forward:{}", src.name), e);
        Err(AppError::Internal {
            what: "the forward's task failed",
        })
    })
}

/// What claiming a delivery's payload fingerprint (`dedupe_on_body`) decided.
enum Guarded {
    /// Claimed, or not asked for (`None`): go on with the event id's claim, then settle it.
    Claimed(Option<ClaimToken>),
    /// The payload was received before (a replay under a new id, or the sender's retry), or is
    /// being processed: the answer, without claiming the event id.
    Answered(Handled),
}

/// With `dedupe_on_body`, claims the delivery's payload fingerprint as a key of its own
/// (`body:{sha-256 hex}`) before the event id, under the same TTL, lease and late-duplicate
/// policy: a captured delivery replayed with a new id header (GitHub, Shopify and Twilio do not
/// sign their id headers, GitHub signs no timestamp) finds it and is a duplicate.
///
/// # Errors
/// The store's, or the in-flight answer ([`AppError::Refused`]).
async fn guard_body(
    state: &AppState,
    src: &Source,
    claim: &idemgate_core::ClaimRequest,
) -> Result<Guarded, AppError> {
    if !src.dedupe_on_body {
        return Ok(Guarded::Claimed(None));
    }
    let Some(fingerprint) = claim.fingerprint else {
        return Ok(Guarded::Claimed(None));
    };
    let id =
        idemgate_core::EventId::new(format!("body:{}", fingerprint.to_hex())).map_err(|_| {
            AppError::Internal {
                what: "a payload fingerprint is not an event id",
            }
        })?;
    let guard = idemgate_core::ClaimRequest {
        key: idemgate_core::Key::new(src.name.clone(), id),
        ..claim.clone()
    }
    .mode(ClaimMode::OnSuccess);
    let outcome = state.dedup.claim(guard).await?;
    Ok(match Seen::of_claim(&outcome) {
        None => match outcome {
            ClaimOutcome::Claimed { token, .. } => Guarded::Claimed(Some(token)),
            _ => unreachable!("of_claim is None only for a claim"),
        },
        // The payload was processed before: a duplicate, late or not (history does not tell a
        // payload's story apart from its event's).
        Some(Seen::LateDuplicate { first_seen }) => Guarded::Answered(answered(
            Seen::Duplicate {
                first_seen: Some(first_seen),
            },
            OnConflict::Duplicate,
        )?),
        // The key is the payload's own fingerprint: another payload cannot reach it.
        Some(seen) => Guarded::Answered(answered(seen, OnConflict::Duplicate)?),
    })
}

/// An event this request did not process, answered as [`idemgate::answer`] says (the tower
/// layer's answers too): a duplicate or a conflict kept is 200 with its first receipt; in
/// flight, or a conflict the source rejects, is refused.
///
/// # Errors
/// [`AppError::Refused`].
pub(crate) fn answered(seen: Seen, on_conflict: OnConflict) -> Result<Handled, AppError> {
    let reply = seen.reply(on_conflict);
    if reply.problem.is_some() {
        return Err(AppError::Refused(reply));
    }
    Ok(Handled {
        outcome: seen.into(),
        status: reply.status,
        answer: Answer {
            first_seen: seen.first_seen().map(|t| t.to_string()),
            // Processed here a moment ago; the store has not taken the completion yet.
            completion: matches!(seen, Seen::Duplicate { first_seen: None }).then_some("pending"),
            ..Answer::default()
        },
    })
}

/// Completes the payload's claim when the event is processed (or was before), releases it
/// otherwise, so the sender's retry finds it as the event id's claim does.
async fn settle_guard(
    state: &AppState,
    guard: Option<ClaimToken>,
    lease: Duration,
    result: &Result<Handled, AppError>,
) {
    let Some(token) = guard else {
        return;
    };
    let processed = result.as_ref().is_ok_and(|h| {
        matches!(
            h.outcome,
            Outcome::Forwarded
                | Outcome::Accepted
                | Outcome::Queued
                | Outcome::Duplicate
                | Outcome::LateDuplicate
        )
    });
    let what = if processed {
        Finish::Complete
    } else {
        Finish::Release
    };
    if let Err(e) = state
        .dedup
        .finisher()
        .finish(
            state.dedup.store(),
            &token,
            what,
            lease,
            state.dedup.store_wait(),
        )
        .await
    {
        tracing::warn!(source = %token.key.source, error = %crate::error::ErrorChain(&e), "the payload's claim was lost before it could be finished");
    }
}

/// Forward mode's claim, forward, and completion or release, to its end.
async fn forward_once(
    state: &AppState,
    src: &Source,
    claim: idemgate_core::ClaimRequest,
    body: Bytes,
    carried: BodyHeaders,
) -> Result<Handled, AppError> {
    // One caller of `process_once`.
    let once = state
        .dedup
        .process_once(claim, |claimed: Claimed| async move {
            let attempt = claimed.token.attempt;
            let Some(destination) = &src.destination else {
                return Ok((attempt, None));
            };
            let delivery = Delivery {
                key: &claimed.token.key,
                attempt,
                body_headers: &carried,
            };
            let started = std::time::Instant::now();
            let result = destination.send(body, delivery, src.forward_timeout).await;
            state.metrics.forwarded(
                src.name.as_str(),
                crate::metrics::DownstreamSeen {
                    status: match &result {
                        Ok(sent) => sent.status(),
                        Err(failure) => failure.status(),
                    },
                    error: result.as_ref().err().map(ToString::to_string),
                    took: started.elapsed(),
                    at: std::time::SystemTime::now(),
                },
            );
            result.map(|sent| (attempt, Some(sent)))
        })
        .await;
    match once.map(Seen::of_once) {
        Ok(Ok((attempt, None))) => Ok(Handled::ok(
            Outcome::Accepted,
            Answer {
                attempt: Some(attempt),
                ..Answer::default()
            },
        )),
        // The downstream has it: the sender is told so, whatever the store said of the
        // completion (one it missed is retried until it takes it).
        Ok(Ok((attempt, Some(sent)))) => Ok(Handled::ok(
            Outcome::Forwarded,
            Answer {
                attempt: Some(attempt),
                downstream_status: sent.status(),
                ..Answer::default()
            },
        )),
        Ok(Err(seen)) => answered(seen, src.on_conflict),
        Err(ProcessError::Store(e)) => Err(e.into()),
        Err(ProcessError::Failed(failure)) => Err(match failure {
            Failure::Status { status, .. } => AppError::ForwardFailed { status },
            // A broker that is down or refuses the message: the sender is asked to come back
            // (503 with Retry-After), as for a store outage; its retry publishes again.
            Failure::Unreachable { downstream, why }
                if src.destination().is_some_and(|t| t.is_broker()) =>
            {
                tracing::warn!(source = %src.name, %downstream, error = %why, "the destination broker did not take the event");
                AppError::DestinationUnavailable { why }
            }
            Failure::Unreachable { downstream, why } => {
                tracing::warn!(source = %src.name, %downstream, error = %why, "downstream unreachable");
                AppError::ForwardUnreachable { why }
            }
            Failure::Timeout(_) if src.destination().is_some_and(|t| t.is_broker()) => {
                AppError::DestinationUnavailable {
                    why: format!(
                        "the broker did not acknowledge within forward_timeout ({})",
                        idemgate_core::Human(src.forward_timeout)
                    ),
                }
            }
            Failure::Timeout(_) => AppError::ForwardTimeout {
                timeout: src.forward_timeout,
            },
            // Only a GET has a length limit; a forward reads any answer.
            failure @ Failure::TooLarge { .. } => AppError::ForwardUnreachable {
                why: failure.to_string(),
            },
        }),
    }
}

/// Inbox mode: the claim and the queue item in one step, then 202; every later delivery of the
/// event is a duplicate, whatever became of its dispatch.
async fn queue(
    state: &AppState,
    src: &Source,
    claim: idemgate_core::ClaimRequest,
    body: Bytes,
    carried: BodyHeaders,
) -> Result<Handled, AppError> {
    let text =
        |v: &Option<HeaderValue>| v.as_ref().and_then(|v| v.to_str().ok()).map(str::to_owned);
    let item = QueuedItem {
        body: body.to_vec(),
        content_type: text(&carried.content_type),
        // What the dispatcher sends with the body besides its type.
        headers: text(&carried.content_encoding)
            .map(|ce| ("content-encoding".to_owned(), ce))
            .into_iter()
            .collect(),
    };
    let outcome = state.enqueue(claim, item).await?;
    match (Seen::of_claim(&outcome), outcome) {
        (None, ClaimOutcome::Claimed { token, .. }) => Ok(Handled {
            outcome: Outcome::Queued,
            answer: Answer {
                attempt: Some(token.attempt),
                ..Answer::default()
            },
            status: StatusCode::ACCEPTED,
        }),
        (Some(seen), _) => answered(seen, src.on_conflict),
        (None, _) => unreachable!("of_claim is None only for a claim"),
    }
}

/// The body of a delivery's answer (200): its outcome and what goes with it.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Answer {
    /// Filled in when the answer is sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<Outcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) downstream_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) first_seen: Option<String>,
    /// `pending`: processed here, the store has not taken the completion yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) completion: Option<&'static str>,
    /// Slack's URL verification.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) challenge: Option<String>,
    /// SNS's subscription handshake: `confirmed`, `logged` or `unsubscribed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) subscription: Option<&'static str>,
    /// SNS's subscription handshake: the topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) topic_arn: Option<String>,
}
