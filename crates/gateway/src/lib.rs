//! The idemgate gateway, as a library: [`app`] builds the router, [`run`] serves it until a
//! shutdown signal.
//!
//! # Layout
//!
//! - [`config`]: the TOML configuration, validated once at load, and each source's
//!   [`verifier`] built from its keys; [`allow`]: a source's `allow_from` networks.
//! - the store: [`AnyStore`] and [`Dedup`](idemgate::Dedup) from the `idemgate` facade, which
//!   chooses the engine at start (SQLite by default, PostgreSQL and Redis behind features).
//! - `state`: [`AppState`], what every handler shares, and the one place each outcome is logged
//!   and counted.
//! - `server`: [`run`] and [`serve`]: the accept loop (a connection cap, header timeouts,
//!   graceful drain) and the background work around it.
//! - `guard`: the layer around every route: an announced body over the limit is refused at once
//!   (413), each request is bounded in time (408), and early answers say `Connection: close`.
//! - `ingest`: `POST /hooks/{source}`: body limit, signature, event id, fingerprint, claim, then
//!   forward (or acknowledge) and complete, or release so the sender retries.
//! - `forward`: the outgoing HTTP client (`http://` and `https://` through rustls, one per
//!   source's TLS settings), the forward POST and a GET of a small document.
//! - `target`: a destination URL (`forward_url`) parsed and checked at load, shown without its
//!   credentials.
//! - `destination`: where a source's events go (`forward_url`): HTTP through `forward`, a
//!   JetStream publish or a confirmed RabbitMQ publish; each broker's connection shared and
//!   reopened with backoff, and the stream's duplicate window read for the window audit.
//! - `dispatch`: inbox mode's dispatcher, one task per inbox source: takes queued items under a
//!   lease, delivers them, retries with backoff, dead-letters what runs out of attempts.
//! - `window`: what the window audit judges (a source's exposure, the broker's finding, the
//!   two judged), types and arithmetic only.
//! - [`audit`]: the window audit: whether a broker destination's own dedup window covers the
//!   time after a first publish at which idemgate may publish the same event again.
//! - `openapi`: `/openapi.json`, the claim API's description with the configured source names.
//! - [`api`]: the claim API for workers (`/v1/claims`, `/v1/events`), described by
//!   `/openapi.json`.
//! - `admin`: `/healthz` (a real round trip to each component), `/livez` (the process answers),
//!   `/readyz` (the store at this binary's schema, the dispatchers running) and `/metrics`
//!   (Prometheus); [`router`] serves them, with the dashboard, on `admin_listen` when it is set.
//! - `health`: the judgements `/healthz`, `/readyz` and the dashboard share; `verdict`: the
//!   level and the words they speak in.
//! - `tasks`: the background tasks, supervised: a panic is logged, counted, shown on `/healthz`
//!   and the task restarted with backoff.
//! - `process`: this process's identity (for its boot) and its `process_*` metrics.
//! - [`dashboard`]: `/dashboard`, one server-rendered HTML page with SVG charts (loopback
//!   only unless a token is presented), and one page per event.
//! - [`outcome`]: [`Outcome`], what the gateway did with a request, one typed value from the
//!   handler to the header, the metric and the log line.
//! - [`error`]: every failure mapped to HTTP in one place, as problem+json.
//! - [`metrics`]: the counters and the claim latency histogram.

pub mod api;
pub mod audit;
pub mod config;
pub mod dashboard;
pub mod error;
pub mod metrics;
pub mod outcome;

pub mod allow;

mod admin;
mod archiving;
mod batch;
mod budget;
mod destination;
mod dispatch;
mod documents;
mod event;
mod forward;
mod guard;
mod health;
mod ingest;
mod openapi;
mod path;
mod process;
mod server;
mod sidecar;
mod state;
mod target;
mod tasks;
mod upstream;
mod verdict;
mod window;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

pub use crate::config::Config;
pub use crate::config::verifier;
pub use crate::outcome::Outcome;
pub use crate::server::{
    Listeners, SERVE_LOCK, StartError, bind_admin, bind_apis, open, run, serve, serve_on,
};
pub use crate::state::{AppState, Inner, Source, Sources};
pub use idemgate::{AnyStore, store};

/// Which routes a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    /// Every route, on the one listener (no `admin_listen`).
    All,
    /// What senders and workers need: `/hooks/{source}` and the claim API's worker routes
    /// (claim, complete, release, and `/v1/events`), on `listen` when `admin_listen` is set.
    Public,
    /// What operators need: `/healthz`, `/livez`, `/readyz`, `/metrics`, `/openapi.json`,
    /// `/dashboard` (with its replay form) and the claim API's replay route, on `admin_listen`.
    Admin,
}

/// The router: every route, the body limit and the request timeout.
pub fn app(state: AppState) -> Router {
    router(state, Routes::All)
}

/// The router of one listener: `routes`' routes, the body limit and the request timeout; any
/// other path is 404.
pub fn router(state: AppState, routes: Routes) -> Router {
    let public = routes != Routes::Admin;
    let admin = routes != Routes::Public;
    // The claim API: a bearer token of the route's scope before a byte of a body is read, and
    // small bodies.
    let mut claim_api = Router::new();
    if public {
        claim_api = claim_api
            .route("/v1/claims", post(api::create_claim))
            .route(
                "/v1/claims/{source}/{event_id}/complete",
                post(api::complete),
            )
            .route("/v1/claims/{source}/{event_id}/release", post(api::release))
            .route("/v1/events/{source}/{event_id}", get(api::event));
    }
    if admin {
        claim_api = claim_api.route("/v1/sources/{source}/replay", post(api::replay));
    }
    let claim_api = claim_api
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            api::gate,
        ))
        .layer(DefaultBodyLimit::max(api::BODY_LIMIT));
    let mut app = Router::new().merge(claim_api);
    if public {
        app = app.route("/hooks/{source}", post(ingest::hook));
    }
    if admin {
        app = app
            .route("/openapi.json", get(admin::openapi))
            .route("/healthz", get(admin::healthz))
            .route("/livez", get(admin::livez))
            .route("/readyz", get(admin::readyz))
            .route("/metrics", get(admin::metrics))
            .route("/dashboard", get(dashboard::overview))
            .route("/dashboard/events", get(dashboard::search))
            .route("/dashboard/replay", post(dashboard::replay))
            .route(
                "/dashboard/events/{source}/{event_id}",
                get(dashboard::event_page),
            );
    }
    app.fallback(admin::not_found)
        // Bodies are read with an explicit limit by each handler; this bounds everything else.
        .layer(DefaultBodyLimit::max(state.largest_body_limit()))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        .with_state(state)
}
