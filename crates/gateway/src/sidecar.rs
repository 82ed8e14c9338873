//! `[[api]]`: the sidecar in front of an HTTP API of the user's own. Each API has its own
//! listener; every request to it is proxied to the upstream. A request of a keyed route runs the
//! `Idempotency-Key` rules ([`idemgate::idempotency_key::run::answer`]): claimed under its key,
//! sent upstream once, its response kept with the completion and given back to every retry. Any
//! other request streams through untouched.
//!
//! A keyed request, once claimed, runs on a task of its own ([`AppState`]'s forwards, which
//! shutdown waits for): the upstream's answer settles the key even if the client hung up, and
//! the client's retry meanwhile hears 409, then the kept response.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{self, HeaderMap, HeaderName, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};
use idemgate::idempotency_key::run::{Ending, answer};
use idemgate::idempotency_key::{Admission, Refusal};

use crate::state::AppState;
use crate::upstream::Api;

/// The largest upstream response body read to be kept; a larger one is a failed call (502, the
/// key given back).
const RESPONSE_LIMIT: usize = 32 << 20;

/// What a sidecar's handler holds.
#[derive(Clone)]
pub(crate) struct Sidecar {
    api: Arc<Api>,
    state: AppState,
}

/// The router of one API's listener: everything goes to [`proxy`].
pub(crate) fn router(state: AppState, api: Arc<Api>) -> axum::Router {
    axum::Router::new()
        .fallback(proxy)
        .with_state(Sidecar { api, state })
}

async fn proxy(State(s): State<Sidecar>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let rules = &s.api.rules;
    let keyed = match rules.admit(&parts) {
        Admission::Pass => return pass(&s.api, parts, body).await,
        Admission::Refuse(refusal) => {
            s.state
                .metrics
                .delivery(rules.source().as_str(), refusal.kind());
            return refusal.into_response().into_response();
        }
        Admission::Keyed(keyed) => keyed,
    };
    let limit = rules.max_body();
    let bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return Refusal::BodyTooLarge { limit }
                .into_response()
                .into_response();
        }
        // The client went away while sending: nothing was claimed.
        Err(_) => return Refusal::BodyUnreadable.into_response().into_response(),
    };
    let claim = match rules.claim(&keyed, &parts, &bytes) {
        Ok(claim) => claim,
        Err(refusal) => return refusal.into_response().into_response(),
    };
    // The keyed request runs on a task of its own: the upstream's answer settles the key even if
    // this request is dropped (the client hung up).
    let task = {
        let (api, state) = (Arc::clone(&s.api), s.state.clone());
        s.state.forwards.spawn(async move {
            let rules = Arc::clone(&api.rules);
            let sent = answer(&state.dedup, &rules, claim, || call(&api, parts, bytes)).await;
            let (response, ending) = match sent {
                Ok(answered) => answered,
                Err(detail) => {
                    tracing::warn!(api = %rules.source(), %detail, "the upstream did not answer a keyed request; its key was given back");
                    let refusal = Refusal::Upstream { detail };
                    let kind = refusal.kind();
                    (refusal.into_response(), Ending::Refused(kind))
                }
            };
            state.metrics.delivery(rules.source().as_str(), ending.name());
            response
        })
    };
    match task.await {
        Ok(response) => response.into_response(),
        Err(e) => {
            tracing::error!(error = %e, "a keyed request's task failed");
            http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// Sends a keyed request upstream and reads its whole answer.
async fn call(
    api: &Api,
    parts: http::request::Parts,
    body: Bytes,
) -> Result<http::Response<Bytes>, String> {
    let req = upstream_request(api, &parts, Body::from(body))?;
    let response = tokio::time::timeout(api.timeout, async {
        let response = api
            .client
            .request(req)
            .await
            .map_err(|e| crate::forward::why(&e, api.https()))?;
        let (mut head, body) = response.into_parts();
        let body = Limited::new(body, RESPONSE_LIMIT)
            .collect()
            .await
            .map_err(|e| format!("reading its answer: {e}"))?
            .to_bytes();
        strip_hop_by_hop(&mut head.headers);
        Ok::<_, String>(http::Response::from_parts(head, body))
    })
    .await
    .map_err(|_| {
        format!(
            "no answer within upstream_timeout ({})",
            idemgate_core::Human(api.timeout)
        )
    })??;
    Ok(response)
}

/// Streams a request that is not keyed to the upstream, and its answer back.
async fn pass(api: &Api, parts: http::request::Parts, body: Body) -> Response {
    let req = match upstream_request(api, &parts, body) {
        Ok(req) => req,
        Err(detail) => return bad_gateway(&detail),
    };
    match tokio::time::timeout(api.timeout, api.client.request(req)).await {
        Ok(Ok(response)) => {
            let (mut head, body) = response.into_parts();
            strip_hop_by_hop(&mut head.headers);
            Response::from_parts(head, Body::new(body))
        }
        Ok(Err(e)) => bad_gateway(&crate::forward::why(&e, api.https())),
        Err(_) => bad_gateway("no answer within upstream_timeout"),
    }
}

fn bad_gateway(detail: &str) -> Response {
    let body = serde_json::json!({
        "type": "urn:idemgate:problem:upstream_unavailable",
        "title": "Bad Gateway",
        "status": 502,
        "detail": format!("the upstream did not answer: {detail}"),
    });
    (
        http::StatusCode::BAD_GATEWAY,
        [(header::CONTENT_TYPE, "application/problem+json")],
        body.to_string(),
    )
        .into_response()
}

/// The request to send upstream: the client's method, path, query, headers (without hop-by-hop
/// ones and `Host`, which the client sets for the upstream) and body.
fn upstream_request(
    api: &Api,
    parts: &http::request::Parts,
    body: Body,
) -> Result<http::Request<Body>, String> {
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    let uri = api.target(path).map_err(|e| e.to_string())?;
    let mut req = http::Request::new(body);
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = uri;
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers);
    headers.remove(header::HOST);
    *req.headers_mut() = headers;
    Ok(req)
}

/// Removes the headers that belong to one connection (RFC 9110 section 7.6.1), and those its
/// `Connection` header names.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::try_from(n.trim()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}
