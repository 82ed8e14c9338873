//! The layer around every route: refuses a body announced larger than the limit as soon as the
//! headers are read, bounds each request's time, and keeps keep-alive honest.
//!
//! A request answered before its body was read to the end leaves the rest of the body on the
//! connection, and hyper then closes it. A client that was not told would send its next request
//! into a closed connection; so such answers say `Connection: close`. (The webhook route reads
//! the body before it judges anything else, so its early refusals keep the connection.)

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{self, AppError};
use crate::outcome::{Label, Outcome};
use crate::state::AppState;

pub(crate) async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let label = path_label(&state, req.uri().path()).to_owned();
    // The client (behind trusted proxies, the one they name), for the log line.
    let client = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    // What is counted and logged: deliveries and claim-API calls, and every refusal.
    let counted = ["/hooks/", "/v1/claims"]
        .iter()
        .any(|p| req.uri().path().starts_with(p));
    let response = answer(&state, req, next).await;
    let label = response
        .extensions()
        .get::<Label>()
        .map_or(label, |l| l.0.clone());
    let outcome = response
        .extensions()
        .get::<Outcome>()
        .copied()
        .unwrap_or(Outcome::Error);
    if counted || response.status().is_client_error() || response.status().is_server_error() {
        if state.sources.contains_key(&label) {
            state.record(&label, outcome, response.status(), client);
            if counted {
                state.metrics.request_latency(&label, started.elapsed());
            }
        } else {
            // No configured source: a path no route serves, or a source nobody configured.
            state.refused(outcome, response.status(), client);
        }
    }
    response
}

async fn answer(state: &AppState, req: Request, next: Next) -> Response {
    // A delivery's limit is its source's; every other route's, `limits.body_limit`.
    let limit = match req.uri().path().strip_prefix("/hooks/") {
        Some(name) => state.body_limit_of(name),
        None => state.limits.body_limit,
    };
    if declared_length(&req).is_some_and(|n| n > limit as u64) {
        // Refused at once, and the body the client is still sending read and dropped for a
        // while (as nginx lingers): closed on a client mid-write, the connection would be reset
        // and the 413 lost to a client that reads only once it has written everything.
        let (_, body) = req.into_parts();
        tokio::spawn(drain(body, limit));
        return closing(AppError::TooLarge { limit }.into_response());
    }
    let (parts, body) = req.into_parts();
    let read = Arc::new(AtomicBool::new(http_body::Body::is_end_stream(&body)));
    let req = Request::from_parts(
        parts,
        Body::new(Tracked {
            inner: body,
            read: read.clone(),
        }),
    );
    let timeout = state.limits.request_timeout;
    let response = match tokio::time::timeout(timeout, next.run(req)).await {
        Ok(response) => response,
        Err(_) => AppError::Timeout { timeout }.into_response(),
    };
    let response = if response.extensions().get::<Outcome>().is_some() {
        response
    } else {
        as_problem(response).await
    };
    if read.load(Ordering::Acquire) {
        response
    } else {
        closing(response)
    }
}

/// How long a refused body is read and dropped at most, and how much of it: the client should
/// have read its answer by then.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(5);
const DRAIN_BYTES: usize = 64 << 20;

/// Reads `body` and drops it, for at most [`DRAIN_TIME`] and [`DRAIN_BYTES`] (or twice the limit
/// when larger); then the connection closes.
async fn drain(body: Body, limit: usize) {
    use http_body_util::BodyExt;
    let most = DRAIN_BYTES.max(limit.saturating_mul(2));
    let mut body = body;
    let mut read = 0usize;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                read += data.len();
                if read >= most {
                    break;
                }
            }
        }
    })
    .await;
}

/// An answer no handler of ours wrote (the router's 405, an extractor's rejection of a malformed
/// path or an oversized body) as a problem with an `Idemgate-Outcome`, keeping its status, its
/// headers (`Allow`) and its text as the detail.
async fn as_problem(response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let text = match axum::body::to_bytes(body, 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let (kind, fallback) = match parts.status {
        StatusCode::METHOD_NOT_ALLOWED => (
            Outcome::MethodNotAllowed,
            "this route does not take that method (see Allow)",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => {
            (Outcome::BodyTooLarge, "the body is larger than the limit")
        }
        StatusCode::NOT_FOUND => (Outcome::NotFound, "no such route"),
        StatusCode::BAD_REQUEST => (Outcome::BadRequest, "the request is malformed"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            (Outcome::UnsupportedMediaType, "unsupported media type")
        }
        s if s.is_server_error() => (Outcome::InternalError, "internal error"),
        _ => (Outcome::Error, "the request failed"),
    };
    let detail = if text.is_empty() {
        fallback.to_owned()
    } else {
        text
    };
    let mut problem = error::problem(parts.status, kind, &detail);
    for name in [header::ALLOW, header::RETRY_AFTER] {
        if let Some(v) = parts.headers.get(&name) {
            problem.headers_mut().insert(name, v.clone());
        }
    }
    problem
}

/// The `Content-Length` the client announced, if it sent a valid one (hyper refuses invalid ones
/// before any route sees them).
fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The metrics label of the source a path names (`/hooks/{source}`, `/v1/claims/{source}/..`,
/// `/v1/events/{source}/..`): the configured name, or `unknown` (counted apart, as a refused
/// request). The claim route, whose source is in the body, labels its answer itself.
fn path_label<'a>(state: &AppState, path: &'a str) -> &'a str {
    let rest = ["/hooks/", "/v1/claims/", "/v1/events/"]
        .iter()
        .find_map(|prefix| path.strip_prefix(prefix));
    match rest {
        Some(rest) => state.label(rest.split('/').next().unwrap_or_default()),
        None => "unknown",
    }
}

fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body that notes when it has been read to the end.
struct Tracked {
    inner: Body,
    read: Arc<AtomicBool>,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
