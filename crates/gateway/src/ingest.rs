//! `POST /hooks/{source}`: a sender's delivery.
//!
//! Body limit (413) -> signature (401) -> event id (400) -> fingerprint (SHA-256 of the body) ->
//! claim, then:
//! - `Claimed`: forward to the downstream; a 2xx completes the claim (200), anything else releases
//!   it so the sender's retry is processed (502, or 503 on timeout). A source without a
//!   `forward_url` completes the claim at once and answers 200.
//! - `Duplicate`: 200, nothing forwarded. `InFlight`: 409 with `Retry-After`. `Conflict`: 200 or
//!   409, by the source's `on_conflict`.
//!
//! One event's claim and forward (or queueing, in inbox mode) is `event.rs`; a SendGrid batch,
//! each of its events claimed on its own, is `batch.rs`.
//!
//! A forward settles itself: the claim and the forward run on a task of their own, so a request
//! dropped while it is in flight (the sender hung up, the request timeout fired, shutdown's grace
//! ran out) leaves the forward to finish, bounded by `forward_timeout`, and complete or release
//! the claim on its answer; the sender's retry meanwhile is answered `in_flight`.

use std::time::SystemTime;

use axum::body::{Body, Bytes};
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use idemgate_core::{Fingerprint, Key};
use idemgate_providers::{Control, Scheme, Verified, VerifyError};
use sha2::{Digest, Sha256};

use crate::budget::{BodyBudget, BodyPermit};
use crate::config::SnsSubscription;
use crate::error::{AppError, ErrorChain};
use crate::event::{Answer, handle};
use crate::outcome::Outcome;
use crate::path::PathParams;
use crate::{AppState, Source};

pub(crate) async fn hook(
    State(state): State<AppState>,
    PathParams(name): PathParams<String>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    let query = parts.uri.query();
    // Everything the headers can tell, before the body is read: a body is held in memory until
    // its signature is checked, so nobody gets the gateway to hold one for a source that does not
    // exist, from outside `allow_from`, without the bearer token a `none` source needs, or
    // without the headers its signature travels in.
    let src = match admit(&state, &name, &parts.headers, peer) {
        Ok(src) => src,
        Err(e) => {
            // A small body is read and dropped (never held whole), so the sender keeps its
            // keep-alive connection; a large one is left, and the connection closes.
            skip_small(body).await;
            return e.into_response();
        }
    };
    match receive(&state, src, &parts.headers, query, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

/// The source a delivery names, if the headers admit it: the peer inside `allow_from`, the
/// bearer token of a `none` source, the headers the signature travels in.
fn admit<'s>(
    state: &'s AppState,
    name: &str,
    headers: &HeaderMap,
    peer: Option<IpAddr>,
) -> Result<&'s Source, AppError> {
    let src = state.source(name)?;
    src.admit(peer)?;
    if src.needs_bearer() {
        state.authorize(headers, crate::config::Scope::Send)?;
    }
    src.verifier
        .check_headers(headers)
        .map_err(|e| verify_error(src, e))?;
    Ok(src)
}

/// The most body an early refusal reads and drops to keep the connection alive.
const SKIPPED_BODY: u64 = 64 * 1024;

/// Reads and drops a body announced at most [`SKIPPED_BODY`] long, for at most a second.
async fn skip_small(body: Body) {
    let small = http_body::Body::size_hint(&body)
        .upper()
        .is_some_and(|n| n <= SKIPPED_BODY);
    if small {
        let mut body = body;
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            while let Some(Ok(_)) = body.frame().await {}
        })
        .await;
    }
}

/// One delivery, from its body to its answer: verified, claimed, forwarded under the claim.
#[tracing::instrument(name = "delivery", skip_all, fields(source = %src.name, event_id = tracing::field::Empty))]
async fn receive(
    state: &AppState,
    src: &Source,
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
) -> Result<Response, AppError> {
    let (body, held) = read_body(body, src.body_limit, &state.body_budget).await?;
    let held = std::sync::Arc::new(held);
    let verified = match verify(src, headers, &body, query).await? {
        Ok(v) => v,
        Err(VerifyError::MissingEventId { .. })
            if let Some(challenge) = slack_challenge(src, &body) =>
        {
            // Slack's signed handshake when an Events API URL is set: echo the challenge.
            return Ok(answer(
                Outcome::Challenge,
                Answer {
                    challenge: Some(challenge),
                    ..Answer::default()
                },
            ));
        }
        Err(e) => return Err(verify_error(src, e)),
    };
    if let Some(control) = &verified.control {
        return control_message(src, control).await;
    }
    let carried = crate::forward::BodyHeaders::of(headers);
    if let Some(events) = verified.batch {
        let content_type = carried.content_type;
        return Ok(crate::batch::receive(state, src, &body, events, content_type, held).await);
    }
    let fingerprint = Fingerprint(Sha256::digest(&body).into());
    tracing::Span::current().record("event_id", verified.event_id.as_str());
    let key = Key::new(src.name.clone(), verified.event_id);
    let claim = src.claim_request(key).fingerprint(fingerprint);
    Ok(handle(state, src, claim, body, carried, held)
        .await?
        .into_response())
}

/// Verifies a delivery, first fetching (or taking the kept copy of) the document its check needs
/// (see [`crate::documents`]), and fetching it once more when a token names a key the copy lacks.
///
/// # Errors
/// The outer error when the document cannot be fetched (503: the sender retries); the inner one
/// is the verifier's refusal.
async fn verify(
    src: &Source,
    headers: &HeaderMap,
    body: &[u8],
    query: Option<&str>,
) -> Result<Result<Verified, VerifyError>, AppError> {
    let delivery = idemgate_providers::Delivery::new(headers, body).with_query(query);
    let needed = match src.verifier.needs(&delivery) {
        Ok(needed) => needed,
        Err(e) => return Ok(Err(e)),
    };
    let (Some(needed), Some(documents)) = (needed, &src.documents) else {
        return Ok(src.verifier.verify_delivery(&delivery, SystemTime::now()));
    };
    let unavailable = |why: String| {
        tracing::warn!(source = %src.name, error = %why, "cannot fetch a document the signature check needs");
        AppError::DocumentUnavailable { why }
    };
    let document = documents.get(&needed).await.map_err(unavailable)?;
    let first = src.verifier.verify_delivery(
        &delivery.with_document(&needed.url, &document),
        SystemTime::now(),
    );
    if let Err(VerifyError::UnknownKey { .. }) = &first
        && let Some(fresh) = documents.refresh(&needed).await.map_err(unavailable)?
    {
        // Keys rotate: the token may name one published since the copy was fetched.
        return Ok(src.verifier.verify_delivery(
            &delivery.with_document(&needed.url, &fresh),
            SystemTime::now(),
        ));
    }
    Ok(first)
}

/// A verified message for the gateway itself (SNS's subscription handshake): answered 200 once
/// handled, never claimed or forwarded.
async fn control_message(src: &Source, control: &Control) -> Result<Response, AppError> {
    let (subscription, topic_arn) = match control {
        Control::SnsSubscription {
            subscribe_url,
            topic_arn,
        } => match (src.sns_subscription, &src.documents) {
            (SnsSubscription::Confirm, Some(documents)) => {
                documents.fetch(subscribe_url).await.map_err(|why| {
                    tracing::warn!(source = %src.name, %topic_arn, error = %why, "cannot confirm the SNS subscription");
                    AppError::ConfirmFailed { why }
                })?;
                tracing::info!(source = %src.name, %topic_arn, "SNS subscription confirmed");
                ("confirmed", topic_arn)
            }
            _ => {
                tracing::warn!(
                    source = %src.name, %topic_arn, %subscribe_url,
                    "SNS subscription confirmation received: visit its SubscribeURL to confirm (or set sns_subscription = \"confirm\")"
                );
                ("logged", topic_arn)
            }
        },
        Control::SnsUnsubscribed { topic_arn } => {
            tracing::info!(source = %src.name, %topic_arn, "SNS subscription deleted");
            ("unsubscribed", topic_arn)
        }
        other => {
            tracing::warn!(source = %src.name, message = ?other, "a control message this gateway does not handle");
            ("ignored", &String::new())
        }
    };
    Ok(answer(
        Outcome::Handshake,
        Answer {
            subscription: Some(subscription),
            topic_arn: Some(topic_arn.clone()).filter(|t| !t.is_empty()),
            ..Answer::default()
        },
    ))
}

/// The `challenge` of a Slack `url_verification` body (already signature-checked).
fn slack_challenge(src: &Source, body: &[u8]) -> Option<String> {
    match src.verifier.scheme() {
        Scheme::Slack => idemgate_providers::slack::challenge(body),
        _ => None,
    }
}

/// A 200 answer with `outcome` (in the body, except for Slack's challenge, whose body is Slack's).
fn answer(outcome: Outcome, mut body: Answer) -> Response {
    if body.challenge.is_none() {
        body.outcome = Some(outcome);
    }
    outcome.on((StatusCode::OK, axum::Json(body)).into_response())
}

/// Reads the body, refusing more than `limit` bytes (by `Content-Length` before reading, and by
/// counting while reading), within the gateway's `budget` of bytes held across every request:
/// an announced body takes its share before a byte is read, a chunked one as it arrives, and a
/// body that does not fit is refused ([`AppError::BodyBudget`], 503). The permit gives the share
/// back when the body is no longer held.
async fn read_body(
    body: Body,
    limit: usize,
    budget: &BodyBudget,
) -> Result<(Bytes, BodyPermit), AppError> {
    let mut held = BodyPermit::none();
    let over_budget = || AppError::BodyBudget {
        budget: budget.bytes(),
    };
    let announced = http_body::Body::size_hint(&body)
        .exact()
        .and_then(|n| usize::try_from(n).ok());
    if let Some(n) = announced {
        if n > limit {
            return Err(AppError::TooLarge { limit });
        }
        budget.grow(&mut held, n).ok_or_else(over_budget)?;
    }
    let mut body = Limited::new(body, limit);
    let mut bytes = Vec::with_capacity(announced.unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| body_error(&*e, limit))?;
        if let Ok(data) = frame.into_data() {
            if announced.is_none() {
                budget.grow(&mut held, data.len()).ok_or_else(over_budget)?;
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok((Bytes::from(bytes), held))
}

/// A body that could not be read: over the limit (some limits surface wrapped in the body's
/// own error), or cut off.
fn body_error(e: &(dyn std::error::Error + 'static), limit: usize) -> AppError {
    let mut source = Some(e);
    while let Some(s) = source {
        if s.is::<LengthLimitError>() {
            return AppError::TooLarge { limit };
        }
        source = s.source();
    }
    AppError::BodyRead
}

fn verify_error(src: &Source, e: VerifyError) -> AppError {
    let kind = Outcome::of_refusal(&e);
    // With its causes: "event id refused: header x-event-id is not UTF-8".
    let detail = ErrorChain(&e).to_string();
    match e.status() {
        // A basic-auth source (Postmark) asks for credentials again.
        401 if matches!(src.verifier.scheme(), Scheme::Postmark(_)) => AppError::Credentials {
            kind,
            detail,
            source_name: src.name.to_string(),
        },
        401 => AppError::Signature { kind, detail },
        // A document the check needs was not passed in (503), or cannot be used (502).
        status @ (502 | 503) => AppError::Document {
            status,
            kind,
            detail,
        },
        403 => AppError::Forbidden { kind, detail },
        _ => AppError::BadRequest { kind, detail },
    }
}
