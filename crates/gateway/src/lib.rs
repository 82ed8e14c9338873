//! The idemgate gateway, as a library: [`app`] builds the router, [`run`] serves it until a
//! shutdown signal.
//!
//! # Layout
//!
//! - [`config`]: the TOML configuration, validated once at load.
//! - [`store`]: [`AnyStore`], the engine chosen at start (SQLite by default, PostgreSQL behind
//!   the `postgres` feature, in-memory for tests).
//! - `ingest`: `POST /hooks/{source}`: body limit, signature, event id, fingerprint, claim, then
//!   forward (or acknowledge) and complete, or release so the sender retries.
//! - [`api`]: the claim API for workers (`/v1/claims`, `/v1/events`), described by
//!   `/openapi.json`.
//! - `admin`: `/healthz` (a real round trip to the store) and `/metrics` (Prometheus).
//! - [`error`]: every failure mapped to HTTP in one place, as problem+json.
//! - [`metrics`]: the counters and the claim latency histogram.

pub mod api;
pub mod config;
pub mod error;
pub mod metrics;
pub mod store;

mod admin;
mod forward;
mod ingest;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use idemgate_core::store::ClaimStore;
use idemgate_core::{ClaimMode, ClaimOutcome, ClaimRequest, Key, LateDuplicates, SourceName};
use idemgate_providers::Verifier;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::timeout::TimeoutLayer;

pub use crate::config::Config;
use crate::config::{Limits, OnConflict, SourceConfig, SourcePolicy};
use crate::error::AppError;
pub use crate::ingest::verifier;
use crate::metrics::{Metrics, RowCounts};
pub use crate::store::AnyStore;

/// A configured source, ready to serve.
#[derive(Debug)]
pub struct Source {
    pub name: SourceName,
    pub policy: SourcePolicy,
    pub verifier: Verifier,
    /// Where deliveries go; `None` acknowledges a delivery once claimed.
    pub forward_url: Option<hyper::Uri>,
    pub forward_timeout: Duration,
    pub mode: ClaimMode,
    pub on_conflict: OnConflict,
    pub late_duplicates: LateDuplicates,
}

impl Source {
    /// `provider = "none"`: the sender proves itself with a bearer token instead of a signature.
    pub fn needs_bearer(&self) -> bool {
        !self.verifier.scheme().is_signed()
    }

    /// A claim of `key` under this source's TTL, lease and mode.
    pub fn claim_request(&self, key: Key) -> ClaimRequest {
        ClaimRequest::new(key, self.policy.lease, self.policy.ttl.ttl)
            .mode(self.mode)
            .late_duplicates(self.late_duplicates)
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Store(#[from] store::OpenError),
    #[error("cannot serve on the listener")]
    Serve(#[source] std::io::Error),
}

/// What every handler shares. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub sources: HashMap<String, Source>,
    pub store: AnyStore,
    pub metrics: Metrics,
    api_tokens: Vec<String>,
    limits: Limits,
    client: forward::Client,
    /// Releases of claims whose request was dropped; awaited at shutdown.
    releases: TaskTracker,
    /// Row counts for `/metrics`, refreshed at most every few seconds (they cost a scan).
    rows: Mutex<Option<(Instant, RowCounts)>>,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    /// Builds the state from a validated config and an open store.
    ///
    /// # Errors
    /// A [`config::ConfigError`] naming the source whose verifier cannot be built.
    pub fn new(config: &Config, store: AnyStore) -> Result<Self, config::ConfigError> {
        let mut sources = HashMap::new();
        for (i, sc) in config.sources.iter().enumerate() {
            let source = build_source(i, sc)?;
            if source.needs_bearer() && config.api_tokens.is_empty() {
                return Err(sc.invalid(
                    "provider",
                    "\"none\" needs api_tokens: its senders authenticate with a bearer token",
                ));
            }
            sources.insert(sc.name.clone(), source);
        }
        Ok(Self(Arc::new(Inner {
            sources,
            store,
            metrics: Metrics::default(),
            api_tokens: config.api_tokens.clone(),
            limits: config.limits.clone(),
            client: forward::client(),
            releases: TaskTracker::new(),
            rows: Mutex::default(),
        })))
    }

    /// The configured source named `name`.
    ///
    /// # Errors
    /// [`AppError::UnknownSource`].
    pub fn source(&self, name: &str) -> Result<&Source, AppError> {
        self.sources
            .get(name)
            .ok_or_else(|| AppError::UnknownSource {
                name: name.chars().take(64).collect(),
            })
    }

    /// The metrics label for a source name: the name if configured, else `unknown` (one label,
    /// however many names are tried).
    pub(crate) fn label<'a>(&self, name: &'a str) -> &'a str {
        if self.sources.contains_key(name) {
            name
        } else {
            "unknown"
        }
    }

    /// Checks `Authorization: Bearer <token>` against the configured tokens, in constant time.
    ///
    /// # Errors
    /// [`AppError::Unauthorized`].
    pub fn authorize(&self, headers: &HeaderMap) -> Result<(), AppError> {
        let presented = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(AppError::Unauthorized)?;
        let mut ok = false;
        for token in &self.api_tokens {
            ok |= constant_time_eq(token.as_bytes(), presented.as_bytes());
        }
        if ok {
            Ok(())
        } else {
            Err(AppError::Unauthorized)
        }
    }

    /// Claims through the store, timing it and counting the outcome: the one place a claim's
    /// outcome is logged and counted.
    ///
    /// # Errors
    /// The store's error, as [`AppError::Store`].
    pub async fn claim(
        &self,
        source: &Source,
        req: ClaimRequest,
    ) -> Result<ClaimOutcome, AppError> {
        let started = Instant::now();
        let result = self.store.claim(req).await;
        self.metrics.claim_latency(started.elapsed());
        let outcome = result?;
        let late = match &outcome {
            ClaimOutcome::Claimed {
                late_duplicate: Some(first_seen),
                ..
            }
            | ClaimOutcome::LateDuplicate { first_seen, .. } => Some(*first_seen),
            _ => None,
        };
        if let Some(first_seen) = late {
            // A delivery after its record expired, of an event processed before: the TTL was too
            // short, or a request was replayed.
            self.metrics.late_duplicate(source.name.as_str());
            tracing::warn!(
                source = %source.name,
                policy = source.late_duplicates.as_str(),
                %first_seen,
                "late duplicate"
            );
        }
        tracing::debug!(source = %source.name, outcome = outcome.name(), "claim");
        Ok(outcome)
    }

    /// Logs and counts a finished request by its `Idemgate-Outcome`: the one place each outcome
    /// is emitted, so the log line and the metric cannot drift.
    pub(crate) fn record(&self, source: &str, response: &axum::response::Response) {
        let outcome = response
            .headers()
            .get(error::OUTCOME)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none");
        let outcome = outcome_label(outcome);
        self.metrics.delivery(source, outcome);
        tracing::info!(
            source,
            outcome,
            status = response.status().as_u16(),
            "request"
        );
    }

    /// Live and expired record counts, cached for a few seconds.
    async fn row_counts(&self) -> Option<RowCounts> {
        const FRESH: Duration = Duration::from_secs(5);
        if !self.store.counts_cheaply() {
            return None;
        }
        if let Some((at, rows)) = *self.rows.lock().unwrap_or_else(|p| p.into_inner())
            && at.elapsed() < FRESH
        {
            return Some(rows);
        }
        use idemgate_core::store::Stats;
        match self.store.stats().await {
            Ok(s) => {
                let rows = RowCounts {
                    live: s.live,
                    expired: s.expired,
                };
                *self.rows.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), rows));
                Some(rows)
            }
            Err(e) => {
                tracing::warn!(error = %error::ErrorChain(&e), "cannot count rows for /metrics");
                None
            }
        }
    }
}

/// Outcomes as `'static` labels. The set is closed (every value comes from this crate); anything
/// else is counted as `other`.
fn outcome_label(outcome: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "forwarded",
        "accepted",
        "challenge",
        "late-duplicate",
        "claimed",
        "completed",
        "released",
        "duplicate",
        "in-flight",
        "conflict",
        "stale-token",
        "forward-failed",
        "forward-unreachable",
        "forward-timeout",
        "unknown-source",
        "body-too-large",
        "body-unreadable",
        "unauthorized",
        "store-unavailable",
        "shutting-down",
        "missing-header",
        "malformed-header",
        "bad-signature",
        "stale-timestamp",
        "future-timestamp",
        "missing-event-id",
        "invalid-event-id",
        "invalid-json",
        "invalid-fingerprint",
        "invalid-lease",
        "invalid-token",
        "invalid-source",
    ];
    KNOWN
        .iter()
        .copied()
        .find(|k| *k == outcome)
        .unwrap_or("other")
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn build_source(index: usize, sc: &SourceConfig) -> Result<Source, config::ConfigError> {
    let policy = sc.policy(index)?;
    let verifier = ingest::verifier(sc)?;
    Ok(Source {
        name: policy.name.clone(),
        policy,
        verifier,
        forward_url: sc
            .forward_url
            .as_deref()
            .map(|u| u.parse().expect("validated in policy()")),
        forward_timeout: sc.forward_timeout,
        mode: sc.mode.into(),
        on_conflict: sc.on_conflict,
        late_duplicates: sc.late_duplicates.into(),
    })
}

/// The router: every route, the body limit and the request timeout.
pub fn app(state: AppState) -> Router {
    let limits = state.limits.clone();
    Router::new()
        .route("/hooks/{source}", post(ingest::hook))
        .route("/v1/claims", post(api::create_claim))
        .route(
            "/v1/claims/{source}/{event_id}/complete",
            post(api::complete),
        )
        .route("/v1/claims/{source}/{event_id}/release", post(api::release))
        .route("/v1/events/{source}/{event_id}", get(api::event))
        .route("/openapi.json", get(admin::openapi))
        .route("/healthz", get(admin::healthz))
        .route("/metrics", get(admin::metrics))
        .fallback(admin::not_found)
        // Bodies are read with an explicit limit by each handler; this bounds everything else.
        .layer(DefaultBodyLimit::max(limits.body_limit))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        .with_state(state)
}

/// Serves HTTP/1.1 connections until `shutdown`, then drains: stops accepting, asks every
/// connection to finish its request in flight and close, and after `grace` drops the requests
/// still running (their claim guards release the claims).
async fn accept_loop(
    listener: TcpListener,
    app: Router,
    header_timeout: Duration,
    grace: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;

    let mut connections = tokio::task::JoinSet::new();
    let (drain, draining) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(app.clone());
                let mut draining = draining.clone();
                connections.spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(header_timeout)
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => {}
                        _ = async { let _ = draining.wait_for(|d| *d).await; } => {
                            conn.as_mut().graceful_shutdown();
                            let _ = conn.await;
                        }
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tracing::info!(
        connections = connections.len(),
        "shutting down: no new connections; finishing in-flight requests"
    );
    let _ = drain.send(true);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            dropped = connections.len(),
            "requests outlived the shutdown grace; dropping them and releasing their claims"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
    Ok(())
}

/// Opens the store, serves `listener` until `shutdown` resolves, then drains: stops accepting,
/// lets in-flight requests finish within `limits.shutdown_grace`, releases the claims of those
/// that did not, and stops the sweeper.
///
/// # Errors
/// A [`StartError`] when the store cannot be opened or the listener fails.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let store = AnyStore::open(&config).await?;
    serve(&config, store, listener, shutdown).await
}

/// As [`run`], on a store already open.
///
/// # Errors
/// As [`run`].
pub async fn serve(
    config: &Config,
    store: AnyStore,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let state = AppState::new(config, store)?;
    let cancel = CancellationToken::new();
    let sweeper = admin::spawn_sweeper(&state, config.store.sweep_interval, cancel.clone());
    let retention = admin::spawn_history_retention(
        &state,
        config.store.history_retention,
        config.store.history_interval,
        cancel.clone(),
    );
    let result = accept_loop(
        listener,
        app(state.clone()),
        config.limits.request_timeout,
        config.limits.shutdown_grace,
        shutdown,
    )
    .await;
    // Requests dropped above release their claims from guards; wait for those releases.
    state.releases.close();
    if tokio::time::timeout(Duration::from_secs(10), state.releases.wait())
        .await
        .is_err()
    {
        tracing::error!("some claims could not be released in time; their leases will lapse");
    }
    cancel.cancel();
    let _ = sweeper.await;
    let _ = retention.await;
    tracing::info!("stopped");
    result
}
