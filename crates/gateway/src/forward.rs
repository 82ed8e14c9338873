//! Forward mode: the accepted delivery goes to the source's downstream over HTTP.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderValue, Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idemgate_core::Key;

pub(crate) type Client = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

pub(crate) fn client() -> Client {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    connector.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

/// How a forward failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The downstream answered with a status other than 2xx (and maybe when to come back).
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No answer: connection refused, reset, or a malformed response.
    Unreachable(String),
    /// No answer within the timeout.
    Timeout(Duration),
}

impl Failure {
    /// The downstream's status, when it answered.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The downstream's `Retry-After`, in seconds, when it sent one.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Status { status, .. } => write!(f, "the downstream answered {status}"),
            Self::Unreachable(why) => write!(f, "the downstream is unreachable: {why}"),
            Self::Timeout(t) => write!(
                f,
                "the downstream did not answer within {}",
                idemgate_core::Human(*t)
            ),
        }
    }
}

/// What the downstream receives besides the body.
pub(crate) struct Delivery<'a> {
    pub key: &'a Key,
    pub attempt: u32,
    pub content_type: Option<&'a HeaderValue>,
}

/// POSTs `body` to `url` with `Idempotency-Key: {source}:{event_id}` and `Idemgate-Attempt`, and
/// waits for a 2xx within `timeout` (the whole exchange, response body included).
pub(crate) async fn forward(
    client: &Client,
    url: &hyper::Uri,
    body: Bytes,
    delivery: Delivery<'_>,
    timeout: Duration,
) -> Result<u16, Failure> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(url.clone())
        .header("idempotency-key", delivery.key.to_string())
        .header("idemgate-attempt", delivery.attempt);
    if let Some(ct) = delivery.content_type {
        req = req.header(header::CONTENT_TYPE, ct);
    }
    let req = req
        .body(Full::new(body))
        .map_err(|e| Failure::Unreachable(e.to_string()))?;
    let exchange = async {
        let response = client
            .request(req)
            .await
            .map_err(|e| Failure::Unreachable(crate::error::ErrorChain(&e).to_string()))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        // Read the answer to the end so the connection can be reused.
        let _ = response.into_body().collect().await;
        if status.is_success() {
            Ok(status.as_u16())
        } else {
            Err(Failure::Status {
                status: status.as_u16(),
                retry_after,
            })
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(Failure::Timeout(timeout)))
}
