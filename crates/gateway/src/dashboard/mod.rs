//! `/dashboard`: one server-rendered HTML page an operator looks at, and one page per event.
//!
//! No script, no framework, nothing fetched from elsewhere: HTML, a little CSS and inline SVG
//! charts drawn by `idemgate-chart` (real `<text>`, titles and descriptions, series told apart
//! by pattern as well as colour). The overview reloads itself every 30 seconds (`<meta
//! refresh>`, which `?refresh=off` leaves out).
//!
//! # Layout
//!
//! - `access`: who may open the dashboard: loopback peers, or any peer presenting
//!   `dashboard_token` (or one of `api_tokens`) as a bearer token or in the cookie `?token=`
//!   sets.
//! - this module: the routes, and what a page shows, read from the store (by its clock) and
//!   from the gateway's own metrics: the same figures `/metrics` and `idemgate advise` give.
//! - `health`: the health row; `timeline`: deliveries over time, counted by the store.
//! - `page`: the overview's HTML; `event`: one event's record and history; `charts`: the SVG
//!   charts; `html`: escaping, URL encoding and the page shell.
//!
//! # Cost
//!
//! Every query is bounded: deliveries over time count one source's last hour and day from an
//! index on `(source, received_at, outcome)`, and a view after the first counts only the last
//! few buckets again; record counts are `/metrics`' (cached a few seconds); the advisor's
//! figures, which read a month of history, are computed at most once a minute, in the
//! background once a first view has them, and the page says how old they are. No view waits
//! past one deadline (`PAGE_WAIT`, 100 ms) for any of them: what outlasts it goes on behind the
//! page, which shows the last figures with their age, or says they are coming. The store's
//! lookup for the health row is bounded too (`admin::PING_WAIT`).

mod access;
mod charts;
mod event;
mod health;
mod html;
pub(crate) mod kept;
mod page;
mod timeline;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemgate_core::advise::{self, Observation};
use idemgate_core::inbox::InboxStats;
use idemgate_core::store::{ClaimStore, HistoryQuery};
use idemgate_core::{EventId, Key, SourceName, StoreError};

pub use charts::{gap_chart, gap_panel};
use kept::{Advised, SweepRun};

use health::{Health, Light, inbox_health, store_health, sweeper_health, tier_health};
use timeline::Deliveries;

use crate::AppState;
use crate::config::Mode;
use crate::error::{AppError, ErrorChain};
use crate::outcome::Outcome;
use crate::path::PathParams;
use crate::state::Counted;

/// How far back the advisor looks: `idemgate advise`'s default.
pub const ADVICE_PERIOD: Duration = Duration::from_secs(30 * 86_400);
/// How long the advisor's figures are served before they are computed again.
const ADVICE_FRESH: Duration = Duration::from_secs(60);
/// How long a page waits for what it asked of the store (the advisor's first figures, which read
/// 30 days of history, the counts of deliveries over time, the record counts) before it is sent
/// with the figures last taken, or without them: on a long history those take seconds, and the
/// page must not.
const PAGE_WAIT: Duration = Duration::from_millis(100);
/// Each configured source's advice over [`ADVICE_PERIOD`], as `idemgate advise` computes it:
/// the history's observation, the live rows from `stats`, the source's contract and TTL. The
/// advice and its charts (tens of milliseconds over a long history's gaps) are worked out on a
/// blocking thread, not on the runtime's, which serves requests.
async fn advise_all(state: &AppState) -> Result<Advised, StoreError> {
    let observed = state.store.observe(ADVICE_PERIOD).await?;
    let stats = state.store_stats().await;
    let state = state.clone();
    tokio::task::spawn_blocking(move || advise_observed(&state, &observed, stats.as_deref()))
        .await
        .map_err(|e| StoreError::backend("the dashboard's advisor", e))
}

/// [`advise_all`]'s figures from what the store observed and counted.
fn advise_observed(
    state: &AppState,
    observed: &[Observation],
    stats: Option<&idemgate_core::StoreStats>,
) -> Advised {
    let mut names: Vec<&String> = state.sources.keys().collect();
    names.sort();
    let sources = names
        .into_iter()
        .map(|name| {
            let src = &state.sources[name];
            let mut obs = observed
                .iter()
                .find(|o| o.source == src.name)
                .cloned()
                .unwrap_or_else(|| Observation::empty(src.name.clone(), ADVICE_PERIOD));
            obs.live_rows = stats
                .and_then(|s| s.per_source.iter().find(|p| p.source == src.name))
                .map_or(0, |p| p.live);
            let advice = advise::advise(&obs, &src.policy.ttl.contract, src.policy.ttl.ttl);
            (advice, obs.gaps)
        })
        .collect::<Vec<_>>();
    let gap_figures = sources
        .iter()
        .enumerate()
        .map(|(n, (advice, gaps))| page::gap_figure(n, advice, gaps))
        .collect();
    Advised {
        at: Instant::now(),
        sources,
        gap_figures,
    }
}

/// The advisor's figures: the cached ones, with a refresh started behind them when they are
/// stale. With none cached yet, a refresh is started and waited for until `deadline`:
/// `Ok(None)` when it is still running (the page says so; the next view has them).
///
/// # Errors
/// Why the history could not be read, when no figures are cached.
async fn advised(
    state: &AppState,
    deadline: tokio::time::Instant,
) -> Result<Option<Arc<Advised>>, String> {
    let dash = &state.dashboard;
    let cached = || {
        dash.advice
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    };
    match cached() {
        Some(a) => {
            if a.at.elapsed() >= ADVICE_FRESH {
                refresh_advice(state);
            }
            Ok(Some(a))
        }
        None => {
            let ended = dash.refreshed.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            refresh_advice(state);
            let _ = tokio::time::timeout_at(deadline, ended).await;
            match cached() {
                Some(a) => Ok(Some(a)),
                None => match dash
                    .advice_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
                {
                    Some(why) if !dash.refreshing.load(Ordering::Acquire) => Err(why),
                    _ => Ok(None),
                },
            }
        }
    }
}

/// Computes the advisor's figures in the background, unless that is running already.
fn refresh_advice(state: &AppState) {
    if state.dashboard.refreshing.swap(true, Ordering::AcqRel) {
        return;
    }
    let task = state.clone();
    state.tasks.spawn_once("dashboard advice", async move {
        let dash = &task.dashboard;
        let _refreshing = Refreshing(dash);
        match advise_all(&task).await {
            Ok(a) => {
                *dash.advice.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(a));
                *dash.advice_error.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
            Err(e) => {
                let why = ErrorChain(&e).to_string();
                tracing::warn!(error = %why, "dashboard: cannot read history for the advisor");
                *dash.advice_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            }
        }
    });
}

/// Held while the advisor's figures are computed: its drop clears `refreshing` and wakes the
/// pages waiting, however the computation ends (a panic included).
struct Refreshing<'a>(&'a kept::Dashboard);

impl Drop for Refreshing<'_> {
    fn drop(&mut self) {
        self.0.refreshing.store(false, Ordering::Release);
        self.0.refreshed.notify_waiters();
    }
}

/// One source's counters in `/metrics`: `idemgate_deliveries` by outcome and
/// `idemgate_late_duplicates`.
#[derive(Debug)]
struct Counters {
    source: SourceName,
    deliveries: Vec<(&'static str, u64)>,
    late_duplicates: u64,
}

/// Everything the overview shows.
#[derive(Debug)]
struct Overview {
    engine: &'static str,
    health: Vec<Health>,
    /// What the store holds, as `/metrics` counts it (behind the page when it takes long).
    counted: Counted,
    /// The advisor's figures and their age (none while the first are being computed); the error
    /// when history could not be read.
    advised: Result<Option<Arc<Advised>>, String>,
    /// By source name, as `advised` (none while the first count runs).
    deliveries: Vec<(SourceName, Result<Option<Deliveries>, String>)>,
    inbox: Vec<InboxStats>,
    sweeps: Vec<SweepRun>,
    /// `/metrics`' counters, per source.
    counters: Vec<Counters>,
    tier: Option<crate::metrics::TierCounts>,
    refresh: bool,
    /// Each source's most recent history rows (`None`: the store keeps none it can list, or
    /// they were not read in time; the string says why).
    recent: Vec<(SourceName, Result<Vec<idemgate_core::Recent>, String>)>,
    /// Each inbox source's dead letters, oldest death first, at most [`DEAD_LISTED`].
    dead: Vec<(
        SourceName,
        Result<Vec<idemgate_core::inbox::DeadLetter>, String>,
    )>,
    /// What a replay from this page did (`?replayed=N&source=S`).
    notice: Option<String>,
    /// The token the page's forms send back.
    form_token: String,
}

/// Recent history rows shown per source.
const RECENT_SHOWN: std::num::NonZeroU32 = std::num::NonZeroU32::new(10).expect("non-zero");
/// Dead letters listed per inbox source.
const DEAD_LISTED: std::num::NonZeroU32 = std::num::NonZeroU32::new(20).expect("non-zero");

/// `GET /dashboard`.
pub(crate) async fn overview(State(state): State<AppState>, req: Request) -> Response {
    let query = PageQuery::of(&req);
    if let Some(refused) = access::check(&state, &req, query.token.as_deref()) {
        return refused;
    }
    let mut data = gather(&state, query.refresh.as_deref() != Some("off")).await;
    data.notice = query.replayed.as_deref().map(|n| {
        format!(
            "{n} dead letter{} of {} moved back to the queue.",
            if n == "1" { "" } else { "s" },
            query.source.as_deref().unwrap_or("the source")
        )
    });
    respond(Outcome::Dashboard, page::render(&data, &state))
}

/// The largest replay form accepted.
const FORM_LIMIT: usize = 16 * 1024;

/// `POST /dashboard/replay`: the dead-letter list's replay button. The same access as the pages,
/// a form token only this gateway's pages carry, and no cross-site request (`Sec-Fetch-Site`);
/// then the source's dead letters (or one event's) move back to the queue with the reason, as
/// `idemgate replay --dead-letters` moves them, and the browser is sent back to the overview.
pub(crate) async fn replay(State(state): State<AppState>, req: Request) -> Response {
    use idemgate_core::inbox::{Inbox, ReplayFilter};
    if let Some(refused) = access::check(&state, &req, None) {
        return refused;
    }
    let cross_site = req
        .headers()
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("cross-site"));
    let body = match axum::body::to_bytes(req.into_body(), FORM_LIMIT).await {
        Ok(body) => String::from_utf8_lossy(&body).into_owned(),
        Err(_) => {
            return crate::error::problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                Outcome::BodyTooLarge,
                &format!("a replay form is at most {FORM_LIMIT} bytes"),
            );
        }
    };
    let form = Some(body.as_str());
    let field = |name: &str| {
        html::query_param(form, name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let token_ok = field("form_token").is_some_and(|t| {
        crate::config::token::digests_equal(
            &crate::config::token::digest(&t),
            &crate::config::token::digest(&state.dashboard.form_token),
        )
    });
    if cross_site || !token_ok {
        return crate::error::problem(
            StatusCode::FORBIDDEN,
            Outcome::DashboardForbidden,
            "a replay is sent from this gateway's own dashboard page (its form token did not match, or the request came from another site): reload the dashboard and press the button again",
        );
    }
    let Some(source) = field("source") else {
        return bad_form("source: which source's dead letters to replay");
    };
    let src = match state.source(&source) {
        Ok(src) => src,
        Err(e) => return e.into_response(),
    };
    if src.mode != Mode::Inbox {
        return crate::error::problem(
            StatusCode::CONFLICT,
            Outcome::NotInbox,
            &format!("source {source:?} is not in inbox mode: it keeps no dead letters"),
        );
    }
    let Some(reason) = field("reason") else {
        return crate::error::problem(
            StatusCode::BAD_REQUEST,
            Outcome::InvalidReason,
            "reason: say why these dead letters are replayed (it is recorded in each event's history)",
        );
    };
    let event_id = match field("event_id").map(EventId::new).transpose() {
        Ok(e) => e,
        Err(e) => return bad_form(&format!("event_id: {e}")),
    };
    let filter = ReplayFilter {
        source: Some(src.name.clone()),
        since: None,
        event_id,
    };
    let moved = match state.store.replay_dead_letters(&filter, &reason).await {
        Ok(moved) => moved,
        Err(e) => return AppError::from(e).into_response(),
    };
    tracing::info!(source = %src.name, moved, reason = %reason, "dead letters replayed from the dashboard");
    if moved > 0 {
        state.inbox_wakeup.notify_waiters();
    }
    let mut response = StatusCode::SEE_OTHER.into_response();
    let location = format!(
        "/dashboard?refresh=off&replayed={moved}&source={}",
        html::segment(src.name.as_str())
    );
    if let Ok(location) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Outcome::Replayed.on(response)
}

fn bad_form(what: &str) -> Response {
    crate::error::problem(
        StatusCode::BAD_REQUEST,
        Outcome::BadRequest,
        &format!("the replay form lacks {what}"),
    )
}

/// The query string the dashboard's pages take.
#[derive(Debug)]
struct PageQuery {
    /// A token to keep in a cookie (then the page redirects to itself without it).
    token: Option<String>,
    /// `off`: no automatic reload.
    refresh: Option<String>,
    /// The search box: a source and an event id.
    source: Option<String>,
    event_id: Option<String>,
    /// After a replay from the page: how many dead letters moved (of `source`).
    replayed: Option<String>,
}

impl PageQuery {
    fn of(req: &Request) -> Self {
        let q = req.uri().query();
        Self {
            token: html::query_param(q, "token"),
            refresh: html::query_param(q, "refresh"),
            source: html::query_param(q, "source"),
            event_id: html::query_param(q, "event_id"),
            replayed: html::query_param(q, "replayed").filter(|n| n.parse::<u64>().is_ok()),
        }
    }
}

async fn gather(state: &AppState, refresh: bool) -> Overview {
    // Every first count starts now, to run beside the rest; the page waits for them (and for
    // the advisor's first figures) until the same deadline.
    let deadline = tokio::time::Instant::now() + PAGE_WAIT;
    for src in state.sources.values() {
        timeline::start(state, &src.name);
    }
    // Bounded: a store that holds a lookup is shown red, not waited for.
    let ping = async {
        let started = Instant::now();
        (crate::admin::ping_store(state).await, started.elapsed())
    };
    // Everything is asked for at once, each first figure waited for until the same deadline.
    let ((ping, ping_ms), tier_ping, counted, inbox, advised) = tokio::join!(
        ping,
        crate::admin::ping_tier(state),
        state.store_stats_by(deadline),
        state.inbox_stats(),
        advised(state, deadline)
    );
    let tier = state.tier_counts();
    let sweeps = state.dashboard.sweeps();
    // The sources, and the apis: their keyed requests are events too.
    let names = state.known_names();
    let mut deliveries = Vec::new();
    let mut counters = Vec::new();
    let mut recent = Vec::new();
    let mut dead = Vec::new();
    // Each an index walk that stops at its limit; bounded all the same.
    let bound = deadline + PAGE_WAIT;
    for name in &names {
        let rows = match tokio::time::timeout_at(bound, state.store.recent(name, RECENT_SHOWN))
            .await
        {
            Ok(Ok(Some(rows))) => Ok(rows),
            Ok(Ok(None)) => Err("the Redis store keeps each event's history in a stream of its own and cannot list a source's latest".to_owned()),
            Ok(Err(e)) => Err(ErrorChain(&e).to_string()),
            Err(_) => Err("not read in time; try again".to_owned()),
        };
        recent.push(((*name).clone(), rows));
        if state
            .sources
            .get(name.as_str())
            .is_some_and(|s| s.mode == Mode::Inbox)
        {
            use idemgate_core::inbox::{Inbox, ReplayFilter};
            let filter = ReplayFilter::source(Some(name));
            let letters = match tokio::time::timeout_at(
                bound,
                state.store.dead_letters(&filter, DEAD_LISTED),
            )
            .await
            {
                Ok(Ok(letters)) => Ok(letters),
                Ok(Err(e)) => Err(ErrorChain(&e).to_string()),
                Err(_) => Err("not read in time; try again".to_owned()),
            };
            dead.push(((*name).clone(), letters));
        }
    }
    for name in names {
        deliveries.push((
            name.clone(),
            timeline::timeline(state, name, deadline).await,
        ));
        counters.push(Counters {
            source: name.clone(),
            deliveries: state.metrics.delivery_counts(name.as_str()),
            late_duplicates: state.metrics.late_duplicates_seen(name.as_str()),
        });
    }
    let health = vec![
        store_health(&ping, ping_ms),
        tier_health(tier_ping.as_ref(), tier),
        sweeper_health(state, &sweeps, counted.stats().map(AsRef::as_ref)),
    ];
    let mut health = health;
    if state.sources.values().any(|s| s.mode == Mode::Inbox) {
        health.push(inbox_health(state, &inbox));
    }
    if let Some(windows) = health::destination_health(state) {
        health.push(windows);
    }
    if let Some(archive) = health::archive_health(state) {
        health.push(archive);
    }
    health.push(health::tasks_health(state));
    if let Ok(Some(advised)) = &advised {
        health.push(health::ttl_health(advised));
    }
    Overview {
        engine: state.store.engine(),
        health,
        counted,
        advised,
        deliveries,
        inbox,
        sweeps,
        counters,
        tier,
        refresh,
        recent,
        dead,
        notice: None,
        form_token: state.dashboard.form_token.clone(),
    }
}

/// `GET /dashboard/events/{source}/{event_id}`: one event's record and history.
pub(crate) async fn event_page(
    State(state): State<AppState>,
    PathParams((source, event_id)): PathParams<(String, String)>,
    req: Request,
) -> Response {
    let query = PageQuery::of(&req);
    if let Some(refused) = access::check(&state, &req, query.token.as_deref()) {
        return refused;
    }
    match lookup(&state, &source, &event_id).await {
        Ok((view, queued)) => respond(Outcome::Lookup, event::render(&view, &queued, &state)),
        Err(e) => e.into_response(),
    }
}

async fn lookup(
    state: &AppState,
    source: &str,
    event_id: &str,
) -> Result<
    (
        idemgate_core::EventView,
        Vec<idemgate_core::inbox::QueueEntry>,
    ),
    AppError,
> {
    let name = state.known_name(source)?;
    let event_id = EventId::new(event_id).map_err(|e| AppError::BadRequest {
        kind: Outcome::InvalidEventId,
        detail: e.to_string(),
    })?;
    let key = Key::new(name, event_id);
    let view = state.store.lookup(&key).await?;
    let queued = state.store.queue_of(&key).await?;
    Ok((view, queued))
}

/// `GET /dashboard/events?source=..&event_id=..`: the search box, which goes to the event's page.
pub(crate) async fn search(State(state): State<AppState>, req: Request) -> Response {
    let query = PageQuery::of(&req);
    if let Some(refused) = access::check(&state, &req, query.token.as_deref()) {
        return refused;
    }
    let source = query.source.unwrap_or_default();
    let event_id = query.event_id.unwrap_or_default();
    let (source, event_id) = (source.trim(), event_id.trim());
    if let Err(e) = state.known_name(source) {
        return e.into_response();
    }
    if let Err(e) = EventId::new(event_id) {
        return AppError::BadRequest {
            kind: Outcome::InvalidEventId,
            detail: e.to_string(),
        }
        .into_response();
    }
    see_other(&html::event_path(source, event_id), Outcome::Lookup)
}

/// `303 See Other` to `location` (a path of ours, already encoded).
fn see_other(location: &str, outcome: Outcome) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    outcome.on(response)
}

/// An HTML page with the headers every dashboard page carries: nothing may be loaded from
/// elsewhere or run, the page may not be framed, and nothing is cached.
fn respond(outcome: Outcome, body: String) -> Response {
    let mut response = body.into_response();
    let headers: &mut HeaderMap = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    outcome.on(response)
}
