//! [`IdempotencyKeyLayer`]: the `Idempotency-Key` rules around any tower service (an axum
//! router, a hyper service).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Either, Full, Limited};

use super::rules::{Admission, KeyRules, Refusal};
use super::run::answer;
use crate::dedup::Dedup;

/// The layer: each request of a keyed route is claimed under its key and run at most once; its
/// response is kept (status, the replayed headers, the body byte for byte) and given back to
/// every retry of the key with `Idempotent-Replayed: true`; copies racing the first get 409 (or
/// wait for it, [`KeyRules::wait_for_first`]); the same key on another request gets 422. Every
/// other request passes through untouched.
///
/// Once a keyed request reaches the service, it runs to its end even if the client hangs up:
/// its answer settles the key (kept, or given back), and the client's retry gets it. The service
/// must therefore be `Clone + Send + 'static`, as axum's routers are.
///
/// ```no_run
/// use std::time::Duration;
/// use idemgate::idempotency_key::{IdempotencyKeyLayer, KeyRules, Principal};
/// use idemgate::{Dedup, SourceName, StoreConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let dedup = Dedup::open(&StoreConfig::default()).await?;
/// // Clients retry for a day: keep each key for a day.
/// let rules = KeyRules::new(SourceName::new("payments-api")?, Duration::from_secs(86_400))
///     .routes(["POST /payments".parse()?, "PATCH /orders/*".parse()?])
///     .principal(Principal::Bearer);
/// // With axum: Router::new().route("/payments", post(create)).layer(layer)
/// let layer = IdempotencyKeyLayer::new(dedup, rules);
/// # drop(layer); Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct IdempotencyKeyLayer {
    dedup: Dedup,
    rules: std::sync::Arc<KeyRules>,
}

impl IdempotencyKeyLayer {
    /// Applies `rules` on `dedup`'s store.
    pub fn new(dedup: Dedup, rules: KeyRules) -> Self {
        Self {
            dedup,
            rules: std::sync::Arc::new(rules),
        }
    }
}

impl<S> tower_layer::Layer<S> for IdempotencyKeyLayer {
    type Service = IdempotencyKey<S>;

    fn layer(&self, inner: S) -> IdempotencyKey<S> {
        IdempotencyKey {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`IdempotencyKeyLayer`] wraps around `S`.
#[derive(Debug, Clone)]
pub struct IdempotencyKey<S> {
    inner: S,
    layer: IdempotencyKeyLayer,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The largest response body read to be kept; a larger one fails the request (502) and gives
/// the key back.
const RESPONSE_LIMIT: usize = 32 << 20;

impl<S, ReqB, ResB> tower_service::Service<Request<ReqB>> for IdempotencyKey<S>
where
    S: tower_service::Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send + 'static,
    ReqB: http_body::Body + From<Bytes> + Send + 'static,
    ReqB::Data: Send,
    ReqB::Error: Into<BoxError>,
    ResB: http_body::Body + Send + 'static,
    ResB::Data: Send,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<Either<ResB, Full<Bytes>>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The clone that was polled ready serves this call; the new one waits for its turn.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let keyed = match layer.rules.admit(&parts) {
                Admission::Pass => {
                    let req = Request::from_parts(parts, body);
                    return Ok(inner.call(req).await?.map(Either::Left));
                }
                Admission::Refuse(refusal) => {
                    return Ok(refusal.into_response().map(Either::Right));
                }
                Admission::Keyed(keyed) => keyed,
            };
            let limit = layer.rules.max_body();
            let bytes = match Limited::new(body, limit).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) => {
                    let refusal = if e
                        .downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some()
                    {
                        Refusal::BodyTooLarge { limit }
                    } else {
                        Refusal::BodyUnreadable
                    };
                    return Ok(refusal.into_response().map(Either::Right));
                }
            };
            let claim = match layer.rules.claim(&keyed, &parts, &bytes) {
                Ok(claim) => claim,
                Err(refusal) => return Ok(refusal.into_response().map(Either::Right)),
            };
            // Run to the end whatever the client does: the service's answer settles the key.
            let settled = tokio::spawn(async move {
                let rules = &layer.rules;
                answer(&layer.dedup, rules, claim, || async move {
                    let req = Request::from_parts(parts, ReqB::from(bytes));
                    let response = inner.call(req).await.map_err(Called::Service)?;
                    let (head, body) = response.into_parts();
                    let body = Limited::new(body, RESPONSE_LIMIT)
                        .collect()
                        .await
                        .map_err(|e| Called::Body(e.to_string()))?
                        .to_bytes();
                    Ok::<_, Called<S::Error>>(Response::from_parts(head, body))
                })
                .await
            });
            match settled.await {
                Ok(Ok((response, ending))) => {
                    tracing::debug!(ending = ending.name(), "keyed request answered");
                    Ok(response.map(Either::Right))
                }
                Ok(Err(Called::Service(e))) => Err(e),
                Ok(Err(Called::Body(detail))) => Ok(Refusal::Upstream { detail }
                    .into_response()
                    .map(Either::Right)),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => Ok(Refusal::Upstream {
                    detail: "the request was cancelled as the runtime shut down".to_owned(),
                }
                .into_response()
                .map(Either::Right)),
            }
        })
    }
}

/// How calling the service failed.
enum Called<E> {
    Service(E),
    /// Its response body could not be read (or was over [`RESPONSE_LIMIT`]).
    Body(String),
}
