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
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::AppError;
use crate::state::AppState;

pub(crate) async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let limit = state.limits.body_limit;
    if declared_length(&req).is_some_and(|n| n > limit as u64) {
        let label = hook_label(&state, &req);
        let response = closing(AppError::TooLarge { limit }.into_response());
        state.record(label, &response);
        return response;
    }
    let label = hook_label(&state, &req).to_owned();
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
        Err(_) => {
            let response = AppError::Timeout { timeout }.into_response();
            state.record(&label, &response);
            response
        }
    };
    if read.load(Ordering::Acquire) {
        response
    } else {
        closing(response)
    }
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

/// The metrics label of a webhook route's source (`unknown` for anything else); routes that
/// know their source record their own answers.
fn hook_label<'a>(state: &AppState, req: &'a Request) -> &'a str {
    match req.uri().path().strip_prefix("/hooks/") {
        Some(name) => state.label(name),
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
