//! The gateway's background tasks, supervised: the heartbeat, the sweeper, history retention,
//! the window audits and one dispatcher per inbox source each run under [`Tasks::supervise`],
//! which restarts a task that panicked (with backoff: 500 ms, doubling to 30 s, back to 500 ms
//! once a run lasted a minute), logs the panic with its message, counts it in `/metrics`
//! (`idemgate_task_panics_total{task}`, `idemgate_tasks_down`) and shows it on `/healthz` and
//! the dashboard: a task waiting to be restarted is bad, one that panicked in the last
//! [`RECENT`] a warning. Short tasks started on demand (the dashboard's counts) run under
//! [`Tasks::spawn_once`]: a panic is logged and counted, never lost.
//!
//! Every task runs on one [`TaskTracker`], which `serve` closes and waits for when it stops.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::metrics::Metrics;
use crate::verdict::{Level, Verdict};

/// The first wait before a panicked task is restarted; it doubles up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A run at least this long resets the backoff: the next panic is a new one, not a crash loop.
const STEADY: Duration = Duration::from_secs(60);
/// How long a panic is shown as a warning after the task was restarted.
pub(crate) const RECENT: Duration = Duration::from_secs(15 * 60);

/// The supervised tasks and what became of them. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Tasks {
    tracker: TaskTracker,
    table: Arc<Mutex<BTreeMap<String, Record>>>,
    metrics: Arc<Metrics>,
}

/// One task's standing.
#[derive(Debug, Clone, Default)]
struct Record {
    /// Supervised and running now (a task started once is never in the table while it runs).
    running: bool,
    /// Supervised, panicked, and waiting this long from `since` to be restarted.
    restart: Option<(Instant, Duration)>,
    panics: u64,
    /// When it last panicked, and the panic's message.
    last: Option<(Instant, String)>,
}

impl Tasks {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            tracker: TaskTracker::new(),
            table: Arc::default(),
            metrics,
        }
    }

    /// Runs what `make` returns, as task `name`, until it ends or `cancel` fires: each time it
    /// panics, the panic is logged, counted and shown, and after a backoff a new run is made
    /// (unless `cancel` fired meanwhile). The handle answers the output of the run that ended,
    /// or `None` when cancelled while waiting to restart.
    pub(crate) fn supervise<T, F, Fut>(
        &self,
        name: impl Into<String>,
        cancel: CancellationToken,
        mut make: F,
    ) -> JoinHandle<Option<T>>
    where
        T: Send + 'static,
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let name = name.into();
        let this = self.clone();
        self.tracker.spawn(async move {
            let mut backoff = BACKOFF_MIN;
            let mut restarting = false;
            loop {
                if restarting && cancel.is_cancelled() {
                    // Cancelled while waiting to restart: no new run.
                    this.update(&name, |r| {
                        r.running = false;
                        r.restart = None;
                    });
                    return None;
                }
                this.update(&name, |r| {
                    r.running = true;
                    r.restart = None;
                });
                let started = Instant::now();
                let ended = this.tracker.spawn(make()).await;
                let why = match ended {
                    Ok(output) => {
                        this.update(&name, |r| r.running = false);
                        return Some(output);
                    }
                    Err(e) if e.is_panic() => panic_message(e),
                    // The runtime is shutting down.
                    Err(_) => {
                        this.update(&name, |r| r.running = false);
                        return None;
                    }
                };
                if started.elapsed() >= STEADY {
                    backoff = BACKOFF_MIN;
                }
                this.panicked(&name, &why, Some(backoff));
                tracing::error!(
                    task = %name,
                    panic = %why,
                    restart_in_ms = backoff.as_millis() as u64,
                    "a background task panicked; it is restarted"
                );
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => {
                        this.update(&name, |r| {
                            r.running = false;
                            r.restart = None;
                        });
                        return None;
                    }
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                restarting = true;
            }
        })
    }

    /// Runs `task` once as `name`; a panic is logged, counted and shown as a recent one.
    pub(crate) fn spawn_once<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let this = self.clone();
        let run = self.tracker.spawn(task);
        self.tracker.spawn(async move {
            if let Err(e) = run.await {
                this.reap(&name, e);
            }
        });
    }

    /// What a task that ended with `e` left to say: a panic is logged, counted and shown as a
    /// recent one (for the tasks a caller joins itself: an inbox source's deliveries).
    pub(crate) fn reap(&self, name: &str, e: JoinError) {
        if !e.is_panic() {
            return;
        }
        let why = panic_message(e);
        self.panicked(name, &why, None);
        tracing::error!(task = %name, panic = %why, "a background task panicked");
    }

    /// Whether the supervised task `name` runs now (started, not ended, not waiting to be
    /// restarted).
    pub(crate) fn running(&self, name: &str) -> bool {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .is_some_and(|r| r.running)
    }

    /// Stops taking new tasks and waits for those running to end.
    pub(crate) async fn close(&self) {
        self.tracker.close();
        self.tracker.wait().await;
    }

    fn panicked(&self, name: &str, why: &str, restart: Option<Duration>) {
        let now = Instant::now();
        self.update(name, |r| {
            r.panics += 1;
            r.last = Some((now, why.to_owned()));
            if let Some(backoff) = restart {
                r.running = false;
                r.restart = Some((now, backoff));
            }
        });
        self.metrics.task_panic(name);
    }

    fn update(&self, name: &str, change: impl FnOnce(&mut Record)) {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        change(table.entry(name.to_owned()).or_default());
        let down = table.values().filter(|r| r.restart.is_some()).count();
        drop(table);
        self.metrics.tasks_down(down);
    }

    /// How the background tasks stand: a task waiting to be restarted is bad, a panic in the
    /// last [`RECENT`] a warning (naming the task and its panic), otherwise ok.
    pub(crate) fn verdict(&self) -> Verdict {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let mut down = Vec::new();
        let mut recent = Vec::new();
        let mut panics = 0;
        for (name, r) in table.iter() {
            panics += r.panics;
            let Some((at, why)) = &r.last else { continue };
            if let Some((since, backoff)) = r.restart {
                let left = backoff.saturating_sub(since.elapsed());
                down.push(format!(
                    "{name} panicked ({why}) and is restarted in {} ms",
                    left.as_millis()
                ));
            } else if at.elapsed() < RECENT {
                recent.push(format!(
                    "{name} panicked {} s ago ({why}){}",
                    at.elapsed().as_secs(),
                    if r.running { " and was restarted" } else { "" }
                ));
            }
        }
        let running = table.values().filter(|r| r.running).count();
        if !down.is_empty() {
            down.extend(recent);
            Verdict {
                level: Level::Bad,
                why: down.join("; "),
            }
        } else if !recent.is_empty() {
            Verdict {
                level: Level::Warn,
                why: recent.join("; "),
            }
        } else {
            Verdict {
                level: Level::Ok,
                why: format!(
                    "{running} background task{} running; {panics} panic{} since start",
                    if running == 1 { "" } else { "s" },
                    if panics == 1 { "" } else { "s" }
                ),
            }
        }
    }
}

/// The message a panic was raised with (`panic!("...")`'s text), or a word saying it had none.
fn panic_message(e: JoinError) -> String {
    let payload = e.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_panicking_task_is_restarted_counted_and_shown() {
        let metrics = Arc::new(Metrics::default());
        let tasks = Tasks::new(metrics.clone());
        let cancel = CancellationToken::new();
        let runs = Arc::new(AtomicU32::new(0));
        let handle = tasks.supervise("sweeper", cancel.clone(), {
            let runs = runs.clone();
            move || {
                let runs = runs.clone();
                async move {
                    let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(n > 2, "run {n} fails");
                    n
                }
            }
        });
        // Two panics, restarted after 500 ms then 1 s; the third run ends with its output.
        assert_eq!(handle.await.unwrap(), Some(3));
        assert_eq!(metrics.task_panics("sweeper"), 2);
        let v = tasks.verdict();
        assert_eq!(v.level, Level::Warn, "{}", v.why);
        assert!(v.why.contains("sweeper panicked"), "{}", v.why);
        assert!(v.why.contains("run 2 fails"), "{}", v.why);
        tokio::time::advance(RECENT).await;
        assert_eq!(tasks.verdict().level, Level::Ok);
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_waiting_to_restart_is_bad_and_cancel_stops_it() {
        let metrics = Arc::new(Metrics::default());
        let tasks = Tasks::new(metrics.clone());
        let cancel = CancellationToken::new();
        let handle = tasks.supervise("dispatcher:jobs", cancel.clone(), || async {
            panic!("always");
        });
        while metrics.task_panics("dispatcher:jobs") == 0 {
            tokio::task::yield_now().await;
        }
        let v = tasks.verdict();
        assert_eq!(v.level, Level::Bad, "{}", v.why);
        assert!(
            v.why.contains("dispatcher:jobs panicked (always)"),
            "{}",
            v.why
        );
        assert!(
            metrics
                .render(Default::default())
                .contains("idemgate_tasks_down 1")
        );
        cancel.cancel();
        assert_eq!(handle.await.unwrap(), None::<()>);
        assert_eq!(tasks.verdict().level, Level::Warn);
        tasks.close().await;
    }

    #[tokio::test]
    async fn a_task_run_once_that_panics_is_counted() {
        let metrics = Arc::new(Metrics::default());
        let tasks = Tasks::new(metrics.clone());
        tasks.spawn_once("dashboard advice", async { panic!("boom") });
        tasks.close().await;
        assert_eq!(metrics.task_panics("dashboard advice"), 1);
        assert!(tasks.verdict().why.contains("boom"));
    }
}
