//! Every error the gateway answers, mapped to HTTP in one place.
//!
//! Bodies are RFC 9457 problem details (`application/problem+json`) with a stable `type` per case;
//! every answer carries `Idemgate-Outcome`. Internal details (store errors) are logged, not
//! returned.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemgate_core::{StoreError, Timestamp};
use serde_json::json;

/// The header naming what idemgate did with a request.
pub const OUTCOME: &str = "idemgate-outcome";

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
    Signature { kind: &'static str, detail: String },
    #[error("{detail}")]
    BadRequest { kind: &'static str, detail: String },
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("another delivery of this event is being processed; retry after {} s", retry_after.as_secs().max(1))]
    InFlight { retry_after: Duration },
    #[error("this event id was first received at {first_seen} with a different payload")]
    Conflict { first_seen: Timestamp },
    #[error("the claim token is stale: the claim was taken over, released or expired")]
    StaleToken,
    #[error("the downstream answered {status}")]
    ForwardFailed { status: u16 },
    #[error("the downstream could not be reached")]
    ForwardUnreachable,
    #[error("the downstream did not answer within {} s", timeout.as_secs_f64())]
    ForwardTimeout { timeout: Duration },
    #[error("the store is unavailable")]
    Store(#[source] StoreError),
    #[error("the gateway is shutting down")]
    ShuttingDown,
    #[error("the request did not arrive and get its answer within {} s (limits.request_timeout)", timeout.as_secs_f64())]
    Timeout { timeout: Duration },
}

impl AppError {
    /// The status, and the stable slug used as the problem `type` and the `Idemgate-Outcome`.
    pub fn status_and_kind(&self) -> (StatusCode, &'static str) {
        match self {
            Self::UnknownSource { .. } => (StatusCode::NOT_FOUND, "unknown-source"),
            Self::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "body-too-large"),
            Self::BodyRead => (StatusCode::BAD_REQUEST, "body-unreadable"),
            Self::Signature { kind, .. } => (StatusCode::UNAUTHORIZED, kind),
            Self::BadRequest { kind, .. } => (StatusCode::BAD_REQUEST, kind),
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Self::InFlight { .. } => (StatusCode::CONFLICT, "in-flight"),
            Self::Conflict { .. } => (StatusCode::CONFLICT, "conflict"),
            Self::StaleToken => (StatusCode::CONFLICT, "stale-token"),
            Self::ForwardFailed { .. } => (StatusCode::BAD_GATEWAY, "forward-failed"),
            Self::ForwardUnreachable => (StatusCode::BAD_GATEWAY, "forward-unreachable"),
            Self::ForwardTimeout { .. } => (StatusCode::SERVICE_UNAVAILABLE, "forward-timeout"),
            Self::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "store-unavailable"),
            Self::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting-down"),
            Self::Timeout { .. } => (StatusCode::REQUEST_TIMEOUT, "request-timeout"),
        }
    }

    /// The `Idemgate-Outcome` value (and metrics label) of this error.
    pub fn kind(&self) -> &'static str {
        self.status_and_kind().1
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::StaleToken { .. } => Self::StaleToken,
            e => Self::Store(e),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, kind) = self.status_and_kind();
        if let Self::Store(e) = &self {
            tracing::error!(error = %ErrorChain(e), "store error");
        }
        let mut body = json!({
            "type": format!("urn:idemgate:problem:{kind}"),
            "title": status.canonical_reason().unwrap_or("error"),
            "status": status.as_u16(),
            "detail": self.to_string(),
        });
        match &self {
            Self::InFlight { retry_after } => {
                body["retry_after_s"] = json!(retry_after.as_secs().max(1))
            }
            Self::Conflict { first_seen } => body["first_seen"] = json!(first_seen.to_string()),
            _ => {}
        }
        let mut response = (status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        headers.insert(OUTCOME, HeaderValue::from_static(kind));
        // When to come back: the lease's end for an event in flight; a second for a store that
        // is failing or a gateway that is stopping (another instance, or this one restarted).
        let retry_after = match &self {
            Self::InFlight { retry_after } => Some(retry_after.as_secs().max(1)),
            Self::Store(_) | Self::ShuttingDown => Some(1),
            _ => None,
        };
        if let Some(secs) = retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// A problem+json answer of `status` with the stable `kind` as its type and outcome.
pub(crate) fn problem(status: StatusCode, kind: &'static str, detail: &str) -> Response {
    problem_with(status, kind, detail, |_| {})
}

/// As [`problem`], with members of its own added to the body by `extend`.
pub(crate) fn problem_with(
    status: StatusCode,
    kind: &'static str,
    detail: &str,
    extend: impl FnOnce(&mut serde_json::Value),
) -> Response {
    let mut body = json!({
        "type": format!("urn:idemgate:problem:{kind}"),
        "title": status.canonical_reason().unwrap_or("error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    extend(&mut body);
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(OUTCOME, HeaderValue::from_static(kind));
    response
}

pub use idemgate::ErrorChain;
