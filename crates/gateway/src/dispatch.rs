//! Inbox mode's dispatcher: delivers each inbox source's queue to its `forward_url`.
//!
//! One task per inbox source takes due items under a lease ([`Inbox::take`]; several gateways on
//! one PostgreSQL share the queue, each item taken by one), at most `dispatch.concurrency` in
//! flight, and delivers each as forward mode does (`Idempotency-Key`, `Idemgate-Attempt`). Then:
//! - a 2xx: [`Inbox::delivered`] (the item goes, history says `completed`, in one step);
//! - a failure with attempts left and the item younger than `dispatch.max_age`:
//!   [`Inbox::retry_later`] after `backoff · 2^(tries-1)` (full jitter, at most `max_backoff`),
//!   never sooner than the downstream's `Retry-After`;
//! - otherwise [`Inbox::dead_letter`].
//!
//! Ages are read off the store's clock (the item's `received_at` against the lease the store
//! granted), never the host's. At shutdown a source stops taking, lets its deliveries in flight
//! finish within `limits.shutdown_grace`, and leaves the rest queued (a lease that lapses, or
//! this instance's next boot, makes them due again).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::HeaderValue;
use idemgate_core::inbox::{Failure, Inbox, Taken};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::config::Mode;
use crate::error::ErrorChain;
use crate::forward::{BodyHeaders, Delivery};
use crate::state::{AppState, Source};

/// The shortest and longest wait between takes that found nothing (a new item wakes the
/// dispatcher at once).
const IDLE_MIN: Duration = Duration::from_millis(20);
const IDLE_MAX: Duration = Duration::from_secs(1);
/// How often queue lag is held against each source's `queue_lag`.
const LAG_CHECK: Duration = Duration::from_secs(60);

/// Starts one dispatcher per inbox source, supervised (a dispatcher that panics is restarted
/// with backoff); each stops when `cancel` fires.
pub(crate) fn spawn(state: &AppState, cancel: &CancellationToken) -> Vec<JoinHandle<Option<()>>> {
    let mut names: Vec<_> = state
        .sources
        .values()
        .filter(|s| s.mode == Mode::Inbox)
        .map(|s| s.name.as_str().to_owned())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let (task, cancel) = (state.clone(), cancel.clone());
            state
                .tasks
                .supervise(format!("dispatcher:{name}"), cancel.clone(), move || {
                    run(task.clone(), name.clone(), cancel.clone())
                })
        })
        .collect()
}

/// One source's dispatcher.
#[tracing::instrument(name = "dispatcher", skip(state, cancel))]
async fn run(state: AppState, source: String, cancel: CancellationToken) {
    let Ok(src) = state.source(&source) else {
        return;
    };
    let d = &src.dispatch;
    let slots = Arc::new(Semaphore::new(d.concurrency.get() as usize));
    let lease = d.item_lease();
    let mut deliveries = JoinSet::new();
    let mut idle = IDLE_MIN;
    let mut lag_checked = Instant::now();
    tracing::info!(
        concurrency = d.concurrency.get(),
        max_attempts = d.max_attempts.get(),
        "dispatching the inbox"
    );
    let reaped = format!("delivery:{source}");
    loop {
        while let Some(done) = deliveries.try_join_next() {
            if let Err(e) = done {
                state.tasks.reap(&reaped, e);
            }
        }
        if cancel.is_cancelled() {
            break;
        }
        #[cfg(test)]
        tests::panic_if_asked(&source);
        if lag_checked.elapsed() >= LAG_CHECK {
            lag_checked = Instant::now();
            warn_on_lag(&state, src).await;
        }
        let free = slots.available_permits();
        let Some(limit) = NonZeroU32::new(u32::try_from(free).unwrap_or(u32::MAX)) else {
            // Every slot is delivering: wait for one to finish.
            tokio::select! {
                () = cancel.cancelled() => break,
                done = deliveries.join_next() => {
                    if let Some(Err(e)) = done {
                        state.tasks.reap(&reaped, e);
                    }
                }
            }
            continue;
        };
        let wakeup = state.inbox_wakeup.notified();
        let took = state
            .store
            .take(&src.name, limit, lease, state.holder.as_ref())
            .await;
        state.dedup.health().note(&took);
        match took {
            Ok(items) if items.is_empty() => {
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = wakeup => idle = IDLE_MIN,
                    () = tokio::time::sleep(idle) => idle = (idle * 2).min(IDLE_MAX),
                }
            }
            Ok(items) => {
                idle = IDLE_MIN;
                for taken in items {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        // Cannot happen (took no more than the free slots); the lease lapses and
                        // the item is taken again.
                        break;
                    };
                    let state = state.clone();
                    let source = source.clone();
                    deliveries.spawn(async move {
                        let _slot = slot;
                        if let Ok(src) = state.source(&source) {
                            deliver(&state, src, taken, lease).await;
                        }
                    });
                }
            }
            Err(e) => {
                tracing::warn!(error = %ErrorChain(&e), "cannot take from the inbox; trying again");
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(IDLE_MAX) => {}
                }
            }
        }
    }
    // A delivery already sent settles itself, as a forward does: its answer or its timeout, then
    // its report. Cut short, its item would be delivered again by the next boot.
    let bound = d.timeout + SETTLE_MARGIN;
    let in_flight = deliveries.len();
    if in_flight > 0 {
        tracing::info!(
            in_flight,
            "stopping: letting the deliveries in flight settle"
        );
    }
    let drained = tokio::time::timeout(bound, async {
        while let Some(done) = deliveries.join_next().await {
            if let Err(e) = done {
                state.tasks.reap(&reaped, e);
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            dropped = deliveries.len(),
            "deliveries outlived their timeout and the margin; their items stay queued"
        );
        deliveries.abort_all();
        while deliveries.join_next().await.is_some() {}
    }
}

/// How long past `dispatch.timeout` a stopping dispatcher waits for its deliveries in flight
/// (their reports to the store).
const SETTLE_MARGIN: Duration = Duration::from_secs(10);

/// Delivers one item and reports how it went.
#[tracing::instrument(name = "dispatch", skip_all, fields(source = %taken.key.source, event_id = %taken.key.event_id, attempt = taken.item.attempt))]
async fn deliver(state: &AppState, src: &Source, taken: Taken, lease: Duration) {
    let Some(destination) = &src.destination else {
        return;
    };
    let d = &src.dispatch;
    // The item's age when the store granted the lease, by the store's clock.
    let age_at_take = taken
        .lease_until
        .since(taken.received_at)
        .saturating_sub(lease);
    let header = |v: Option<&str>| v.and_then(|c| HeaderValue::from_str(c).ok());
    let carried = BodyHeaders {
        content_type: header(taken.queued.content_type.as_deref()),
        content_encoding: header(
            taken
                .queued
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case("content-encoding"))
                .map(|(_, v)| v.as_str()),
        ),
    };
    let started = Instant::now();
    let result = destination
        .send(
            Bytes::from(taken.queued.body.clone()),
            Delivery {
                key: &taken.key,
                attempt: taken.item.attempt,
                body_headers: &carried,
            },
            d.timeout,
        )
        .await;
    state.metrics.dispatch_latency(
        src.name.as_str(),
        crate::metrics::DownstreamSeen {
            status: match &result {
                Ok(sent) => sent.status(),
                Err(failure) => failure.status(),
            },
            error: result.as_ref().err().map(ToString::to_string),
            took: started.elapsed(),
            at: std::time::SystemTime::now(),
        },
    );
    let age = age_at_take + started.elapsed();
    // The report is retried while the store fails, until shortly before the item's lease ends:
    // a delivery whose report was lost is taken again and delivered twice.
    let report_by = started + lease.saturating_sub(d.timeout + Duration::from_secs(1));
    let (report, result) = match result {
        Ok(_) => (
            reported(state, report_by, || {
                state.store.delivered(taken.item.clone())
            })
            .await,
            "delivered",
        ),
        Err(failure) => {
            let retry_after = failure.retry_after();
            let failure = Failure {
                status: failure.status(),
                error: failure.to_string(),
            };
            let max_age = d.max_age.unwrap_or(src.policy.ttl.contract.queue_lag);
            if taken.tries >= d.max_attempts.get() || age >= max_age {
                tracing::warn!(
                    tries = taken.tries,
                    age_s = age.as_secs(),
                    error = %failure.error,
                    "dead-lettered: out of attempts or too old"
                );
                (
                    reported(state, report_by, || {
                        state.store.dead_letter(taken.item.clone(), &failure)
                    })
                    .await,
                    "dead_lettered",
                )
            } else {
                let delay = backoff(d.backoff, d.max_backoff, taken.tries, retry_after);
                tracing::info!(
                    tries = taken.tries,
                    delay_ms = delay.as_millis() as u64,
                    error = %failure.error,
                    "delivery failed; retrying later"
                );
                (
                    reported(state, report_by, || {
                        state.store.retry_later(taken.item.clone(), &failure, delay)
                    })
                    .await,
                    "retry",
                )
            }
        }
    };
    state.metrics.dispatched(src.name.as_str(), result);
    match report {
        Ok(()) => {}
        Err(idemgate_core::StoreError::StaleToken { .. }) => tracing::info!(
            "the item was taken again after its lease lapsed; the newer attempt reports"
        ),
        Err(e) => tracing::warn!(
            error = %ErrorChain(&e),
            "cannot record the delivery's result; the item is taken again when its lease lapses"
        ),
    }
}

/// Runs a report (`delivered`, `retry_later`, `dead_letter`) until the store takes or refuses it,
/// trying again while it fails until `by`; each outcome noted in the store's write health.
async fn reported<F, Fut>(
    state: &AppState,
    by: Instant,
    report: F,
) -> Result<(), idemgate_core::StoreError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), idemgate_core::StoreError>>,
{
    let mut pause = Duration::from_millis(100);
    loop {
        let result = report().await;
        state.dedup.health().note(&result);
        match result {
            Err(idemgate_core::StoreError::Backend { .. }) if Instant::now() + pause < by => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// The delay before attempt `tries + 1`: `first · 2^(tries-1)` at most `max`, with full jitter,
/// and never sooner than the downstream's `Retry-After` (itself at most `max`).
fn backoff(first: Duration, max: Duration, tries: u32, retry_after: Option<Duration>) -> Duration {
    let exp = tries.saturating_sub(1).min(30);
    let cap = first.saturating_mul(1 << exp).min(max);
    let jitter =
        Duration::from_nanos(idemgate_core::machine::nonce() % (cap.as_nanos() as u64).max(1));
    jitter.max(retry_after.unwrap_or_default().min(max))
}

/// Warns when the source's oldest queued item is older than its `queue_lag`: past it, the TTL no
/// longer covers the sender's retries.
async fn warn_on_lag(state: &AppState, src: &Source) {
    for l in state
        .lagging()
        .await
        .iter()
        .filter(|l| l.source == src.name)
    {
        tracing::warn!(
            lag_s = l.lag.as_secs(),
            queue_lag_s = l.margin.as_secs(),
            "the inbox's oldest item is older than the source's queue_lag: the TTL no longer covers the sender's retries"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Sources whose dispatcher panics once, at its next turn: a test's fault.
    static PANIC_ONCE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

    pub(super) fn panic_if_asked(source: &str) {
        let mut asked = PANIC_ONCE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = asked.iter().position(|s| s == source) {
            asked.remove(i);
            drop(asked);
            panic!("a test made the dispatcher of {source} panic");
        }
    }

    async fn get(state: &AppState, path: &str) -> (axum::http::StatusCode, String) {
        use tower::ServiceExt;
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let res = crate::app(state.clone()).oneshot(req).await.unwrap();
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    /// A dispatcher that panics is reported (the log, `/metrics`, `/healthz`'s `tasks`
    /// component) and restarted: the items queued meanwhile are delivered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dispatcher_that_panics_is_reported_and_restarted() {
        use tower::ServiceExt;
        let delivered = Arc::new(AtomicUsize::new(0));
        let downstream = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let delivered = delivered.clone();
                move || {
                    let delivered = delivered.clone();
                    async move {
                        delivered.fetch_add(1, Ordering::SeqCst);
                        axum::http::StatusCode::OK
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, downstream).await.unwrap() });
        let dir = tempfile::tempdir().unwrap();
        let config = crate::Config::from_toml(&format!(
            "[[source]]\nname = \"panicky\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n\
             mode = \"inbox\"\nforward_url = \"{url}\"\n\
             [store]\nkind = \"sqlite\"\npath = {:?}\n",
            dir.path().display().to_string()
        ))
        .unwrap();
        let state = crate::open(&config).await.unwrap();
        PANIC_ONCE.lock().unwrap().push("panicky".to_owned());
        let cancel = CancellationToken::new();
        let dispatchers = spawn(&state, &cancel);

        // The panic: counted, and shown while the dispatcher waits to be restarted.
        let started = Instant::now();
        while state.metrics.task_panics("dispatcher:panicky") == 0 {
            assert!(started.elapsed() < Duration::from_secs(10), "no panic seen");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (_, health) = get(&state, "/healthz").await;
        let health: serde_json::Value = serde_json::from_str(&health).unwrap();
        assert_eq!(health["status"], "degraded", "{health}");
        let tasks = health["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "tasks")
            .unwrap_or_else(|| panic!("no tasks component in {health}"));
        assert_eq!(tasks["status"], "down", "{tasks}");
        let why = tasks["error"].as_str().unwrap();
        assert!(
            why.contains(
                "dispatcher:panicky panicked (a test made the dispatcher of panicky panic)"
            ),
            "{why}"
        );

        // Restarted: an event queued now is delivered.
        let body = r#"{"id": "evt_after_panic", "object": "event"}"#;
        let verifier = crate::verifier(&config.sources[0]).unwrap();
        let mut headers = verifier
            .sign(
                "evt_after_panic",
                std::time::SystemTime::now(),
                body.as_bytes(),
            )
            .unwrap();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let mut req = axum::http::Request::post("/hooks/panicky")
            .body(axum::body::Body::from(body))
            .unwrap();
        *req.headers_mut() = headers;
        let res = crate::app(state.clone()).oneshot(req).await.unwrap();
        assert_eq!(res.status(), axum::http::StatusCode::ACCEPTED);
        let started = Instant::now();
        while delivered.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the restarted dispatcher delivered nothing"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(crate::health::stopped_dispatchers(&state).is_empty());
        let (_, health) = get(&state, "/healthz").await;
        let health: serde_json::Value = serde_json::from_str(&health).unwrap();
        let tasks = health["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "tasks")
            .unwrap();
        assert_eq!(tasks["status"], "warn", "{tasks}");
        assert!(
            tasks["error"]
                .as_str()
                .unwrap()
                .contains("and was restarted"),
            "{tasks}"
        );
        let (_, metrics) = get(&state, "/metrics").await;
        assert!(
            metrics.contains("idemgate_task_panics_total{task=\"dispatcher:panicky\"} 1"),
            "{metrics}"
        );
        assert!(metrics.contains("idemgate_tasks_down 0"), "{metrics}");

        cancel.cancel();
        for d in dispatchers {
            assert_eq!(d.await.unwrap(), Some(()));
        }
    }

    #[test]
    fn backoff_doubles_with_jitter_and_honours_retry_after() {
        let (first, max) = (Duration::from_secs(1), Duration::from_secs(600));
        for tries in 1..=12 {
            let cap = Duration::from_secs(1 << (tries - 1)).min(max);
            for _ in 0..50 {
                assert!(backoff(first, max, tries, None) < cap.max(Duration::from_nanos(1)));
            }
        }
        let d = backoff(first, max, 1, Some(Duration::from_secs(30)));
        assert!(d >= Duration::from_secs(30), "{d:?}");
        let d = backoff(first, max, 1, Some(Duration::from_secs(86_400)));
        assert_eq!(d, max, "Retry-After is held to max_backoff");
    }
}
