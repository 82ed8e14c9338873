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
//! - `page`: the overview's HTML; `event`: one event's record and history; `charts`: the SVG
//!   charts; `html`: escaping, URL encoding and the page shell.
//!
//! # Cost
//!
//! Every query is bounded: deliveries over time count one source's last hour and day from an
//! index on `(source, received_at, outcome)`, and a view after the first counts only the last
//! few buckets again (`counted`); record counts are `/metrics`' (cached a few
//! seconds); the advisor's figures, which read a month of history, are computed at most once a
//! minute, in the background once a first view has them, and the page says how old they are.

mod access;
mod charts;
mod event;
mod html;
mod page;

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemgate_core::advise::{self, Advice, Observation};
use idemgate_core::inbox::InboxStats;
use idemgate_core::store::{ClaimStore, HistoryQuery};
use idemgate_core::sweep::SweepReport;
use idemgate_core::{EventId, Key, SourceName, StoreError, StoreStats, TimelineCounts};

pub use charts::gap_panel;

use crate::AppState;
use crate::config::{Config, Mode};
use crate::error::{AppError, ErrorChain};
use crate::outcome::Outcome;

/// How far back the advisor looks: `idemgate advise`'s default.
pub const ADVICE_PERIOD: Duration = Duration::from_secs(30 * 86_400);
/// How long the advisor's figures are served before they are computed again.
const ADVICE_FRESH: Duration = Duration::from_secs(60);
/// Sweeper runs remembered.
const SWEEPS_KEPT: usize = 10;

/// The dashboard's share of the gateway's state.
#[derive(Debug)]
pub(crate) struct Dashboard {
    /// `dashboard_token`: with it, any peer presenting it may open the dashboard.
    token: Option<String>,
    /// `store.sweep_interval`: a sweeper silent for much longer is a warning.
    sweep_interval: Duration,
    /// The last runs of the background sweeper, newest first.
    sweeps: Mutex<VecDeque<SweepRun>>,
    /// The advisor's figures, as last computed.
    advice: Mutex<Option<Arc<Advised>>>,
    /// Whether a background refresh of `advice` is running.
    refreshing: Arc<AtomicBool>,
    /// Each source's deliveries over time as last counted, by source and bucket width.
    timelines: Mutex<HashMap<(SourceName, u32), TimelineCounts>>,
}

impl Dashboard {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            token: config.dashboard_token.clone(),
            sweep_interval: config.store.sweep_interval,
            sweeps: Mutex::default(),
            advice: Mutex::default(),
            refreshing: Arc::default(),
            timelines: Mutex::default(),
        }
    }

    /// Remembers one run of the background sweeper.
    pub(crate) fn sweep_run(&self, run: &Result<SweepReport, StoreError>) {
        let entry = match run {
            Ok(r) => SweepRun {
                at: Instant::now(),
                rows: r.rows,
                batches: r.batches,
                elapsed: r.elapsed,
                partitions: r.partitions_created.len() + r.partitions_dropped.len(),
                error: None,
            },
            Err(e) => SweepRun {
                at: Instant::now(),
                rows: 0,
                batches: 0,
                elapsed: Duration::ZERO,
                partitions: 0,
                error: Some(ErrorChain(e).to_string()),
            },
        };
        let mut sweeps = self.sweeps.lock().unwrap_or_else(|p| p.into_inner());
        sweeps.push_front(entry);
        sweeps.truncate(SWEEPS_KEPT);
    }

    fn sweeps(&self) -> Vec<SweepRun> {
        let sweeps = self.sweeps.lock().unwrap_or_else(|p| p.into_inner());
        sweeps.iter().cloned().collect()
    }
}

/// One run of the background sweeper, as the dashboard lists it.
#[derive(Debug, Clone)]
struct SweepRun {
    /// When it ended, by this process's monotonic clock (shown as an age).
    at: Instant,
    rows: u64,
    batches: u64,
    elapsed: Duration,
    /// Partitions created and dropped (PostgreSQL's partitioned mode).
    partitions: usize,
    error: Option<String>,
}

/// The advisor's figures for every configured source, by name.
#[derive(Debug)]
struct Advised {
    at: Instant,
    sources: Vec<(Advice, Vec<Duration>)>,
}

/// Each configured source's advice over [`ADVICE_PERIOD`], as `idemgate advise` computes it:
/// the history's observation, the live rows from `stats`, the source's contract and TTL.
async fn advise_all(state: &AppState) -> Result<Advised, StoreError> {
    let observed = state.store.observe(ADVICE_PERIOD).await?;
    let stats = state.store_stats().await;
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
                .as_ref()
                .and_then(|s| s.per_source.iter().find(|p| p.source == src.name))
                .map_or(0, |p| p.live);
            let advice = advise::advise(&obs, &src.policy.ttl.contract, src.policy.ttl.ttl);
            (advice, obs.gaps)
        })
        .collect();
    Ok(Advised {
        at: Instant::now(),
        sources,
    })
}

/// The advisor's figures: the cached ones while fresh; computed now when there are none; the
/// cached ones, with a refresh started behind them, when they are stale.
async fn advised(state: &AppState) -> Result<Arc<Advised>, StoreError> {
    let cached = state
        .dashboard
        .advice
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    match cached {
        Some(a) if a.at.elapsed() < ADVICE_FRESH => Ok(a),
        Some(stale) => {
            if !state.dashboard.refreshing.swap(true, Ordering::AcqRel) {
                let state = state.clone();
                tokio::spawn(async move {
                    match advise_all(&state).await {
                        Ok(a) => {
                            *state
                                .dashboard
                                .advice
                                .lock()
                                .unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(a));
                        }
                        Err(e) => {
                            tracing::warn!(error = %ErrorChain(&e), "dashboard: cannot read history for the advisor");
                        }
                    }
                    state.dashboard.refreshing.store(false, Ordering::Release);
                });
            }
            Ok(stale)
        }
        None => {
            let a = Arc::new(advise_all(state).await?);
            *state
                .dashboard
                .advice
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(a.clone());
            Ok(a)
        }
    }
}

/// A health light: green, amber or red, with the reason in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Light {
    Green,
    Amber,
    Red,
    /// Not configured, or not needed: nothing to judge.
    Off,
}

/// One component's health in the header row.
#[derive(Debug, Clone)]
struct Health {
    name: &'static str,
    light: Light,
    why: String,
}

/// One source's deliveries over time: the last hour by minute, the last day by half hour.
#[derive(Debug)]
struct Deliveries {
    hour: Option<TimelineCounts>,
    day: Option<TimelineCounts>,
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
    stats: Option<Arc<StoreStats>>,
    /// The advisor's figures and their age; the error when history could not be read.
    advised: Result<Arc<Advised>, String>,
    /// By source name, as `advised`.
    deliveries: Vec<(SourceName, Result<Deliveries, String>)>,
    inbox: Vec<InboxStats>,
    sweeps: Vec<SweepRun>,
    /// `/metrics`' counters, per source.
    counters: Vec<Counters>,
    tier: Option<crate::metrics::TierCounts>,
    refresh: bool,
}

/// `GET /dashboard`.
pub(crate) async fn overview(State(state): State<AppState>, req: Request) -> Response {
    let query = PageQuery::of(&req);
    if let Some(refused) = access::check(&state, &req, query.token.as_deref()) {
        return refused;
    }
    let data = gather(&state, query.refresh.as_deref() != Some("off")).await;
    respond(Outcome::Dashboard, page::render(&data, &state))
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
}

impl PageQuery {
    fn of(req: &Request) -> Self {
        let q = req.uri().query();
        Self {
            token: html::query_param(q, "token"),
            refresh: html::query_param(q, "refresh"),
            source: html::query_param(q, "source"),
            event_id: html::query_param(q, "event_id"),
        }
    }
}

async fn gather(state: &AppState, refresh: bool) -> Overview {
    let started = Instant::now();
    let ping = state.store.ping().await;
    let ping_ms = started.elapsed();
    let tier_ping = state.store.ping_tier().await;
    let stats = state.store_stats().await;
    let inbox = state.inbox_stats().await;
    let tier = state.tier_counts();
    let sweeps = state.dashboard.sweeps();
    let advised = advised(state).await.map_err(|e| ErrorChain(&e).to_string());
    let mut names: Vec<&SourceName> = state.sources.values().map(|s| &s.name).collect();
    names.sort();
    let mut deliveries = Vec::new();
    let mut counters = Vec::new();
    for name in names {
        deliveries.push((name.clone(), timeline(state, name).await));
        counters.push(Counters {
            source: name.clone(),
            deliveries: state.metrics.delivery_counts(name.as_str()),
            late_duplicates: state.metrics.late_duplicates_seen(name.as_str()),
        });
    }
    let health = vec![
        store_health(&ping, ping_ms),
        tier_health(tier_ping.as_ref(), tier),
        sweeper_health(state, &sweeps, stats.as_deref()),
    ];
    let mut health = health;
    if state.sources.values().any(|s| s.mode == Mode::Inbox) {
        health.push(inbox_health(state, &inbox));
    }
    Overview {
        engine: state.store.engine(),
        health,
        stats,
        advised,
        deliveries,
        inbox,
        sweeps,
        counters,
        tier,
        refresh,
    }
}

async fn timeline(state: &AppState, source: &SourceName) -> Result<Deliveries, String> {
    const MINUTE: NonZeroU32 = NonZeroU32::new(60).expect("non-zero");
    const HALF_HOUR: NonZeroU32 = NonZeroU32::new(1_800).expect("non-zero");
    const HOUR_BUCKETS: NonZeroU32 = NonZeroU32::new(60).expect("non-zero");
    const DAY_BUCKETS: NonZeroU32 = NonZeroU32::new(48).expect("non-zero");
    let read = async {
        let (hour, day) = tokio::try_join!(
            counted(state, source, MINUTE, HOUR_BUCKETS),
            counted(state, source, HALF_HOUR, DAY_BUCKETS)
        )?;
        Ok::<_, StoreError>(Deliveries { hour, day })
    };
    read.await.map_err(|e| {
        tracing::warn!(source = %source, error = %ErrorChain(&e), "dashboard: cannot count history");
        ErrorChain(&e).to_string()
    })
}

/// `source`'s last `buckets` buckets of `bucket_secs`, counted again only from the bucket before
/// the one the last count ended in: buckets before it are complete (a row committed a moment
/// after its time is in the bucket recounted), so an open dashboard reads each row about three
/// times, not once per view. A count older than that, or a store clock that went back, is
/// counted whole.
async fn counted(
    state: &AppState,
    source: &SourceName,
    bucket_secs: NonZeroU32,
    buckets: NonZeroU32,
) -> Result<Option<TimelineCounts>, StoreError> {
    const RECOUNT: NonZeroU32 = NonZeroU32::new(3).expect("non-zero");
    let key = (source.clone(), bucket_secs.get());
    let cached = state
        .dashboard
        .timelines
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .cloned();
    let fresh = match cached {
        Some(old) if buckets > RECOUNT => {
            let Some(recent) = state.store.timeline(source, bucket_secs, RECOUNT).await? else {
                return Ok(None);
            };
            // The recount must reach back over the cached count's last bucket, and the one
            // before it.
            let reaches = recent.start <= old.bucket_start(old.buckets.saturating_sub(2));
            if reaches && recent.now >= old.now {
                merge(&old, &recent, bucket_secs, buckets)
            } else {
                match state.store.timeline(source, bucket_secs, buckets).await? {
                    Some(t) => t,
                    None => return Ok(None),
                }
            }
        }
        _ => match state.store.timeline(source, bucket_secs, buckets).await? {
            Some(t) => t,
            None => return Ok(None),
        },
    };
    state
        .dashboard
        .timelines
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, fresh.clone());
    Ok(Some(fresh))
}

/// The window ending at `recent.now`: `recent`'s buckets where it has them, `old`'s before.
fn merge(
    old: &TimelineCounts,
    recent: &TimelineCounts,
    bucket_secs: NonZeroU32,
    buckets: NonZeroU32,
) -> TimelineCounts {
    let (start, _) = TimelineCounts::window(recent.now, bucket_secs, buckets);
    let width = i64::from(bucket_secs.get()) * 1_000;
    let index = |from: idemgate_core::Timestamp, i: u32| {
        (from.as_millis() + i64::from(i) * width - start.as_millis()).div_euclid(width)
    };
    let rows = old
        .counts
        .iter()
        .filter(|(i, _, _)| old.bucket_start(*i) < recent.start)
        .map(|(i, o, n)| (index(old.start, *i), *o, *n))
        .chain(
            recent
                .counts
                .iter()
                .map(|(i, o, n)| (index(recent.start, *i), *o, *n)),
        )
        .collect::<Vec<_>>();
    TimelineCounts::from_rows(recent.now, bucket_secs, buckets, rows)
}

fn store_health(ping: &Result<(), StoreError>, took: Duration) -> Health {
    let ms = took.as_secs_f64() * 1_000.0;
    let (light, why) = match ping {
        Err(e) => (Light::Red, format!("does not answer: {}", ErrorChain(e))),
        Ok(()) if took > Duration::from_millis(250) => (
            Light::Amber,
            format!("answers, slowly: a lookup took {ms:.0} ms"),
        ),
        Ok(()) => (Light::Green, format!("answers: a lookup took {ms:.1} ms")),
    };
    Health {
        name: "store",
        light,
        why,
    }
}

fn tier_health(
    ping: Option<&Result<(), String>>,
    counts: Option<crate::metrics::TierCounts>,
) -> Health {
    let rate = counts.map(|c| page::hit_rate(c.hits, c.misses));
    let (light, why) = match ping {
        None => (Light::Off, "no Redis tier configured".to_owned()),
        Some(Err(e)) => (
            Light::Red,
            format!("does not answer ({e}): claims go to the store alone, slower"),
        ),
        Some(Ok(())) => match counts {
            Some(c) if c.errors > 0 || c.bypassed > 0 => (
                Light::Amber,
                format!(
                    "answers now; since start {} errors and {} claims bypassed it; hit rate {}",
                    c.errors,
                    c.bypassed,
                    rate.unwrap_or_default()
                ),
            ),
            _ => (
                Light::Green,
                format!("answers; hit rate {}", rate.unwrap_or_default()),
            ),
        },
    };
    Health {
        name: "Redis tier",
        light,
        why,
    }
}

fn sweeper_health(state: &AppState, sweeps: &[SweepRun], stats: Option<&StoreStats>) -> Health {
    let every = state.dashboard.sweep_interval;
    let human = |d: Duration| idemgate_core::Human(Duration::from_secs(d.as_secs())).to_string();
    let backlog = stats.map_or(0, |s| s.expired);
    let (light, why) = if state.store.engine() == "redis" {
        (
            Light::Off,
            "not needed: Redis expires its keys itself".to_owned(),
        )
    } else {
        match sweeps.first() {
            None => (
                Light::Amber,
                format!(
                    "no run yet (one runs at start, then every {})",
                    human(every)
                ),
            ),
            Some(SweepRun {
                error: Some(e), at, ..
            }) => (
                Light::Red,
                format!("the last run, {} ago, failed: {e}", human(at.elapsed())),
            ),
            Some(run) if run.at.elapsed() > every.saturating_mul(3) + Duration::from_secs(5) => (
                Light::Amber,
                format!(
                    "silent: the last run was {} ago, runs are due every {}",
                    human(run.at.elapsed()),
                    human(every)
                ),
            ),
            Some(run) if backlog > 0 && backlog > stats.map_or(0, |s| s.live) => (
                Light::Amber,
                format!(
                    "behind: {backlog} expired records wait, more than the live ones; the last run {} ago deleted {}",
                    human(run.at.elapsed()),
                    run.rows
                ),
            ),
            Some(run) => (
                Light::Green,
                format!(
                    "the last run, {} ago, deleted {} expired records in {} ms",
                    human(run.at.elapsed()),
                    run.rows,
                    run.elapsed.as_millis()
                ),
            ),
        }
    };
    Health {
        name: "sweeper",
        light,
        why,
    }
}

fn inbox_health(state: &AppState, inbox: &[InboxStats]) -> Health {
    let mut late = Vec::new();
    let mut dead = 0;
    for s in inbox {
        dead += s.dead;
        let Some(src) = state.sources.get(s.source.as_str()) else {
            continue;
        };
        let margin = src.policy.ttl.contract.queue_lag;
        if let Some(lag) = s.oldest_pending.filter(|lag| *lag > margin) {
            late.push(format!(
                "{}: oldest item {} old, past its queue_lag of {}",
                s.source,
                idemgate_core::Human(Duration::from_secs(lag.as_secs())),
                idemgate_core::Human(margin)
            ));
        }
    }
    let (light, why) = if !late.is_empty() {
        (Light::Red, late.join("; "))
    } else if dead > 0 {
        (
            Light::Amber,
            format!("{dead} dead letters wait for idemgate replay"),
        )
    } else {
        (
            Light::Green,
            "every queue within its queue_lag margin, no dead letters".to_owned(),
        )
    };
    Health {
        name: "inbox",
        light,
        why,
    }
}

/// `GET /dashboard/events/{source}/{event_id}`: one event's record and history.
pub(crate) async fn event_page(
    State(state): State<AppState>,
    Path((source, event_id)): Path<(String, String)>,
    req: Request,
) -> Response {
    let query = PageQuery::of(&req);
    if let Some(refused) = access::check(&state, &req, query.token.as_deref()) {
        return refused;
    }
    match lookup(&state, &source, &event_id).await {
        Ok(view) => respond(Outcome::Lookup, event::render(&view, &state)),
        Err(e) => e.into_response(),
    }
}

async fn lookup(
    state: &AppState,
    source: &str,
    event_id: &str,
) -> Result<idemgate_core::EventView, AppError> {
    let src = state.source(source)?;
    let event_id = EventId::new(event_id).map_err(|e| AppError::BadRequest {
        kind: Outcome::InvalidEventId,
        detail: e.to_string(),
    })?;
    Ok(state
        .store
        .lookup(&Key::new(src.name.clone(), event_id))
        .await?)
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
    if let Err(e) = state.source(source) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate_core::{HistoryOutcome, Timestamp};

    fn n(v: u32) -> NonZeroU32 {
        NonZeroU32::new(v).unwrap()
    }

    /// Counts as the store would give them for rows at `at` (ms), seen at `now`.
    fn counts(now: i64, bucket: u32, buckets: u32, at: &[i64]) -> TimelineCounts {
        let (start, _) = TimelineCounts::window(Timestamp::from_millis(now), n(bucket), n(buckets));
        let width = i64::from(bucket) * 1_000;
        let mut rows: Vec<(i64, HistoryOutcome, u64)> = Vec::new();
        for t in at.iter().filter(|t| **t >= start.as_millis() && **t <= now) {
            let i = (t - start.as_millis()) / width;
            match rows.iter_mut().find(|r| r.0 == i) {
                Some(r) => r.2 += 1,
                None => rows.push((i, HistoryOutcome::Claimed, 1)),
            }
        }
        rows.sort_by_key(|r| r.0);
        TimelineCounts::from_rows(Timestamp::from_millis(now), n(bucket), n(buckets), rows)
    }

    #[test]
    fn a_recount_of_the_last_buckets_merges_into_the_earlier_count() {
        let t0 = 1_700_000_000_000i64;
        let mut rows: Vec<i64> = (0..200).map(|i| t0 - i * 17_000).collect();
        let old = counts(t0, 60, 60, &rows);
        // 70 s later, with new rows (one timestamped before t0 but committed after it).
        rows.extend([t0 + 1_000, t0 + 65_000, t0 - 500]);
        let now = t0 + 70_000;
        let recent = counts(now, 60, 3, &rows);
        let mut merged = merge(&old, &recent, n(60), n(60));
        let mut truth = counts(now, 60, 60, &rows);
        merged.counts.sort_by_key(|c| c.0);
        truth.counts.sort_by_key(|c| c.0);
        assert_eq!(merged, truth);
    }
}
