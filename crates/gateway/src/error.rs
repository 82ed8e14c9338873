//! Every error the gateway answers, mapped to HTTP in one place.
//!
//! Bodies are RFC 9457 problem details (`application/problem+json`) with a stable `type` per case;
//! every answer carries `Idemgate-Outcome`. Internal details (store errors) are logged, not
//! returned.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemgate_core::StoreError;
use serde::Serialize;

pub use crate::outcome::HEADER as OUTCOME;
use crate::outcome::Outcome;

/// An RFC 9457 problem body. `type` is `urn:idemgate:problem:{outcome}`.
#[derive(Debug, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    /// `in_flight`: seconds until the lease ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_s: Option<u64>,
    /// `conflict`: the first receipt of the other payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_seen: Option<String>,
    /// `/healthz` when the store is down: each component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub components: Option<serde_json::Value>,
}

impl Problem {
    /// A problem of `status`, typed by `outcome`, saying `detail`.
    pub fn new(status: StatusCode, outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("urn:idemgate:problem:{outcome}"),
            title: status.canonical_reason().unwrap_or("error"),
            status: status.as_u16(),
            detail: detail.into(),
            retry_after_s: None,
            first_seen: None,
            components: None,
        }
    }

    /// The answer: the body as `application/problem+json`, and the outcome.
    pub fn into_response_with(self, outcome: Outcome) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        outcome.on(response)
    }
}

/// A request that did not end in success.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("no source named {name:?} is configured")]
    UnknownSource { name: String },
    #[error("the body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the body could not be read")]
    BodyRead,
    #[error("{detail}")]
    Signature { kind: Outcome, detail: String },
    #[error("{detail}")]
    BadRequest { kind: Outcome, detail: String },
    /// An authenticated sender the source does not accept (an SNS topic outside `topic_arns`).
    #[error("{detail}")]
    Forbidden { kind: Outcome, detail: String },
    /// The bodies being read already hold `limits.body_budget` bytes.
    #[error(
        "the gateway is reading as many request bodies as limits.body_budget allows ({budget} bytes); retry shortly"
    )]
    BodyBudget { budget: usize },
    /// The signature check needs a document the verifier was not given (503) or cannot use (502).
    #[error("{detail}")]
    Document {
        status: u16,
        kind: Outcome,
        detail: String,
    },
    /// A document the signature check needs (a JWKS, an SNS certificate) cannot be fetched.
    #[error("a document the signature check needs cannot be fetched: {why}")]
    DocumentUnavailable { why: String },
    /// An SNS subscription could not be confirmed (`sns_subscription = "confirm"`).
    #[error("the SNS subscription could not be confirmed: {why}")]
    ConfirmFailed { why: String },
    /// A source authenticated by basic auth (Postmark) refused the credentials: 401 with
    /// `WWW-Authenticate: Basic`.
    #[error("{detail}")]
    Credentials {
        kind: Outcome,
        detail: String,
        source_name: String,
    },
    /// The connection's peer is outside the source's `allow_from`.
    #[error("{}", match peer {
        Some(ip) => format!("deliveries to source {source_name} are not accepted from {ip} (allow_from)"),
        None => format!("source {source_name} accepts deliveries only from allow_from, and this connection's address is not known"),
    })]
    ForbiddenPeer {
        source_name: String,
        peer: Option<std::net::IpAddr>,
    },
    #[error("a valid bearer token is required")]
    Unauthorized,
    /// A valid token without the scope the route needs.
    #[error("the bearer token is not for this: it lacks the scope {}", scope.as_str())]
    Scope { scope: crate::config::Scope },
    /// In flight, or a conflict the source rejects: answered as [`idemgate::answer`] says, as
    /// the tower layer answers it.
    #[error("{}", .0.problem.as_deref().unwrap_or("refused"))]
    Refused(idemgate::answer::Reply),
    #[error("the claim token is stale: the claim was taken over, released or expired")]
    StaleToken,
    #[error(
        "the claim was completed: a completed claim cannot be released (the event was processed; releasing it would have the next delivery processed again)"
    )]
    CompletedClaim,
    #[error("the downstream answered {status}")]
    ForwardFailed { status: u16 },
    /// `why` in words (a TLS failure included: an untrusted certificate, one for another name),
    /// without the downstream's address.
    #[error("the downstream could not be reached: {why}")]
    ForwardUnreachable { why: String },
    #[error("the downstream did not answer within {} s", timeout.as_secs_f64())]
    ForwardTimeout { timeout: Duration },
    /// A broker destination (JetStream, RabbitMQ) did not take the event: down, refusing it, or
    /// slower than `forward_timeout`. The sender is asked to come back, as for a store outage.
    #[error("the destination broker did not take the event: {why}")]
    DestinationUnavailable { why: String },
    #[error("the store is unavailable")]
    Store(#[source] StoreError),
    #[error("the gateway is shutting down")]
    ShuttingDown,
    #[error("the request did not arrive and get its answer within {} s (limits.request_timeout)", timeout.as_secs_f64())]
    Timeout { timeout: Duration },
    #[error("source {source_name} is not in inbox mode: it keeps no queue to replay")]
    NotInbox { source_name: String },
    /// A fault of the gateway's own (logged where it happened); `what` says which, in words.
    #[error("internal error: {what}")]
    Internal { what: &'static str },
}

impl AppError {
    /// The status, and the outcome: the problem's `type` and the `Idemgate-Outcome`.
    pub fn status_and_outcome(&self) -> (StatusCode, Outcome) {
        match self {
            Self::UnknownSource { .. } => (StatusCode::NOT_FOUND, Outcome::UnknownSource),
            Self::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, Outcome::BodyTooLarge),
            Self::BodyRead => (StatusCode::BAD_REQUEST, Outcome::BodyUnreadable),
            Self::Signature { kind, .. } => (StatusCode::UNAUTHORIZED, *kind),
            Self::BadRequest { kind, .. } => (StatusCode::BAD_REQUEST, *kind),
            Self::Forbidden { kind, .. } => (StatusCode::FORBIDDEN, *kind),
            Self::BodyBudget { .. } => (StatusCode::SERVICE_UNAVAILABLE, Outcome::BodyBudget),
            Self::Document { status, kind, .. } => (
                StatusCode::from_u16(*status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                *kind,
            ),
            Self::DocumentUnavailable { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                Outcome::DocumentUnavailable,
            ),
            Self::ConfirmFailed { .. } => (StatusCode::BAD_GATEWAY, Outcome::ConfirmFailed),
            Self::Credentials { kind, .. } => (StatusCode::UNAUTHORIZED, *kind),
            Self::ForbiddenPeer { .. } => (StatusCode::FORBIDDEN, Outcome::ForbiddenPeer),
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, Outcome::Unauthorized),
            Self::Scope { .. } => (StatusCode::FORBIDDEN, Outcome::InsufficientScope),
            Self::Refused(reply) => (reply.status, reply.seen.into()),
            Self::StaleToken => (StatusCode::CONFLICT, Outcome::StaleToken),
            Self::CompletedClaim => (StatusCode::CONFLICT, Outcome::CompletedClaim),
            Self::ForwardFailed { .. } => (StatusCode::BAD_GATEWAY, Outcome::ForwardFailed),
            Self::ForwardUnreachable { .. } => {
                (StatusCode::BAD_GATEWAY, Outcome::ForwardUnreachable)
            }
            Self::ForwardTimeout { .. } => {
                (StatusCode::SERVICE_UNAVAILABLE, Outcome::ForwardTimeout)
            }
            Self::DestinationUnavailable { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                Outcome::DestinationUnavailable,
            ),
            Self::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, Outcome::StoreUnavailable),
            Self::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, Outcome::ShuttingDown),
            Self::Timeout { .. } => (StatusCode::REQUEST_TIMEOUT, Outcome::RequestTimeout),
            Self::NotInbox { .. } => (StatusCode::CONFLICT, Outcome::NotInbox),
            Self::Internal { .. } => (StatusCode::INTERNAL_SERVER_ERROR, Outcome::InternalError),
        }
    }

    /// The outcome of this error.
    pub fn outcome(&self) -> Outcome {
        self.status_and_outcome().1
    }
}

impl AppError {
    /// `seen` refused as [`idemgate::answer`] says, a conflict always rejected (the claim API's
    /// answer to a conflict, and `on_conflict = "reject"`'s).
    pub(crate) fn refused(seen: idemgate::answer::Seen) -> Self {
        Self::Refused(seen.reply(idemgate::OnConflict::Reject))
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::StaleToken { .. } => Self::StaleToken,
            StoreError::Completed { .. } => Self::CompletedClaim,
            e => Self::Store(e),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, outcome) = self.status_and_outcome();
        if let Self::Store(e) = &self {
            tracing::error!(error = %ErrorChain(e), "store error");
        }
        let mut problem = Problem::new(status, outcome, self.to_string());
        if let Self::Refused(reply) = &self {
            problem.retry_after_s = reply.retry_after_s;
            problem.first_seen = reply.seen.first_seen().map(|t| t.to_string());
        }
        let mut response = problem.into_response_with(outcome);
        // When to come back: the lease's end for an event in flight; a second for a store that
        // is failing or a gateway that is stopping (another instance, or this one restarted).
        let retry_after = match &self {
            Self::Refused(reply) => reply.retry_after_s,
            Self::Store(_)
            | Self::ShuttingDown
            | Self::BodyBudget { .. }
            | Self::DestinationUnavailable { .. } => Some(1),
            _ => None,
        };
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        // A 401 names the scheme it wants (RFC 9110): the API's bearer token.
        if let Self::Unauthorized = self {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"idemgate\""),
            );
        }
        // A basic auth source names its realm, so that a sender is asked for its credentials.
        if let Self::Credentials { source_name, .. } = &self
            && let Ok(value) =
                HeaderValue::from_str(&format!("Basic realm=\"idemgate {source_name}\""))
        {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// A problem+json answer of `status`, typed by `outcome`.
pub(crate) fn problem(status: StatusCode, outcome: Outcome, detail: &str) -> Response {
    Problem::new(status, outcome, detail).into_response_with(outcome)
}

pub use idemgate::ErrorChain;
