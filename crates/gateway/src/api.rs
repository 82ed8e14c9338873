//! The claim API for workers in any language: `/v1/claims` and `/v1/events`.
//!
//! Every route needs `Authorization: Bearer <token>` with one of the configured `api_tokens`.
//! Request bodies are JSON; unknown fields are refused.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use idemgate_core::store::ClaimStore;
use idemgate_core::{ClaimOutcome, ClaimToken, EventId, Fingerprint, Key};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::config::Scope;
use crate::error::AppError;
use crate::outcome::{Outcome, labelled};
use crate::path::PathParams;
use crate::{AppState, Source};

/// The routes this module serves, as `(method, path)`; `/openapi.json` must describe exactly these.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/claims"),
    ("post", "/v1/claims/{source}/{event_id}/complete"),
    ("post", "/v1/claims/{source}/{event_id}/release"),
    ("get", "/v1/events/{source}/{event_id}"),
    ("post", "/v1/sources/{source}/replay"),
];

pub use crate::openapi::{OPENAPI, openapi};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimBody {
    source: String,
    event_id: String,
    fingerprint: Option<String>,
    /// A JSON Schema integer: `119` and `119.0` alike.
    lease_s: Option<serde_json::Number>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    token: String,
}

/// `lease_s` as a lease: a whole number of seconds from 1 (`119` and `119.0` alike, as JSON
/// Schema's integer), cut to the source's TTL (a claim cannot outlive its record).
fn lease(lease_s: &serde_json::Number, ttl: Duration) -> Result<Duration, AppError> {
    let secs = lease_s
        .as_f64()
        .filter(|f| f.fract() == 0.0 && *f >= 1.0)
        .ok_or_else(|| {
            bad(
                Outcome::InvalidLease,
                format!("lease_s must be a whole number of seconds from 1, not {lease_s}"),
            )
        })?;
    Ok(Duration::from_secs_f64(secs.min(ttl.as_secs_f64())).min(ttl))
}

fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, AppError> {
    serde_json::from_slice(body).map_err(|e| AppError::BadRequest {
        kind: Outcome::InvalidJson,
        detail: format!("the body is not the JSON this route takes: {e}"),
    })
}

fn bad(kind: Outcome, e: impl std::fmt::Display) -> AppError {
    AppError::BadRequest {
        kind,
        detail: e.to_string(),
    }
}

/// The answer to a claim.
#[derive(Debug, Serialize)]
struct ClaimAnswer {
    outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<String>,
    /// Claimed: when history shows the event processed before its record expired.
    #[serde(skip_serializing_if = "Option::is_none")]
    late_duplicate_of: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_seen: Option<String>,
    /// Duplicate: the record's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
}

impl ClaimAnswer {
    fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            token: None,
            attempt: None,
            expires_at: None,
            late_duplicate_of: None,
            first_seen: None,
            state: None,
        }
    }

    fn into_response(self, status: StatusCode) -> Response {
        let outcome = self.outcome;
        outcome.on((status, Json(self)).into_response())
    }
}

/// The largest body the claim API reads (its JSON bodies are a few hundred bytes).
pub(crate) const BODY_LIMIT: usize = 64 * 1024;

/// The claim API's gate, before any handler reads a byte of the body: a bearer token with the
/// route's scope (`replay` for `/v1/sources/{source}/replay`, `claims` for the rest).
pub(crate) async fn gate(
    State(state): State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // A method no route of the API takes is answered 405 by the router, token or not.
    if !matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::POST
    ) {
        return next.run(req).await;
    }
    let scope = if req.uri().path().ends_with("/replay") {
        Scope::Replay
    } else {
        Scope::Claims
    };
    match state.authorize(req.headers(), scope) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// The configured source, and the validated key.
fn key<'a>(
    state: &'a AppState,
    source: &str,
    event_id: &str,
) -> Result<(&'a Source, Key), AppError> {
    let src = state.source(source)?;
    let event_id = EventId::new(event_id).map_err(|e| bad(Outcome::InvalidEventId, e))?;
    Ok((src, Key::new(src.name.clone(), event_id)))
}

pub(crate) async fn create_claim(State(state): State<AppState>, body: Bytes) -> Response {
    let (label, result) = match parse_json::<ClaimBody>(&body) {
        Ok(req) => {
            let label = state.label(&req.source).to_owned();
            (label, claim(&state, req).await)
        }
        Err(e) => ("unknown".to_owned(), Err(e)),
    };
    labelled(label, result.unwrap_or_else(IntoResponse::into_response))
}

#[tracing::instrument(name = "api_claim", skip_all, fields(source = %req.source, event_id = %req.event_id))]
async fn claim(state: &AppState, req: ClaimBody) -> Result<Response, AppError> {
    let (src, key) = key(state, &req.source, &req.event_id)?;
    let mut claim = src.claim_request(key);
    if let Some(fp) = &req.fingerprint {
        claim.fingerprint =
            Some(Fingerprint::from_hex(fp).map_err(|e| bad(Outcome::InvalidFingerprint, e))?);
    }
    if let Some(lease_s) = &req.lease_s {
        claim.lease = lease(lease_s, src.policy.ttl.ttl)?;
    }
    let outcome = state.claim(claim).await?;
    Ok(match outcome {
        ClaimOutcome::Claimed {
            token,
            expires_at,
            late_duplicate,
        } => ClaimAnswer {
            token: Some(token.fence()),
            attempt: Some(token.attempt),
            expires_at: Some(expires_at.to_string()),
            late_duplicate_of: late_duplicate.map(|t| t.to_string()),
            ..ClaimAnswer::new(Outcome::Claimed)
        }
        .into_response(StatusCode::CREATED),
        ClaimOutcome::LateDuplicate { first_seen, .. } => ClaimAnswer {
            first_seen: Some(first_seen.to_string()),
            ..ClaimAnswer::new(Outcome::LateDuplicate)
        }
        .into_response(StatusCode::OK),
        ClaimOutcome::Duplicate {
            first_seen,
            state: record_state,
            ..
        } => ClaimAnswer {
            first_seen: Some(first_seen.to_string()),
            state: Some(record_state.as_str()),
            ..ClaimAnswer::new(Outcome::Duplicate)
        }
        .into_response(StatusCode::OK),
        ClaimOutcome::InFlight { .. } | ClaimOutcome::Conflict { .. } => {
            return Err(AppError::refused(
                idemgate::answer::Seen::of_claim(&outcome).expect("not claimed"),
            ));
        }
    })
}

#[tracing::instrument(name = "api_finish", skip(state, body))]
async fn finish(
    state: &AppState,
    source: &str,
    event_id: &str,
    body: &[u8],
    complete: bool,
) -> Result<Response, AppError> {
    let (_, key) = key(state, source, event_id)?;
    let req: TokenBody = parse_json(body)?;
    let token =
        ClaimToken::from_fence(key, &req.token).map_err(|e| bad(Outcome::InvalidToken, e))?;
    let outcome = if complete {
        state.store.complete(&token).await?;
        Outcome::Completed
    } else {
        state.store.release(&token).await?;
        Outcome::Released
    };
    Ok(ClaimAnswer::new(outcome).into_response(StatusCode::OK))
}

pub(crate) async fn complete(
    State(state): State<AppState>,
    PathParams((source, event_id)): PathParams<(String, String)>,
    body: Bytes,
) -> Response {
    let response = finish(&state, &source, &event_id, &body, true)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    labelled(state.label(&source).to_owned(), response)
}

pub(crate) async fn release(
    State(state): State<AppState>,
    PathParams((source, event_id)): PathParams<(String, String)>,
    body: Bytes,
) -> Response {
    let response = finish(&state, &source, &event_id, &body, false)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    labelled(state.label(&source).to_owned(), response)
}

/// "Did we process X, and when?": the live record and the whole history of one event.
#[tracing::instrument(name = "api_lookup", skip(state))]
pub(crate) async fn event(
    State(state): State<AppState>,
    PathParams((source, event_id)): PathParams<(String, String)>,
) -> Result<Response, AppError> {
    // Like the claim routes: a source this gateway does not serve is 404 (`idemgate lookup`
    // still reads the events of a source removed from the config).
    let (_, key) = key(&state, &source, &event_id)?;
    let view = state.store.lookup(&key).await?;
    let queued = state.store.queue_of(&key).await?;
    Ok(Outcome::Lookup.on(Json(idemgate::EventReport::new(&view, &queued)).into_response()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayBody {
    /// Recorded in each replayed event's history.
    reason: String,
    /// Only dead letters that died within this many seconds (a JSON Schema integer; `null` is
    /// not one).
    #[serde(default, deserialize_with = "present")]
    since_s: Option<serde_json::Number>,
}

/// An optional field that, when given, must be a number (not `null`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Number>, D::Error> {
    serde_json::Number::deserialize(d).map(Some)
}

/// Inbox mode: moves a source's dead letters back to the queue with a fresh attempt budget,
/// each recorded in history as `replayed` with the reason.
#[tracing::instrument(name = "api_replay", skip(state, body))]
pub(crate) async fn replay(
    State(state): State<AppState>,
    PathParams(source): PathParams<String>,
    body: Bytes,
) -> Response {
    let response = replay_dead_letters(&state, &source, &body)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    labelled(state.label(&source).to_owned(), response)
}

async fn replay_dead_letters(
    state: &AppState,
    source: &str,
    body: &[u8],
) -> Result<Response, AppError> {
    use idemgate_core::inbox::{Inbox, ReplayFilter};
    let src = state.source(source)?;
    let req: ReplayBody = parse_json(body)?;
    let reason = req.reason.trim();
    if reason.is_empty() || req.reason.chars().count() > 1_000 {
        return Err(bad(
            Outcome::InvalidReason,
            "reason must say why, in 1 to 1000 characters",
        ));
    }
    let since = match &req.since_s {
        None => None,
        Some(n) => Some(
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 1.0 && *f <= 1e12)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    bad(
                        Outcome::InvalidReason,
                        format!("since_s must be a whole number of seconds from 1, not {n}"),
                    )
                })?,
        ),
    };
    if src.mode != crate::config::Mode::Inbox {
        return Err(AppError::NotInbox {
            source_name: src.name.as_str().to_owned(),
        });
    }
    let filter = ReplayFilter {
        source: Some(src.name.clone()),
        since,
        event_id: None,
    };
    let moved = state.store.replay_dead_letters(&filter, reason).await?;
    if moved > 0 {
        state.inbox_wakeup.notify_waiters();
    }
    tracing::info!(source = %src.name, moved, reason, "dead letters replayed");
    Ok(Outcome::Replayed.on((
        StatusCode::OK,
        Json(json!({"outcome": Outcome::Replayed, "moved": moved})),
    )
        .into_response()))
}
