//! Prometheus metrics: a `prometheus-client` registry per gateway.
//!
//! A registry of its own rather than a process-wide recorder: the gateway must be able to run
//! several instances side by side (in tests, each with its own counts). Labels are
//! low-cardinality: a configured source and the outcome; never an event id. A request that names
//! no configured source (a path no route serves, an unknown source) is counted apart, in
//! `idemgate_refused_requests` by outcome, so no pseudo-source appears beside the real ones.
//!
//! Besides the gateway's own: `idemgate_build_info`, and the process's CPU time, resident
//! memory, open file descriptors and start time (`process_*`, from `/proc/self`), read at each
//! scrape.
//!
//! What the gateway counts lives in [`Metrics`]'s registry; what the store knows (record counts,
//! the Redis tier's answers) is read when scraped and encoded from a registry made for that
//! scrape, so a value the store could not give is left out rather than shown stale.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the claim latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Upper bounds of the request latency histogram, in seconds (a forward waits for its
/// downstream).
const REQUEST_BUCKETS: [f64; 14] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

fn claim_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_BUCKETS)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Refused {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Build {
    version: &'static str,
}

type Latencies = Family<BySource, Histogram, fn() -> Histogram>;

/// What one source's downstream answered last, for the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownstreamSeen {
    /// The HTTP status, when it answered.
    pub status: Option<u16>,
    /// What went wrong, when it failed.
    pub error: Option<String>,
    /// How long it took.
    pub took: Duration,
    /// When (the host's clock: for display only).
    pub at: std::time::SystemTime,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Delivery {
    source: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BySource {
    source: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierResult {
    result: &'static str,
}

/// The gateway's counters, histogram and gauges, registered once.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    deliveries: Family<Delivery, Counter>,
    late: Family<BySource, Counter>,
    refused: Family<Refused, Counter>,
    claim_duration: Latencies,
    request_duration: Latencies,
    forward_duration: Latencies,
    downstream: std::sync::Mutex<std::collections::HashMap<String, DownstreamSeen>>,
    sweeper_runs: Counter,
    sweeper_rows: Counter,
    sweeper_failures: Counter,
    sweeper_backoffs: Counter,
    connections_open: Gauge,
    connections_refused: Counter,
    dispatch_duration: Family<BySource, Histogram, fn() -> Histogram>,
    dispatches: Family<Dispatched, Counter>,
    task_panics: Family<TaskLabel, Counter>,
    tasks_down: Gauge,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabel {
    task: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Dispatched {
    source: String,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: String,
}

/// Upper bounds of the dispatch latency histogram, in seconds (a downstream may be slow).
const DISPATCH_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

fn dispatch_histogram() -> Histogram {
    Histogram::new(DISPATCH_BUCKETS)
}

impl Default for Metrics {
    fn default() -> Self {
        let deliveries = Family::<Delivery, Counter>::default();
        let late = Family::<BySource, Counter>::default();
        let refused = Family::<Refused, Counter>::default();
        let claim_duration = Latencies::new_with_constructor(claim_histogram as fn() -> Histogram);
        let request_duration =
            Latencies::new_with_constructor(request_histogram as fn() -> Histogram);
        let forward_duration =
            Latencies::new_with_constructor(dispatch_histogram as fn() -> Histogram);
        let build = Family::<Build, Gauge>::default();
        build
            .get_or_create(&Build {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        let sweeper_runs = Counter::default();
        let sweeper_rows = Counter::default();
        let sweeper_failures = Counter::default();
        let sweeper_backoffs = Counter::default();
        let connections_open = Gauge::default();
        let connections_refused = Counter::default();
        let dispatch_duration =
            Family::<BySource, Histogram, fn() -> Histogram>::new_with_constructor(
                dispatch_histogram as fn() -> Histogram,
            );
        let dispatches = Family::<Dispatched, Counter>::default();
        let task_panics = Family::<TaskLabel, Counter>::default();
        let tasks_down = Gauge::default();

        let mut registry = Registry::default();
        registry.register(
            "idemgate_task_panics",
            "Panics of the gateway's background tasks (each supervised task is restarted with backoff), by task",
            task_panics.clone(),
        );
        registry.register(
            "idemgate_tasks_down",
            "Supervised background tasks not running now (waiting to be restarted after a panic)",
            tasks_down.clone(),
        );
        registry.register(
            "idemgate_build_info",
            "The running build: its version (always 1)",
            build,
        );
        registry.register_with_unit(
            "idemgate_request_duration",
            "Time from a delivery's (or claim-API call's) arrival to its answer, by source",
            Unit::Seconds,
            request_duration.clone(),
        );
        registry.register_with_unit(
            "idemgate_forward_duration",
            "Forward mode: time the downstream took to answer a forward (or fail), by source",
            Unit::Seconds,
            forward_duration.clone(),
        );
        registry.register(
            "idemgate_refused_requests",
            "Requests that named no configured source (a path no route serves, an unknown source), by outcome",
            refused.clone(),
        );
        registry.register_with_unit(
            "idemgate_dispatch_duration",
            "Inbox mode: time one delivery from the queue took, by source",
            Unit::Seconds,
            dispatch_duration.clone(),
        );
        registry.register(
            "idemgate_dispatches",
            "Inbox mode: deliveries from the queue by source and result (delivered, retry, dead_lettered)",
            dispatches.clone(),
        );
        registry.register(
            "idemgate_deliveries",
            "Deliveries and API claims by source and outcome",
            deliveries.clone(),
        );
        registry.register(
            "idemgate_late_duplicates",
            "Deliveries after their record expired, of events processed before (TTL too short, or a replay)",
            late.clone(),
        );
        registry.register_with_unit(
            "idemgate_claim_duration",
            "Time the store took to answer a claim, by source",
            Unit::Seconds,
            claim_duration.clone(),
        );
        registry.register(
            "idemgate_connections_open",
            "Connections being served",
            connections_open.clone(),
        );
        registry.register(
            "idemgate_connections_refused",
            "Connections refused beyond limits.max_connections",
            connections_refused.clone(),
        );
        registry.register(
            "idemgate_sweeper_runs",
            "Sweeper runs",
            sweeper_runs.clone(),
        );
        registry.register(
            "idemgate_sweeper_rows",
            "Expired records the sweeper deleted",
            sweeper_rows.clone(),
        );
        registry.register(
            "idemgate_sweeper_failures",
            "Sweeper runs that failed",
            sweeper_failures.clone(),
        );
        registry.register(
            "idemgate_sweeper_backoffs",
            "Times the sweeper backed off because claims were slower than their baseline",
            sweeper_backoffs.clone(),
        );
        Self {
            registry,
            deliveries,
            late,
            refused,
            claim_duration,
            request_duration,
            forward_duration,
            downstream: std::sync::Mutex::default(),
            sweeper_runs,
            sweeper_rows,
            sweeper_failures,
            sweeper_backoffs,
            connections_open,
            connections_refused,
            dispatch_duration,
            dispatches,
            task_panics,
            tasks_down,
        }
    }
}

/// One served connection, counted in `idemgate_connections_open` until dropped.
#[derive(Debug)]
pub struct OpenConnection(Gauge);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Live and expired record counts, read from the store when scraped.
#[derive(Debug, Clone, Copy)]
pub struct RowCounts {
    pub live: u64,
    pub expired: u64,
}

/// The Redis tier's answers since start, read from the tier when scraped.
#[derive(Debug, Clone, Copy)]
pub struct TierCounts {
    pub hits: u64,
    pub misses: u64,
    pub errors: u64,
    pub bypassed: u64,
}

/// A latency histogram read back: how many, and estimated quantiles (each the upper bound of the
/// bucket it falls in).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub p50: Duration,
    pub p99: Duration,
}

fn summary(h: Histogram) -> Option<LatencySummary> {
    // The histogram's own encoding is the one public read of its buckets.
    let mut registry = Registry::default();
    registry.register("h", "", h);
    let mut text = String::new();
    encode_registry(&mut text, &registry).ok()?;
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("h_bucket{le=\"") else {
            continue;
        };
        let (le, n) = rest.split_once("\"} ")?;
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().ok()?
        };
        buckets.push((le, n.split_whitespace().next()?.parse().ok()?));
    }
    let count = buckets.last()?.1;
    if count == 0 {
        return None;
    }
    let quantile = |q: f64| {
        let want = (q * count as f64).ceil() as u64;
        let le = buckets
            .iter()
            .find(|(_, n)| *n >= want)
            .map_or(f64::INFINITY, |b| b.0);
        // Above the last bound: say the last bound (the histogram knows no more).
        let bounded = if le.is_finite() {
            le
        } else {
            buckets
                .iter()
                .rev()
                .find(|b| b.0.is_finite())
                .map_or(0.0, |b| b.0)
        };
        Duration::from_secs_f64(bounded)
    };
    Some(LatencySummary {
        count,
        p50: quantile(0.5),
        p99: quantile(0.99),
    })
}

/// What the store reported at this scrape; `None` where it could not tell.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub rows: Option<RowCounts>,
    pub tier: Option<TierCounts>,
    /// Each inbox source's queue (inbox mode).
    pub inbox: Vec<idemgate_core::inbox::InboxStats>,
    /// The embedded store's clock against the host's wall clock (ms), where it keeps its own.
    pub clock_divergence_ms: Option<i64>,
    /// Each broker destination's latest window audit: the source, the broker's dedup window
    /// (`None`: none, or not known) and the exposure it is judged against.
    pub windows: Vec<WindowSeen>,
    /// `[history.archive]`: whether the last retention run was held back (`None`: no archive),
    /// and the rows this process exported so far.
    pub archive: Option<ArchiveSeen>,
}

/// The history archive, as `/metrics` shows it.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveSeen {
    pub holding: bool,
    pub exported_rows: u64,
}

/// A broker destination's window audit, as `/metrics` shows it.
#[derive(Debug, Clone)]
pub struct WindowSeen {
    pub source: String,
    pub window: Option<Duration>,
    pub exposure: Duration,
    /// Whether the audit finds it short, not known, or the destination broken (what `/healthz`
    /// calls degraded).
    pub degraded: bool,
}

impl Metrics {
    /// Counts one delivery (or API claim) with its outcome.
    pub fn delivery(&self, source: &str, outcome: &'static str) {
        self.deliveries
            .get_or_create(&Delivery {
                source: source.to_owned(),
                outcome,
            })
            .inc();
    }

    /// Counts one late duplicate (a delivery after its record expired, of an event processed
    /// before).
    pub fn late_duplicate(&self, source: &str) {
        self.late.get_or_create(&by_source(source)).inc();
    }

    /// How many late duplicates `source` had (for tests and logs).
    pub fn late_duplicates(&self, source: &str) -> u64 {
        self.late.get_or_create(&by_source(source)).get()
    }

    /// Records how long one claim took in the store.
    /// `idemgate_late_duplicates` of `source`, as `/metrics` shows it (0 when none was counted,
    /// and no series is created for it).
    pub fn late_duplicates_seen(&self, source: &str) -> u64 {
        self.late.get(&by_source(source)).map_or(0, |c| c.get())
    }

    /// `idemgate_deliveries` of `source` by outcome, as `/metrics` shows them: only the
    /// outcomes counted (no series is created for the others).
    pub fn delivery_counts(&self, source: &str) -> Vec<(&'static str, u64)> {
        crate::Outcome::ALL
            .iter()
            .filter_map(|o| {
                let labels = Delivery {
                    source: source.to_owned(),
                    outcome: o.as_str(),
                };
                self.deliveries.get(&labels).map(|c| (o.as_str(), c.get()))
            })
            .collect()
    }

    /// `idemgate_sweeper_runs`, `idemgate_sweeper_rows` and `idemgate_sweeper_failures`.
    pub fn sweeper_totals(&self) -> (u64, u64, u64) {
        (
            self.sweeper_runs.get(),
            self.sweeper_rows.get(),
            self.sweeper_failures.get(),
        )
    }

    pub fn claim_latency(&self, source: &str, d: Duration) {
        self.claim_duration
            .get_or_create(&by_source(source))
            .observe(d.as_secs_f64());
    }

    /// How long one request of a configured source took, from arrival to answer.
    pub fn request_latency(&self, source: &str, d: Duration) {
        self.request_duration
            .get_or_create(&by_source(source))
            .observe(d.as_secs_f64());
    }

    /// Counts one request that named no configured source, by its outcome.
    pub fn refused(&self, outcome: &'static str) {
        self.refused.get_or_create(&Refused { outcome }).inc();
    }

    /// Forward mode: how long one forward took, and what the downstream answered.
    pub fn forwarded(&self, source: &str, seen: DownstreamSeen) {
        self.forward_duration
            .get_or_create(&by_source(source))
            .observe(seen.took.as_secs_f64());
        self.note_downstream(source, seen);
    }

    /// Inbox mode: how long one delivery from the queue took, and what the downstream
    /// answered.
    pub fn dispatch_latency(&self, source: &str, seen: DownstreamSeen) {
        self.dispatch_duration
            .get_or_create(&by_source(source))
            .observe(seen.took.as_secs_f64());
        self.note_downstream(source, seen);
    }

    fn note_downstream(&self, source: &str, seen: DownstreamSeen) {
        if let Ok(mut last) = self.downstream.lock() {
            last.insert(source.to_owned(), seen);
        }
    }

    /// What `source`'s downstream answered last (forward or dispatch), since start.
    pub fn downstream(&self, source: &str) -> Option<DownstreamSeen> {
        self.downstream.lock().ok()?.get(source).cloned()
    }

    /// `source`'s requests so far and the share of them answered within `bound` (one of the
    /// request histogram's bucket bounds, or the next above it), from
    /// `idemgate_request_duration_seconds`.
    pub fn request_latency_summary(&self, source: &str) -> Option<LatencySummary> {
        summary(self.request_duration.get(&by_source(source))?.clone())
    }

    /// As [`Metrics::request_latency_summary`], of the downstream: forwards, or deliveries from
    /// the queue.
    pub fn downstream_latency_summary(&self, source: &str) -> Option<LatencySummary> {
        let label = by_source(source);
        let h = self
            .forward_duration
            .get(&label)
            .map(|h| h.clone())
            .or_else(|| self.dispatch_duration.get(&label).map(|h| h.clone()))?;
        summary(h)
    }

    /// Inbox mode: counts one delivery from the queue by its result.
    pub fn dispatched(&self, source: &str, result: &'static str) {
        self.dispatches
            .get_or_create(&Dispatched {
                source: source.to_owned(),
                result,
            })
            .inc();
    }

    /// Inbox mode: how many deliveries of `source` had `result` (for tests and logs).
    pub fn dispatches(&self, source: &str, result: &'static str) -> u64 {
        self.dispatches
            .get_or_create(&Dispatched {
                source: source.to_owned(),
                result,
            })
            .get()
    }

    /// Counts one panic of the background task `task` (`sweeper`, `dispatcher:{source}`, ...).
    pub fn task_panic(&self, task: &str) {
        self.task_panics
            .get_or_create(&TaskLabel {
                task: task.to_owned(),
            })
            .inc();
    }

    /// How many times `task` panicked (for tests and logs).
    pub fn task_panics(&self, task: &str) -> u64 {
        self.task_panics
            .get(&TaskLabel {
                task: task.to_owned(),
            })
            .map_or(0, |c| c.get())
    }

    /// Sets how many supervised tasks wait to be restarted.
    pub fn tasks_down(&self, down: usize) {
        self.tasks_down.set(i64::try_from(down).unwrap_or(i64::MAX));
    }

    /// Counts a connection being served until the guard is dropped.
    pub fn connection_opened(&self) -> OpenConnection {
        self.connections_open.inc();
        OpenConnection(self.connections_open.clone())
    }

    /// Counts a connection refused beyond `limits.max_connections`.
    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    /// Counts the times a sweeper run backed off for slow claims.
    pub fn sweep_backoffs(&self, backoffs: u64) {
        self.sweeper_backoffs.inc_by(backoffs);
    }

    /// Records one sweeper run: the rows it deleted, or `None` when it failed.
    pub fn sweep_run(&self, rows: Option<u64>) {
        self.sweeper_runs.inc();
        match rows {
            Some(rows) => self.sweeper_rows.inc_by(rows),
            None => self.sweeper_failures.inc(),
        };
    }

    /// How many deliveries of `source` had `outcome` (for tests and logs).
    pub fn deliveries(&self, source: &str, outcome: &'static str) -> u64 {
        self.deliveries
            .get_or_create(&Delivery {
                source: source.to_owned(),
                outcome,
            })
            .get()
    }

    /// The OpenMetrics text exposition ([`CONTENT_TYPE`]): the gateway's own metrics, then what
    /// the store reported at this scrape.
    pub fn render(&self, scrape: Scrape) -> String {
        let mut read = Registry::default();
        if let Some(rows) = scrape.rows {
            read.register(
                "idemgate_live_rows",
                "Dedup records not yet expired",
                gauge(rows.live),
            );
            read.register(
                "idemgate_expired_rows",
                "Dedup records expired but not yet swept",
                gauge(rows.expired),
            );
        }
        if let Some(ms) = scrape.clock_divergence_ms {
            let g = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
            g.set(ms as f64 / 1_000.0);
            read.register(
                "idemgate_clock_step_seconds",
                "How far the host's wall clock is ahead of the embedded store's own steady clock (negative: behind); it jumps with a wall-clock step, which moves no lease or expiry, and returns towards 0 at 1% of the time that passes",
                g,
            );
        }
        if let Some(tier) = scrape.tier {
            let family = Family::<TierResult, Counter>::default();
            for (result, n) in [
                ("hit", tier.hits),
                ("miss", tier.misses),
                ("error", tier.errors),
                ("bypassed", tier.bypassed),
            ] {
                family.get_or_create(&TierResult { result }).inc_by(n);
            }
            read.register(
                "idemgate_redis_tier",
                "Claims the Redis tier answered (hit), passed to the store (miss), failed on (error) or skipped while Redis was failing (bypassed)",
                family,
            );
        }
        if !scrape.inbox.is_empty() {
            let pending = Family::<SourceLabel, Gauge>::default();
            let in_flight = Family::<SourceLabel, Gauge>::default();
            let dead = Family::<SourceLabel, Gauge>::default();
            let oldest = Family::<SourceLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
            for s in &scrape.inbox {
                let label = SourceLabel {
                    source: s.source.as_str().to_owned(),
                };
                pending.get_or_create(&label).set(saturating(s.pending));
                in_flight.get_or_create(&label).set(saturating(s.in_flight));
                dead.get_or_create(&label).set(saturating(s.dead));
                oldest
                    .get_or_create(&label)
                    .set(s.oldest_pending.map_or(0.0, |d| d.as_secs_f64()));
            }
            read.register(
                "idemgate_inbox_pending",
                "Inbox mode: queued items not taken",
                pending,
            );
            read.register(
                "idemgate_inbox_in_flight",
                "Inbox mode: items being delivered",
                in_flight,
            );
            read.register("idemgate_inbox_dead", "Inbox mode: dead letters", dead);
            read.register(
                "idemgate_inbox_oldest_pending_seconds",
                "Inbox mode: age of the oldest item not yet delivered (the queue lag)",
                oldest,
            );
        }
        if !scrape.windows.is_empty() {
            let window = Family::<SourceLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
            let exposure =
                Family::<SourceLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
            let degraded = Family::<SourceLabel, Gauge>::default();
            for w in &scrape.windows {
                let label = SourceLabel {
                    source: w.source.clone(),
                };
                if let Some(d) = w.window {
                    window.get_or_create(&label).set(d.as_secs_f64());
                }
                exposure.get_or_create(&label).set(w.exposure.as_secs_f64());
                degraded.get_or_create(&label).set(i64::from(w.degraded));
            }
            read.register(
                "idemgate_destination_dedup_window_seconds",
                "A JetStream destination's duplicate_window, as the window audit last read it (absent: RabbitMQ, which keeps none, or not read yet)",
                window,
            );
            read.register(
                "idemgate_destination_exposure_seconds",
                "The longest time after a first publish at which the gateway may publish the same event again, for a source with a broker destination",
                exposure,
            );
            read.register(
                "idemgate_destination_window_degraded",
                "1 when the window audit finds the broker's dedup window shorter than the exposure, not known, or the destination broken (as /healthz says degraded)",
                degraded,
            );
        }
        if let Some(a) = scrape.archive {
            let holding = Gauge::<i64>::default();
            holding.set(i64::from(a.holding));
            read.register(
                "idemgate_history_archive_holding",
                "1 when the last history retention run was held back (the archive unreachable, or its count unlike the database's): history stays in the database past its retention",
                holding,
            );
            let exported = Gauge::<i64>::default();
            exported.set(i64::try_from(a.exported_rows).unwrap_or(i64::MAX));
            read.register(
                "idemgate_history_archive_exported_rows",
                "History rows this process exported into the archive since it started",
                exported,
            );
        }
        crate::process::register_metrics(&mut read);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry)
            .and_then(|()| encode_registry(&mut out, &read))
            .and_then(|()| encode_eof(&mut out));
        out
    }
}

fn by_source(source: &str) -> BySource {
    BySource {
        source: source.to_owned(),
    }
}

fn gauge(value: u64) -> Gauge {
    let gauge = Gauge::default();
    gauge.set(saturating(value));
    gauge
}

fn saturating(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counts_and_what_the_store_reported() {
        let m = Metrics::default();
        m.delivery("stripe", "forwarded");
        m.delivery("stripe", "forwarded");
        m.late_duplicate("stripe");
        m.claim_latency("stripe", Duration::from_micros(700));
        m.request_latency("stripe", Duration::from_millis(3));
        m.request_latency("stripe", Duration::from_millis(40));
        m.refused("not_found");
        m.forwarded(
            "stripe",
            DownstreamSeen {
                status: Some(503),
                error: Some("downstream answered 503".into()),
                took: Duration::from_millis(12),
                at: std::time::SystemTime::now(),
            },
        );
        m.sweep_run(Some(5));
        m.sweep_run(None);
        m.sweep_backoffs(3);
        let open = m.connection_opened();
        let text = m.render(Scrape {
            inbox: Vec::new(),
            rows: Some(RowCounts {
                live: 7,
                expired: 2,
            }),
            tier: Some(TierCounts {
                hits: 3,
                misses: 1,
                errors: 0,
                bypassed: 0,
            }),
            clock_divergence_ms: Some(120_000),
            archive: Some(ArchiveSeen {
                holding: true,
                exported_rows: 12,
            }),
            windows: vec![
                WindowSeen {
                    source: "stripe".to_owned(),
                    window: Some(Duration::from_secs(120)),
                    exposure: Duration::from_secs(3 * 86_400),
                    degraded: true,
                },
                WindowSeen {
                    source: "shop".to_owned(),
                    window: None,
                    exposure: Duration::from_secs(625),
                    degraded: false,
                },
            ],
        });
        for line in [
            "idemgate_destination_dedup_window_seconds{source=\"stripe\"} 120.0",
            "idemgate_destination_exposure_seconds{source=\"stripe\"} 259200.0",
            "idemgate_destination_window_degraded{source=\"stripe\"} 1",
            "idemgate_destination_exposure_seconds{source=\"shop\"} 625.0",
            "idemgate_destination_window_degraded{source=\"shop\"} 0",
            "idemgate_history_archive_holding 1",
            "idemgate_history_archive_exported_rows 12",
            "idemgate_deliveries_total{source=\"stripe\",outcome=\"forwarded\"} 2",
            "idemgate_late_duplicates_total{source=\"stripe\"} 1",
            "idemgate_claim_duration_seconds_count{source=\"stripe\"} 1",
            "idemgate_claim_duration_seconds_bucket{le=\"0.001\",source=\"stripe\"} 1",
            "idemgate_claim_duration_seconds_bucket{le=\"0.0005\",source=\"stripe\"} 0",
            "idemgate_request_duration_seconds_count{source=\"stripe\"} 2",
            "idemgate_refused_requests_total{outcome=\"not_found\"} 1",
            "idemgate_build_info{version=\"0.1.0\"} 1",
            "idemgate_forward_duration_seconds_count{source=\"stripe\"} 1",
            "idemgate_sweeper_runs_total 2",
            "idemgate_sweeper_rows_total 5",
            "idemgate_sweeper_failures_total 1",
            "idemgate_sweeper_backoffs_total 3",
            "idemgate_connections_open 1",
            "idemgate_live_rows 7",
            "idemgate_expired_rows 2",
            "idemgate_redis_tier_total{result=\"hit\"} 3",
            "idemgate_clock_step_seconds 120.0",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(
            !text.contains("idemgate_destination_dedup_window_seconds{source=\"shop\"}"),
            "RabbitMQ has no window to show"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        if cfg!(target_os = "linux") {
            for name in [
                "process_cpu_seconds_total ",
                "process_resident_memory_bytes ",
                "process_open_fds ",
                "process_max_fds ",
                "process_start_time_seconds ",
            ] {
                assert!(
                    text.lines().any(|l| l.starts_with(name)),
                    "no {name:?} in\n{text}"
                );
            }
        }
        let summary = m.request_latency_summary("stripe").unwrap();
        assert_eq!(summary.count, 2);
        assert_eq!(summary.p50, Duration::from_millis(5));
        assert_eq!(summary.p99, Duration::from_millis(50));
        assert!(m.request_latency_summary("other").is_none());
        let seen = m.downstream("stripe").unwrap();
        assert_eq!(seen.status, Some(503));
        assert_eq!(
            m.downstream_latency_summary("stripe").map(|l| l.count),
            Some(1)
        );
        assert!(m.downstream("other").is_none());
        drop(open);
        let text = m.render(Scrape::default());
        assert!(text.contains("idemgate_connections_open 0"), "{text}");
        assert!(!text.contains("idemgate_live_rows"), "{text}");
        assert!(!text.contains("idemgate_redis_tier"), "{text}");
    }
}
