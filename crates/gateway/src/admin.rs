//! `/healthz`, `/metrics`, `/openapi.json`, the fallback, and the background sweeper.

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use idemgate_core::HistoryRetention;
use idemgate_core::sweep::SweepOptions;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::AppState;
use crate::config::Mode;
use crate::error::{ErrorChain, Problem};
use crate::health::Level;
use crate::metrics::{self, Scrape};
use crate::outcome::Outcome;

/// How long a health check waits for the store's lookup and the tier's `PING`: past it the
/// component is down (a store that holds a lookup this long holds claims too).
pub(crate) const PING_WAIT: Duration = Duration::from_secs(1);

/// Why a component gave no answer within [`PING_WAIT`].
pub(crate) fn no_answer() -> String {
    format!("a lookup had no answer within {} ms", PING_WAIT.as_millis())
}

/// The store's lookup, waited for at most [`PING_WAIT`], and its recent writes: a store that
/// answers reads while its writes fail (a full disk) is down too. The error in words.
pub(crate) async fn ping_store(state: &AppState) -> Result<(), String> {
    let read = match tokio::time::timeout(PING_WAIT, state.store.ping()).await {
        Ok(answered) => answered.map_err(|e| ErrorChain(&e).to_string()),
        Err(_) => Err(no_answer()),
    };
    read?;
    match state.dedup.health().failing() {
        Some(failing) => Err(format!("it answers reads, but {failing}")),
        None => Ok(()),
    }
}

/// The tier's `PING` (none without a tier), waited for at most [`PING_WAIT`].
pub(crate) async fn ping_tier(state: &AppState) -> Option<Result<(), String>> {
    tokio::time::timeout(PING_WAIT, state.store.ping_tier())
        .await
        .unwrap_or_else(|_| Some(Err(no_answer())))
}

/// Each component, really touched: the store of record (a lookup), and the Redis tier (a
/// `PING`) when there is one, each waited for at most [`PING_WAIT`]. The store failing is 503;
/// the tier failing is `degraded`, still 200: the gateway serves from the store alone, only
/// slower.
pub(crate) async fn healthz(State(state): State<AppState>) -> Response {
    let started = Instant::now();
    let store = ping_store(&state).await;
    let store_ms = millis(started.elapsed());
    let mut components = vec![Component {
        name: "store",
        engine: Some(state.store.engine()),
        status: if store.is_ok() { "ok" } else { "down" },
        ms: store_ms,
        error: store.as_ref().err().cloned(),
    }];
    let started = Instant::now();
    let tier = ping_tier(&state).await;
    if let Some(tier) = &tier {
        components.push(Component {
            name: "redis-tier",
            engine: None,
            status: if tier.is_ok() { "ok" } else { "down" },
            ms: millis(started.elapsed()),
            error: tier.as_ref().err().cloned(),
        });
    }
    // Inbox mode, judged as the dashboard judges it (`crate::health`): a queue whose oldest item
    // is older than its source's queue_lag is lagging (the TTL no longer covers the sender's
    // retries past that); dead letters and a failing downstream are warnings; a dispatcher that
    // does not run is stopped.
    let mut warned = false;
    if store.is_ok() && state.sources.values().any(|s| s.mode == Mode::Inbox) {
        let started = Instant::now();
        let queues = crate::health::inbox(&state, &state.inbox_stats().await);
        warned |= queues.level != Level::Ok;
        components.push(Component {
            name: "inbox",
            engine: None,
            status: match queues.level {
                Level::Ok => "ok",
                Level::Warn => "warn",
                Level::Bad => "lagging",
            },
            ms: millis(started.elapsed()),
            error: (queues.level != Level::Ok).then_some(queues.why),
        });
        let dispatchers = crate::health::dispatchers(&state);
        warned |= dispatchers.level != Level::Ok;
        components.push(Component {
            name: "dispatchers",
            engine: None,
            status: if dispatchers.level == Level::Ok {
                "ok"
            } else {
                "stopped"
            },
            ms: 0.0,
            error: (dispatchers.level != Level::Ok).then_some(dispatchers.why),
        });
    }
    // The broker destinations' window audits, as the dashboard shows them: a window shorter
    // than its source needs (or not known: the broker did not answer) is degraded, naming the
    // source.
    // The supervised background tasks: one waiting to be restarted after a panic is down, a
    // recent panic a warning.
    let tasks = state.tasks.verdict();
    warned |= tasks.level != Level::Ok;
    components.push(Component {
        name: "tasks",
        engine: None,
        status: match tasks.level {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Bad => "down",
        },
        ms: 0.0,
        error: (tasks.level != Level::Ok).then_some(tasks.why),
    });
    if let Some(archive) = crate::health::archive(&state) {
        warned |= archive.level != Level::Ok;
        components.push(Component {
            name: "archive",
            engine: None,
            status: if archive.level == Level::Ok {
                "ok"
            } else {
                "holding"
            },
            ms: 0.0,
            error: (archive.level != Level::Ok).then_some(archive.why),
        });
    }
    if let Some(windows) = crate::health::destinations(&state) {
        warned |= windows.level != Level::Ok;
        components.push(Component {
            name: "destinations",
            engine: None,
            status: match windows.level {
                Level::Ok => "ok",
                Level::Warn => "warn",
                Level::Bad => "broken",
            },
            ms: 0.0,
            error: (windows.level != Level::Ok).then_some(windows.why),
        });
    }
    if let Err(e) = &store {
        tracing::error!(error = %e, "health check: the store does not answer");
        let mut problem = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Outcome::StoreUnavailable,
            "the store does not answer",
        );
        problem.components = serde_json::to_value(&components).ok();
        let mut response = problem.into_response_with(Outcome::StoreUnavailable);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    let degraded = tier.as_ref().is_some_and(|t| t.is_err()) || warned;
    let (status, outcome) = if degraded {
        ("degraded", Outcome::Degraded)
    } else {
        ("ok", Outcome::Healthy)
    };
    outcome.on(Json(Health {
        status,
        store: state.store.engine(),
        store_ms,
        components,
    })
    .into_response())
}

/// `/livez`: the process answers (nothing else is touched: a store outage must not get a live
/// process restarted).
pub(crate) async fn livez() -> Response {
    Outcome::Live.on(Json(serde_json::json!({ "status": "live" })).into_response())
}

/// `/readyz`: whether this gateway should be sent traffic. Ready when the store answers (a
/// lookup, and its recent writes did not fail), its schema is at least the version this binary
/// needs (a newer one is fine: this binary runs on it during a rolling upgrade, and the check
/// says so), every source's verifier is built (they are, or the gateway would not have started)
/// and every inbox source's dispatcher runs. Otherwise 503, with each check and why.
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let mut checks = Vec::new();
    let started = Instant::now();
    let store = ping_store(&state).await;
    checks.push(Component {
        name: "store",
        engine: Some(state.store.engine()),
        status: if store.is_ok() { "ok" } else { "down" },
        ms: millis(started.elapsed()),
        error: store.err(),
    });
    // A schema older than this binary needs (a restored backup, a migration rolled back) is not
    // ready; a newer one is: every migration is written to be safe for the binaries of the
    // version before it, which run on during a rolling upgrade (docs/operations.md), and taking
    // them out of a load balancer as soon as `migrate` runs would take the whole fleet out.
    let started = Instant::now();
    let schema: Result<Option<String>, String> = match tokio::time::timeout(
        PING_WAIT,
        state.store.schema_version(),
    )
    .await
    {
        Err(_) => Err(no_answer()),
        Ok(Err(e)) => Err(ErrorChain(&e).to_string()),
        Ok(Ok(None)) => Ok(None),
        Ok(Ok(Some((found, known)))) if found == known => Ok(None),
        Ok(Ok(Some((found, known)))) if found > known => Ok(Some(format!(
            "the schema is at version {found}, newer than this binary's {known}: a newer idemgate migrated it, which this one runs on during a rolling upgrade; upgrade it"
        ))),
        Ok(Ok(Some((found, known)))) => Err(format!(
            "the schema is at version {found}, older than this binary's {known}: run idemgate migrate"
        )),
    };
    checks.push(Component {
        name: "schema",
        engine: None,
        status: match &schema {
            Ok(None) => "ok",
            Ok(Some(_)) => "newer",
            Err(_) => "older",
        },
        ms: millis(started.elapsed()),
        error: match schema {
            Ok(note) => note,
            Err(e) => Some(e),
        },
    });
    checks.push(Component {
        name: "verifiers",
        engine: None,
        status: "ok",
        ms: 0.0,
        error: None,
    });
    let dispatchers = crate::health::dispatchers(&state);
    checks.push(Component {
        name: "dispatchers",
        engine: None,
        status: if dispatchers.level == Level::Ok {
            "ok"
        } else {
            "stopped"
        },
        ms: 0.0,
        error: (dispatchers.level != Level::Ok).then_some(dispatchers.why),
    });
    let failed: Vec<&str> = checks
        .iter()
        .filter(|c| !matches!(c.status, "ok" | "newer"))
        .map(|c| c.name)
        .collect();
    if failed.is_empty() {
        return Outcome::Ready
            .on(Json(serde_json::json!({ "status": "ready", "checks": checks })).into_response());
    }
    let mut problem = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        Outcome::NotReady,
        format!("not ready: {}", failed.join(", ")),
    );
    problem.components = serde_json::to_value(&checks).ok();
    let mut response = problem.into_response_with(Outcome::NotReady);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// `/healthz`'s answer.
#[derive(Debug, Serialize)]
struct Health {
    /// `ok`, or `degraded` when a component other than the store is down or warns.
    status: &'static str,
    /// The store's engine (`sqlite`, `postgres+redis`, ...).
    store: &'static str,
    store_ms: f64,
    components: Vec<Component>,
}

/// One component of `/healthz`, really touched.
#[derive(Debug, Serialize)]
struct Component {
    name: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    engine: Option<&'static str>,
    status: &'static str,
    ms: f64,
    error: Option<String>,
}

/// Milliseconds, to the microsecond.
fn millis(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let scrape = Scrape {
        rows: state.row_counts().await,
        tier: state.tier_counts(),
        inbox: match state.read_inbox().await {
            // A store that cannot say is left out, not shown as empty queues.
            Some(counted) => every_inbox_source(&state, counted),
            None => Vec::new(),
        },
        clock_divergence_ms: state.store.clock_divergence_ms(),
        archive: state.archiving.as_ref().map(|a| {
            let s = a.status();
            metrics::ArchiveSeen {
                holding: s.holding.is_some(),
                exported_rows: s.exported_rows,
            }
        }),
        windows: crate::audit::latest(&state)
            .into_iter()
            .map(|(source, audit)| metrics::WindowSeen {
                source,
                window: match &audit.finding {
                    crate::audit::Finding::Window { window, .. } => Some(*window),
                    _ => None,
                },
                exposure: audit.exposure.window,
                degraded: audit.degrades(),
            })
            .collect(),
    };
    let mut response = state.metrics.render(scrape).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(metrics::CONTENT_TYPE),
    );
    Outcome::Metrics.on(response)
}

/// `counted`, with a zero row for each inbox source whose queue holds nothing (the store counts
/// only queues that hold something): every inbox source's gauges are on every scrape, so an
/// empty queue reads 0, not absent.
fn every_inbox_source(
    state: &AppState,
    counted: Vec<idemgate_core::inbox::InboxStats>,
) -> Vec<idemgate_core::inbox::InboxStats> {
    let mut all = counted;
    let mut names: Vec<_> = state
        .sources
        .values()
        .filter(|s| s.mode == Mode::Inbox)
        .map(|s| s.name.clone())
        .collect();
    names.sort();
    for name in names {
        if !all.iter().any(|s| s.source == name) {
            all.push(idemgate_core::inbox::InboxStats {
                source: name,
                pending: 0,
                in_flight: 0,
                dead: 0,
                oldest_pending: None,
                failing: 0,
                last_failure: None,
            });
        }
    }
    all
}

pub(crate) async fn openapi(State(state): State<AppState>) -> Response {
    let mut response = state.openapi.clone().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Outcome::Openapi.on(response)
}

pub(crate) async fn not_found() -> Response {
    crate::error::problem(
        StatusCode::NOT_FOUND,
        Outcome::NotFound,
        "no such route; webhooks go to POST /hooks/{source}",
    )
}

/// History retention, on its own schedule: every `every`, history rows older than `retention`
/// go in bounded batches with a pause between them (PostgreSQL drops whole months in its sweep
/// runs instead). Live dedup records are never touched.
pub(crate) fn spawn_history_retention(
    state: &AppState,
    retention: Duration,
    every: Duration,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<Option<()>> {
    let task = state.clone();
    state
        .tasks
        .supervise("history retention", cancel.clone(), move || {
            history_retention(task.clone(), retention, every, cancel.clone())
        })
}

/// [`spawn_history_retention`]'s task.
async fn history_retention(
    state: AppState,
    retention: Duration,
    every: Duration,
    cancel: CancellationToken,
) {
    const BATCH: std::num::NonZeroU32 = std::num::NonZeroU32::new(5_000).expect("non-zero");
    loop {
        let started = Instant::now();
        let mut rows = 0u64;
        // With an archive, history leaves only once the archive holds it.
        if let Some(archiving) = &state.archiving {
            crate::archiving::run(&state.store, archiving, retention).await;
        }
        while state.archiving.is_none() {
            match state.store.purge_history(retention, BATCH).await {
                Ok(0) => break,
                Ok(n) => rows += n,
                Err(e) => {
                    tracing::warn!(error = %ErrorChain(&e), "history retention run failed");
                    break;
                }
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        if rows > 0 {
            tracing::info!(
                rows,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "history retention run"
            );
        }
        // Dead letters past the longest `dispatch.dead_letter_retention` of the inbox
        // sources (one source's letters are never dropped before their time).
        let dead_retention = state
            .sources
            .values()
            .filter(|s| s.mode == Mode::Inbox)
            .map(|s| s.dispatch.dead_letter_retention)
            .max();
        if let Some(retention) = dead_retention {
            use idemgate_core::inbox::Inbox;
            let mut dead = 0u64;
            loop {
                match state.store.purge_dead_letters(retention, BATCH).await {
                    Ok(0) => break,
                    Ok(n) => dead += n,
                    Err(e) => {
                        tracing::warn!(error = %ErrorChain(&e), "dead-letter retention run failed");
                        break;
                    }
                }
            }
            if dead > 0 {
                tracing::info!(dead, "dead letters past their retention removed");
            }
        }
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// The background sweeper: core's one [`idemgate_core::sweep::every_run`], a run now and every
/// `every` (PostgreSQL maintains its partitions in each run), each logged with its rows, time,
/// backoffs and pauses and counted in `/metrics`, until `cancel` fires. `None` for a store that
/// expires records by itself (Redis).
pub(crate) fn spawn_sweeper(
    state: &AppState,
    every: Duration,
    opts: SweepOptions,
    cancel: CancellationToken,
) -> Option<tokio::task::JoinHandle<Option<()>>> {
    idemgate_core::Capabilities::sweep(&state.store)?;
    let on_run = {
        let state = state.clone();
        move |run: Result<idemgate_core::sweep::SweepReport, idemgate_core::StoreError>| {
            let store = state.store.engine();
            state.dashboard.sweep_run(&run);
            match run {
                Ok(r) => {
                    state.metrics.sweep_run(Some(r.rows));
                    state.metrics.sweep_backoffs(r.backoffs);
                    let elapsed_ms = r.elapsed.as_millis() as u64;
                    let paused_ms = r.paused_for.as_millis() as u64;
                    let partitions = r.partitions_created.len() + r.partitions_dropped.len();
                    // A run that found nothing is routine: a line a minute at info would be noise.
                    if r.rows > 0 || partitions > 0 {
                        tracing::info!(
                            store,
                            rows = r.rows,
                            batches = r.batches,
                            partitions_created = r.partitions_created.len(),
                            partitions_dropped = r.partitions_dropped.len(),
                            backoffs = r.backoffs,
                            paused_ms,
                            elapsed_ms,
                            "sweep run"
                        );
                    } else {
                        tracing::debug!(store, elapsed_ms, "sweep run: nothing expired");
                    }
                }
                Err(e) => {
                    state.metrics.sweep_run(None);
                    tracing::warn!(store, error = %ErrorChain(&e), "sweep run failed");
                }
            }
        }
    };
    let store = state.store.clone();
    Some(state.tasks.supervise("sweeper", cancel.clone(), move || {
        idemgate_core::sweep::every_run(store.clone(), every, opts, cancel.clone(), on_run.clone())
    }))
}
