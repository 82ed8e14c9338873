//! [`IdempotencyLayer`]: exactly-once around any tower service (an axum router, a hyper
//! service): duplicates are answered without calling it. A 2xx answer completes the claim;
//! anything else (a 404 from an unrouted path, a 400, a 429, a 5xx) or an error releases it, so
//! the sender's retry is processed: the same rule as the gateway's forward mode. Which statuses
//! complete is [`IdempotencyLayer::complete_on`]'s to change.
//!
//! What it answers without calling the service:
//!
//! | the claim | status | `Idemgate-Outcome` |
//! |---|---|---|
//! | a duplicate (processed within its TTL) | 200 | `duplicate` |
//! | a late duplicate under [`LateDuplicates::Reject`](crate::LateDuplicates::Reject) | 200 | `late_duplicate` |
//! | in flight (another delivery holds a live lease) | 409, `Retry-After` | `in_flight` |
//! | a conflict (the id is live with another payload) | 200, or 409 with [`OnConflict::Reject`] | `conflict` |
//! | the store unavailable | 503, `Retry-After: 1` | `store_unavailable` |
//! | refused by the key function (a bad signature, no event id) | its status (401, 400) | its kind |
//!
//! The same answers as the gateway's for a source with the same settings, `on_conflict`'s
//! default included ([`OnConflict`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use idemgate::{Dedup, IdempotencyLayer, Scheme, Secret, SourceName, StoreConfig, Verifier};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let dedup = Dedup::open(&StoreConfig::default()).await?;
//! let verifier = Verifier::new(
//!     Scheme::Stripe,
//!     vec![Secret::from("whsec_...")],
//!     Verifier::DEFAULT_TOLERANCE,
//! )?;
//! // Stripe retries for 3 days; its preset adds queue lag, clock skew and a replay margin.
//! let ttl = idemgate::preset("stripe")
//!     .and_then(|p| p.contract)
//!     .map(|c| c.ttl())
//!     .unwrap_or(Duration::from_secs(7 * 86_400));
//! let stripe = idemgate::layer::verified(SourceName::new("stripe-live")?, verifier, ttl);
//! // With axum: Router::new().route("/webhooks/stripe", post(handler)).layer(layer)
//! let layer = IdempotencyLayer::new(dedup, stripe);
//! # drop(layer); Ok(()) }
//! ```
//!
//! The handler finds its [`Claimed`] (the attempt number, a late duplicate) in the request's
//! extensions.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Either, Full, Limited};
use idemgate_core::{ClaimRequest, Fingerprint, Key, SourceName};
use idemgate_providers::Verifier;
use sha2::{Digest, Sha256};

use crate::answer::{OnConflict, Seen, problem_body, with_body};
use crate::dedup::{Claimed, Dedup, ProcessError};

/// A response of the layer's own (a duplicate, a refusal), as problem+json or JSON.
pub type Own = Full<Bytes>;

/// Decides, from a request's head and body, which claim it is, or refuses it at once (a bad
/// signature, no event id).
pub type KeyFn =
    dyn Fn(&http::request::Parts, &Bytes) -> Result<ClaimRequest, Refusal> + Send + Sync;

/// A request the key function refuses: answered as a problem+json of `status` and `kind`, without
/// a claim and without calling the service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The answer's status (400, 401, ...).
    pub status: StatusCode,
    /// The stable problem type and `Idemgate-Outcome` (`bad_signature`, `missing_event_id`).
    pub kind: &'static str,
    /// What was wrong, for a person.
    pub detail: String,
}

impl Refusal {
    /// A refusal of `status`, problem type `kind`, saying `detail`.
    pub fn new(status: StatusCode, kind: &'static str, detail: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            detail: detail.into(),
        }
    }
}

/// The layer. See the [module docs](self).
#[derive(Clone)]
pub struct IdempotencyLayer {
    dedup: Dedup,
    key: Arc<KeyFn>,
    body_limit: usize,
    completes: Arc<dyn Fn(StatusCode) -> bool + Send + Sync>,
    on_conflict: OnConflict,
}

impl std::fmt::Debug for IdempotencyLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("dedup", &self.dedup)
            .field("body_limit", &self.body_limit)
            .field("on_conflict", &self.on_conflict)
            .finish_non_exhaustive()
    }
}

impl IdempotencyLayer {
    /// Claims each request as `key` says, on `dedup`. Bodies are read whole (up to 1 MiB by
    /// default, [`IdempotencyLayer::body_limit`]) before the claim.
    pub fn new(
        dedup: Dedup,
        key: impl Fn(&http::request::Parts, &Bytes) -> Result<ClaimRequest, Refusal>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self {
            dedup,
            key: Arc::new(key),
            body_limit: 1 << 20,
            completes: Arc::new(|status: StatusCode| status.is_success()),
            on_conflict: OnConflict::default(),
        }
    }

    /// What a delivery whose event id is live with another payload is answered: 200 (the
    /// default, as the gateway's) or 409. See [`OnConflict`].
    #[must_use]
    pub fn on_conflict(mut self, policy: OnConflict) -> Self {
        self.on_conflict = policy;
        self
    }

    /// Which of the service's answers complete the claim; every other answer releases it, so the
    /// sender's retry runs the service again. By default only a 2xx completes: a 404 from a path
    /// the service does not route, a 400 or a 429 is no proof the event was processed, and
    /// completing on it would answer every retry as a duplicate while the event was never
    /// handled. A service that answers a 4xx on purpose to stop retries of an event it refuses
    /// for good (a 422 for a payload it will never accept) may complete on that too:
    /// `.complete_on(|s| s.is_success() || s == StatusCode::UNPROCESSABLE_ENTITY)`.
    #[must_use]
    pub fn complete_on(
        mut self,
        completes: impl Fn(StatusCode) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.completes = Arc::new(completes);
        self
    }

    /// The largest body read; a larger one is answered 413.
    #[must_use]
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }
}

impl<S> tower_layer::Layer<S> for IdempotencyLayer {
    type Service = Idempotent<S>;

    fn layer(&self, inner: S) -> Idempotent<S> {
        Idempotent {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`IdempotencyLayer`] wraps around `S`.
#[derive(Debug, Clone)]
pub struct Idempotent<S> {
    inner: S,
    layer: IdempotencyLayer,
}

/// How the inner service's answer failed.
enum Failed<R, E> {
    /// It answered a status that does not complete (by default, anything but 2xx): passed on to
    /// the sender, the claim released.
    Status(R),
    /// It failed outright: passed on as the error, the claim released.
    Service(E),
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, ReqB, ResB> tower_service::Service<Request<ReqB>> for Idempotent<S>
where
    S: tower_service::Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Send,
    ReqB: http_body::Body + From<Bytes> + Send + 'static,
    ReqB::Data: Send,
    ReqB::Error: Into<BoxError>,
    ResB: Send + 'static,
{
    type Response = Response<Either<ResB, Own>>;
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
            let bytes = match Limited::new(body, layer.body_limit).collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) => {
                    let too_large = e
                        .downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some();
                    return Ok(if too_large {
                        problem(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "body_too_large",
                            "the body is larger than the limit",
                        )
                    } else {
                        problem(
                            StatusCode::BAD_REQUEST,
                            "body_unreadable",
                            "the body could not be read",
                        )
                    }
                    .map(Either::Right));
                }
            };
            let claim = match (layer.key)(&parts, &bytes) {
                Ok(claim) => claim,
                Err(no) => return Ok(problem(no.status, no.kind, &no.detail).map(Either::Right)),
            };
            let completes = layer.completes.clone();
            let once = layer
                .dedup
                .process_once(claim, |claimed: Claimed| async move {
                    let mut req = Request::from_parts(parts, ReqB::from(bytes));
                    req.extensions_mut().insert(claimed);
                    match inner.call(req).await {
                        Ok(response) if !completes(response.status()) => {
                            Err(Failed::Status(response))
                        }
                        Ok(response) => Ok(response),
                        Err(e) => Err(Failed::Service(e)),
                    }
                })
                .await;
            Ok(match once {
                Ok(once) => match Seen::of_once(once) {
                    Ok(response) => response.map(Either::Left),
                    Err(seen) => seen
                        .reply(layer.on_conflict)
                        .into_response()
                        .map(Either::Right),
                },
                Err(ProcessError::Failed(Failed::Status(response))) => response.map(Either::Left),
                Err(ProcessError::Failed(Failed::Service(e))) => return Err(e),
                Err(ProcessError::Store(e)) => {
                    tracing::error!(error = %crate::ErrorChain(&e), "the claim could not be made");
                    let mut r = problem(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "store_unavailable",
                        "the store is unavailable",
                    );
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                    r.map(Either::Right)
                }
            })
        })
    }
}

/// A problem+json answer (RFC 9457) with `Idemgate-Outcome: kind`.
pub fn problem(status: StatusCode, kind: &'static str, detail: &str) -> Response<Own> {
    with_body(
        status,
        kind,
        "application/problem+json",
        problem_body(status, kind, detail),
    )
}

/// The key function of a webhook source: verifies the delivery's signature with `verifier`
/// (any of the provider schemes, with its secrets and tolerance), takes the event id where the
/// scheme carries it, and claims `source:id` under `ttl` (the lease: a minute, or the TTL if
/// shorter, as the gateway's default), with the body's SHA-256 as the fingerprint. Take `ttl`
/// from the sender's preset ([`crate::preset`]`("stripe")`, its contract's
/// [`ttl`](crate::DeliveryContract::ttl)), as the gateway does for a source of that provider. A bad signature is 401, a missing or bad
/// event id 400, each as a problem. Schemes that need a fetched document (Pub/Sub with a JWKS
/// URL, SNS) are refused 503 (`document_unavailable`: give Pub/Sub a JWKS document instead), and
/// SendGrid's batches and SNS's handshakes 501: this layer fetches nothing and claims one event
/// per request.
pub fn verified(
    source: SourceName,
    verifier: Verifier,
    ttl: Duration,
) -> impl Fn(&http::request::Parts, &Bytes) -> Result<ClaimRequest, Refusal> + Send + Sync + 'static
{
    let lease = Duration::from_secs(60).min(ttl);
    move |parts, body| {
        let delivery =
            idemgate_providers::Delivery::new(&parts.headers, body).with_query(parts.uri.query());
        let verified = verifier
            .verify_delivery(&delivery, SystemTime::now())
            .map_err(|e| {
                let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
                Refusal::new(status, e.kind(), crate::ErrorChain(&e).to_string())
            })?;
        // One claim per request: a batch (SendGrid) or a handshake (SNS) needs the gateway,
        // which claims each event on its own and answers handshakes.
        if verified.batch.is_some() || verified.control.is_some() {
            return Err(Refusal::new(
                StatusCode::NOT_IMPLEMENTED,
                "unsupported_delivery",
                "a batch of events or a subscription handshake: this layer claims one event per request; run the idemgate gateway for this source",
            ));
        }
        let key = Key::new(source.clone(), verified.event_id);
        Ok(
            ClaimRequest::new(key, lease, ttl)
                .fingerprint(Fingerprint(Sha256::digest(body).into())),
        )
    }
}
