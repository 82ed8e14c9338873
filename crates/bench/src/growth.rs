//! The `growth` scenario: the same claim load (idemgate-postgres, batched expiry, distinct new
//! keys) while arrivals go from 0 to N, two ways: TTL-bounded (a short TTL, the store's own
//! background sweeper running, so the dedup table stays near rate x TTL) and never deleted (a
//! TTL of a week, no sweeper). Per step of arrivals: claims/s, p50/p99, live rows, table and index
//! size of the dedup table, and the history table's size (it grows either way: its retention is
//! separate). One chart with both ways.
//!
//! By default (`--maintenance never`) the scenario runs no maintenance at all, as a new store on a
//! server with autovacuum off gets: nothing is analyzed, and the store's plans must hold on
//! their own. `--maintenance auto` (when the server's autovacuum is off) or `always` stands in for
//! autovacuum: `VACUUM (ANALYZE)` of the dedup table and `ANALYZE` of history after the first
//! 10,000 claims and at each step. Without vacuum, deleted rows' space is never reused, so the
//! TTL-bounded table grows on disk as the never-deleted one does.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::ValueEnum;
use idemgate_chart::{Frame, LineChart, LinePanel, Series, XAxis};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};
use idemgate_postgres::{Expiry, PgStore};
use tokio::task::JoinHandle;

use crate::pg::{Maintenance, admin, drop_schema, event_id, with_app_name};
use crate::progress::Progress;
use crate::report::{Histogram, count, mib, ms, table};

/// The never-deleted way's TTL: nothing expires during the run.
const FOREVER: Duration = Duration::from_secs(7 * 86_400);
const LEASE: Duration = Duration::from_secs(60);
/// The first maintenance runs once this many claims are done, then one per step.
const EARLY_ANALYZE: u64 = 10_000;
/// The target: TTL-bounded throughput flat within 10%.
const FLAT_TARGET: f64 = 0.10;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    postgres: crate::pg::Postgres,
    /// Claims per way (distinct new keys), for example 50000000 for a long run.
    #[arg(long, default_value_t = 5_000_000)]
    arrivals: u64,
    /// Arrivals per table row [default: one million from 10 M arrivals up, a tenth of
    /// --arrivals below].
    #[arg(long)]
    step: Option<u64>,
    /// Concurrent callers.
    #[arg(long, default_value_t = 64)]
    callers: usize,
    /// The TTL-bounded way's TTL.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// How often the TTL-bounded way's sweeper runs (each run deletes in the store's default
    /// batches of 5000 with 50 ms pauses until nothing expired is left).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    sweep_every: Duration,
    /// Whether the scenario stands in for autovacuum (VACUUM ANALYZE of the dedup table, ANALYZE
    /// of history, after 10,000 claims and at each step): `auto` when the server's autovacuum is
    /// off. The default runs none, as a new store on a server without autovacuum gets.
    #[arg(long, value_enum, default_value = "never")]
    maintenance: Maintenance,
    /// Which ways to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "ttl,forever")]
    ways: Vec<Way>,
    /// Where the chart goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Way {
    /// Short TTL, swept.
    Ttl,
    /// Long TTL, never swept.
    Forever,
}

impl Way {
    fn name(self) -> &'static str {
        match self {
            Self::Ttl => "ttl",
            Self::Forever => "forever",
        }
    }

    /// For the chart's legend.
    fn short(self, args: &Args) -> String {
        match self {
            Self::Ttl => format!("TTL-bounded ({})", humantime::format_duration(args.ttl)),
            Self::Forever => "never deleted".to_owned(),
        }
    }

    fn label(self, args: &Args) -> String {
        match self {
            Self::Ttl => format!(
                "TTL-bounded ({}, swept every {})",
                humantime::format_duration(args.ttl),
                humantime::format_duration(args.sweep_every)
            ),
            Self::Forever => "never deleted".to_owned(),
        }
    }
}

/// One row of a way's table: the arrivals up to `upto`.
#[derive(Debug, Clone)]
struct Step {
    upto: u64,
    per_sec: f64,
    p50: Duration,
    p99: Duration,
    sizes: Sizes,
}

/// The dedup table's estimated live rows, heap and index bytes; history's bytes (all partitions,
/// indexes included).
#[derive(Debug, Clone, Copy, Default)]
struct Sizes {
    live: i64,
    table: i64,
    indexes: i64,
    history: i64,
}

/// What the callers share.
#[derive(Debug)]
struct Shared {
    next: AtomicU64,
    done: AtomicU64,
    failed: AtomicBool,
    /// Latencies by the step of the claim's arrival number.
    latencies: Vec<Histogram>,
    /// When the completed count reached each step's end.
    ends: Mutex<Vec<Option<Instant>>>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.arrivals > 0, "--arrivals must be at least 1");
    anyhow::ensure!(args.callers > 0, "--callers must be at least 1");
    let step = args
        .step
        .unwrap_or(if args.arrivals >= 10_000_000 {
            1_000_000
        } else {
            args.arrivals / 10
        })
        .max(1);
    let admin = admin(&args.postgres.url).await?;
    let (autovacuum, stand_in) = args.maintenance.resolve(&admin).await?;
    let plan_cache: String = admin.query_one("SHOW plan_cache_mode", &[]).await?.get(0);
    let tag = std::process::id();
    let mut results = Vec::new();
    for &way in &args.ways {
        let schema = format!("bench_growth_{}_{tag}", way.name());
        let result = tokio::select! {
            r = run_way(&args, way, &schema, step, stand_in) => r,
            e = crate::pg::interrupted() => Err(e),
        };
        let dropped = drop_schema(&admin, &schema).await;
        results.push((way, result?));
        dropped?;
    }

    println!(
        "\nClaims on distinct new keys (idemgate-postgres, batched expiry), {} callers, {} arrivals per way, one row per {} arrivals:",
        args.callers,
        count(args.arrivals),
        count(step)
    );
    println!(
        "Each way on a fresh schema, the server's own settings: autovacuum {autovacuum}, plan_cache_mode {plan_cache} (idemgate's sessions ask for force_generic_plan); {}.",
        if stand_in {
            "the scenario ran VACUUM (ANALYZE) on the dedup table and ANALYZE on history after 10,000 claims and at each step"
        } else {
            "the scenario ran no maintenance of its own"
        }
    );
    for (way, steps) in &results {
        println!("\n{}:\n", way.label(&args));
        let rows: Vec<Vec<String>> = steps
            .iter()
            .map(|s| {
                vec![
                    count(s.upto),
                    format!("{:.0}", s.per_sec),
                    ms(s.p50),
                    ms(s.p99),
                    s.sizes.live.to_string(),
                    mib(s.sizes.table),
                    mib(s.sizes.indexes),
                    mib(s.sizes.history),
                ]
            })
            .collect();
        print!(
            "{}",
            table(
                &[
                    "arrivals",
                    "claims/s",
                    "p50 ms",
                    "p99 ms",
                    "live rows (est.)",
                    "dedup table MiB",
                    "dedup indexes MiB",
                    "history MiB",
                ],
                &rows
            )
        );
    }
    println!();
    for (way, steps) in &results {
        let rates: Vec<f64> = steps.iter().map(|s| s.per_sec).collect();
        let verdict = match (way, flatness(&rates)) {
            (_, None) => "too few steps to judge (need three or more)".to_owned(),
            (Way::Ttl, Some(f)) => format!(
                "{}; target: flat within {:.0}%: {}",
                f.describe(),
                FLAT_TARGET * 100.0,
                if f.spread() <= FLAT_TARGET {
                    "met"
                } else {
                    "missed"
                }
            ),
            (Way::Forever, Some(f)) => format!("{} (no target)", f.describe()),
        };
        println!("{}: {verdict}", way.label(&args));
    }

    std::fs::create_dir_all(&args.out)?;
    let chart = args.out.join("growth.svg");
    let longest = results
        .iter()
        .max_by_key(|(_, s)| s.len())
        .map(|(_, s)| s.iter().map(|s| count(s.upto)).collect::<Vec<_>>())
        .unwrap_or_default();
    let series = |f: fn(&Step) -> f64| -> Vec<Series> {
        results
            .iter()
            .map(|(way, steps)| Series::new(way.short(&args), steps.iter().map(f)))
            .collect()
    };
    std::fs::write(
        &chart,
        LineChart::new(
            Frame::new(
                "growth",
                &format!(
                    "Claims as arrivals grow: {} callers, idemgate-postgres batched",
                    args.callers
                ),
            ),
            XAxis::Categories(longest),
            "arrivals",
        )
        .panel(LinePanel::new("claims/s (per step)").all_series(series(|s| s.per_sec)))
        .panel(LinePanel::new("p99 ms").all_series(series(|s| s.p99.as_secs_f64() * 1000.0)))
        .panel(
            LinePanel::new("dedup table + indexes, MiB").all_series(series(|s| {
                (s.sizes.table + s.sizes.indexes) as f64 / 1_048_576.0
            })),
        )
        .render(),
    )?;
    println!("\nchart: {}", chart.display());
    Ok(())
}

async fn run_way(
    args: &Args,
    way: Way,
    schema: &str,
    step: u64,
    stand_in: bool,
) -> anyhow::Result<Vec<Step>> {
    let url = with_app_name(&args.postgres.url, "idemgate-bench-growth");
    let store = crate::pg::store(&url, schema, Expiry::batched()).await?;
    let admin = admin(&args.postgres.url).await?;
    let (ttl, sweeper) = match way {
        Way::Ttl => (
            args.ttl,
            Some(Sweeper::start(store.clone(), args.sweep_every)),
        ),
        Way::Forever => (FOREVER, None),
    };
    let total = args.arrivals;
    let steps = usize::try_from(total.div_ceil(step))?;
    let shared = Arc::new(Shared {
        next: AtomicU64::new(0),
        done: AtomicU64::new(0),
        failed: AtomicBool::new(false),
        latencies: (0..steps).map(|_| Histogram::new()).collect(),
        ends: Mutex::new(vec![None; steps]),
    });
    let progress = Progress::counter(format!("growth, {}", way.label(args)), total, "claims");
    let started = Instant::now();
    let callers: Vec<JoinHandle<anyhow::Result<()>>> = (0..args.callers)
        .map(|_| {
            let (store, shared) = (store.clone(), shared.clone());
            tokio::spawn(async move {
                let r = caller(&store, &shared, total, step, ttl).await;
                if r.is_err() {
                    shared.failed.store(true, Ordering::Relaxed);
                }
                r
            })
        })
        .collect();

    // VACUUM runs alone (it cannot share a multi-statement string).
    let analyze = || async {
        if stand_in {
            for sql in [
                format!("VACUUM (ANALYZE) {schema}.dedup"),
                format!("ANALYZE {schema}.history"),
            ] {
                admin
                    .batch_execute(&sql)
                    .await
                    .with_context(|| format!("running {sql}"))?;
            }
        }
        Ok::<_, anyhow::Error>(())
    };
    let mut sizes = vec![Sizes::default(); steps];
    let mut measured = 0;
    let mut analyzed_early = false;
    loop {
        let finished = callers.iter().all(JoinHandle::is_finished);
        let done = shared.done.load(Ordering::Relaxed);
        progress.set(done);
        if !analyzed_early && done >= EARLY_ANALYZE {
            // The tables are no longer empty: plans made from here on see that.
            analyze().await?;
            analyzed_early = true;
        }
        while measured < steps && lock(&shared.ends)[measured].is_some() {
            analyze().await?;
            sizes[measured] = sizes_of(&admin, schema).await?;
            let s = sizes[measured];
            progress.note(
                done,
                &format!(
                    "| {} arrivals: {} live rows, dedup {} + {} MiB",
                    count(((measured as u64 + 1) * step).min(total)),
                    s.live,
                    mib(s.table),
                    mib(s.indexes)
                ),
            );
            measured += 1;
        }
        if finished || shared.failed.load(Ordering::Relaxed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for c in callers {
        c.await??;
    }
    progress.finish("");
    if let Some(sweeper) = sweeper {
        sweeper.stop().await?;
    }

    let ends = lock(&shared.ends).clone();
    let mut out = Vec::with_capacity(steps);
    let mut from = started;
    for (k, end) in ends.into_iter().enumerate() {
        let end = end.context("a step never finished")?;
        let first = k as u64 * step;
        let upto = (first + step).min(total);
        let secs = end.saturating_duration_since(from).as_secs_f64().max(1e-9);
        let lat = &shared.latencies[k];
        out.push(Step {
            upto,
            per_sec: (upto - first) as f64 / secs,
            p50: lat.quantile(0.50),
            p99: lat.quantile(0.99),
            sizes: sizes[k],
        });
        from = end;
    }
    Ok(out)
}

/// One caller: claims arrival numbers from the shared counter until `total` are taken.
async fn caller(
    store: &PgStore,
    shared: &Shared,
    total: u64,
    step: u64,
    ttl: Duration,
) -> anyhow::Result<()> {
    loop {
        let n = shared.next.fetch_add(1, Ordering::Relaxed);
        if n >= total || shared.failed.load(Ordering::Relaxed) {
            return Ok(());
        }
        let req = ClaimRequest::new(Key::parse("bench", &event_id(n))?, LEASE, ttl);
        let t = Instant::now();
        match store.claim(req).await? {
            ClaimOutcome::Claimed { .. } => {}
            other => anyhow::bail!("a claim of a new key answered {other:?}"),
        }
        shared.latencies[(n / step) as usize].record(t.elapsed());
        let done = shared.done.fetch_add(1, Ordering::Relaxed) + 1;
        if done.is_multiple_of(step) || done == total {
            lock(&shared.ends)[(done.div_ceil(step) - 1) as usize] = Some(Instant::now());
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn sizes_of(admin: &tokio_postgres::Client, schema: &str) -> anyhow::Result<Sizes> {
    let row = admin
        .query_one(
            "SELECT coalesce((SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = x.d), 0),
                    pg_table_size(x.d), pg_indexes_size(x.d),
                    (SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint
                       FROM pg_inherits i WHERE i.inhparent = x.h)
               FROM (SELECT ($1 || '.dedup')::regclass AS d, ($1 || '.history')::regclass AS h) x",
            &[&schema],
        )
        .await
        .context("reading table sizes")?;
    Ok(Sizes {
        live: row.get(0),
        table: row.get(1),
        indexes: row.get(2),
        history: row.get(3),
    })
}

/// The one background sweeper ([`idemgate_core::sweep::spawn`]) on the store, stoppable.
struct Sweeper {
    handle: JoinHandle<()>,
    stop: Box<dyn FnOnce() + Send>,
}

impl Sweeper {
    fn start(store: PgStore, every: Duration) -> Self {
        let cancel = tokio_util::sync::CancellationToken::new();
        let opts = store.sweep_options();
        let handle = idemgate_core::sweep::spawn(store, every, opts, cancel.clone(), |run| {
            if let Err(e) = run {
                eprintln!("sweep run failed: {e}");
            }
        });
        Self {
            handle,
            stop: Box::new(move || cancel.cancel()),
        }
    }

    async fn stop(self) -> anyhow::Result<()> {
        (self.stop)();
        self.handle.await.context("the sweeper task failed")
    }
}

/// How flat a run of per-step rates is, judged after the first step (which holds the warm-up
/// and, TTL-bounded, the table filling up to rate x TTL).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Flatness {
    min: f64,
    max: f64,
}

impl Flatness {
    /// `1 - min/max`: 0 is perfectly flat; "flat within 10%" is a spread of at most 0.10.
    fn spread(self) -> f64 {
        1.0 - self.min / self.max
    }

    fn describe(self) -> String {
        format!(
            "per-step claims/s after the first step from {:.0} to {:.0}: min/max {:.3}, spread {:.1}%",
            self.min,
            self.max,
            self.min / self.max,
            self.spread() * 100.0
        )
    }
}

/// `None` with fewer than two steps after the first.
fn flatness(rates: &[f64]) -> Option<Flatness> {
    let rest = rates.get(1..).filter(|r| r.len() >= 2)?;
    Some(Flatness {
        min: rest.iter().copied().fold(f64::INFINITY, f64::min),
        max: rest.iter().copied().fold(0.0, f64::max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flatness_leaves_out_the_first_step() {
        let f = flatness(&[5_000.0, 10_000.0, 9_500.0, 9_000.0]).unwrap();
        assert_eq!((f.min, f.max), (9_000.0, 10_000.0));
        assert!((f.spread() - 0.10).abs() < 1e-12);
        assert!(f.spread() <= FLAT_TARGET + 1e-12);
        assert!(flatness(&[1.0, 2.0]).is_none());
        assert!(flatness(&[]).is_none());
        let steep = flatness(&[1.0, 100.0, 80.0]).unwrap();
        assert!(steep.spread() > FLAT_TARGET);
    }
}
