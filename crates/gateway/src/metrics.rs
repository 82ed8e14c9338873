//! Prometheus metrics, kept in the gateway's state.
//!
//! A small registry of its own rather than the `metrics` facade: the facade records into one
//! process-wide recorder, and the gateway must be able to run several instances side by side (in
//! tests, each with its own counts). Labels are low-cardinality: the configured source (or
//! `unknown`) and the outcome; never an event id.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the claim latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

#[derive(Debug, Default)]
pub struct Metrics {
    deliveries: Mutex<BTreeMap<(String, &'static str), u64>>,
    late: Mutex<BTreeMap<String, u64>>,
    claim_buckets: [AtomicU64; BUCKETS.len()],
    claim_count: AtomicU64,
    claim_sum_micros: AtomicU64,
    sweeper_runs: AtomicU64,
    sweeper_rows: AtomicU64,
    sweeper_failures: AtomicU64,
    connections_open: std::sync::Arc<AtomicU64>,
    connections_refused: AtomicU64,
}

/// One served connection, counted in `idemgate_connections_open` until dropped.
#[derive(Debug)]
pub struct OpenConnection(std::sync::Arc<AtomicU64>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Live and expired record counts, read from the store when scraped.
#[derive(Debug, Clone, Copy)]
pub struct RowCounts {
    pub live: u64,
    pub expired: u64,
}

impl Metrics {
    /// Counts one delivery (or API claim) with its outcome.
    pub fn delivery(&self, source: &str, outcome: &'static str) {
        let mut map = self.deliveries.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry((source.to_owned(), outcome)).or_default() += 1;
    }

    /// Counts one late duplicate (a delivery after its record expired, of an event processed
    /// before).
    pub fn late_duplicate(&self, source: &str) {
        let mut map = self.late.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(source.to_owned()).or_default() += 1;
    }

    /// How many late duplicates `source` had (for tests and logs).
    pub fn late_duplicates(&self, source: &str) -> u64 {
        let map = self.late.lock().unwrap_or_else(|p| p.into_inner());
        map.get(source).copied().unwrap_or(0)
    }

    /// Records how long one claim took in the store.
    pub fn claim_latency(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (bound, bucket) in BUCKETS.iter().zip(&self.claim_buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.claim_count.fetch_add(1, Ordering::Relaxed);
        self.claim_sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// Counts a connection being served until the guard is dropped.
    pub fn connection_opened(&self) -> OpenConnection {
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(self.connections_open.clone())
    }

    /// Counts a connection refused beyond `limits.max_connections`.
    pub fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Records one sweeper run.
    pub fn sweep_run(&self, rows: Option<u64>) {
        self.sweeper_runs.fetch_add(1, Ordering::Relaxed);
        match rows {
            Some(rows) => self.sweeper_rows.fetch_add(rows, Ordering::Relaxed),
            None => self.sweeper_failures.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// How many deliveries of `source` had `outcome` (for tests and logs).
    pub fn deliveries(&self, source: &str, outcome: &str) -> u64 {
        let map = self.deliveries.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .filter(|((s, o), _)| s == source && *o == outcome)
            .map(|(_, n)| *n)
            .sum()
    }

    /// The Prometheus text exposition.
    pub fn render(&self, rows: Option<RowCounts>) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP idemgate_deliveries_total Deliveries and API claims by source and outcome.\n",
        );
        out.push_str("# TYPE idemgate_deliveries_total counter\n");
        {
            let map = self.deliveries.lock().unwrap_or_else(|p| p.into_inner());
            for ((source, outcome), n) in map.iter() {
                let _ = writeln!(
                    out,
                    "idemgate_deliveries_total{{source=\"{}\",outcome=\"{outcome}\"}} {n}",
                    escape(source)
                );
            }
        }
        out.push_str("# HELP idemgate_late_duplicates_total Deliveries after their record expired, of events processed before (TTL too short, or a replay).\n");
        out.push_str("# TYPE idemgate_late_duplicates_total counter\n");
        {
            let map = self.late.lock().unwrap_or_else(|p| p.into_inner());
            for (source, n) in map.iter() {
                let _ = writeln!(
                    out,
                    "idemgate_late_duplicates_total{{source=\"{}\"}} {n}",
                    escape(source)
                );
            }
        }
        out.push_str(
            "# HELP idemgate_claim_duration_seconds Time the store took to answer a claim.\n",
        );
        out.push_str("# TYPE idemgate_claim_duration_seconds histogram\n");
        for (bound, bucket) in BUCKETS.iter().zip(&self.claim_buckets) {
            let _ = writeln!(
                out,
                "idemgate_claim_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.claim_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "idemgate_claim_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "idemgate_claim_duration_seconds_sum {}",
            self.claim_sum_micros.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "idemgate_claim_duration_seconds_count {count}");
        if let Some(rows) = rows {
            out.push_str("# HELP idemgate_live_rows Dedup records not yet expired.\n");
            out.push_str("# TYPE idemgate_live_rows gauge\n");
            let _ = writeln!(out, "idemgate_live_rows {}", rows.live);
            out.push_str("# HELP idemgate_expired_rows Dedup records expired but not yet swept.\n");
            out.push_str("# TYPE idemgate_expired_rows gauge\n");
            let _ = writeln!(out, "idemgate_expired_rows {}", rows.expired);
        }
        let _ = writeln!(
            out,
            "# HELP idemgate_connections_open Connections being served.\n# TYPE idemgate_connections_open gauge\nidemgate_connections_open {}",
            self.connections_open.load(Ordering::Relaxed)
        );
        for (name, help, value) in [
            (
                "idemgate_connections_refused_total",
                "Connections refused beyond limits.max_connections.",
                &self.connections_refused,
            ),
            (
                "idemgate_sweeper_runs_total",
                "Sweeper runs.",
                &self.sweeper_runs,
            ),
            (
                "idemgate_sweeper_rows_total",
                "Expired records the sweeper deleted.",
                &self.sweeper_rows,
            ),
            (
                "idemgate_sweeper_failures_total",
                "Sweeper runs that failed.",
                &self.sweeper_failures,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        out
    }
}

/// Escapes a label value (source names are `[a-z0-9._-]`, but be safe).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
