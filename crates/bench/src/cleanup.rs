//! The `cleanup` scenario: a dedup table holding N expired rows under a steady claim load,
//! cleared three ways, each in a fresh schema:
//!
//! - one unbounded `DELETE FROM dedup WHERE expires_at < now()` (batched-mode schema);
//! - idemgate's batched sweeper: one `Sweep::sweep_run` of the `PgStore` with the store's default
//!   batch (5000) and pause (50 ms), until a batch comes back short (batched-mode schema), paced
//!   adaptively (the default: it backs off while the load's claims are slower than their
//!   baseline) or, as `fixed`, always at that batch and pause;
//! - partition drop: one `sweep_run` of a partitioned-mode store (default width, one day), whose
//!   partition maintenance drops every dedup partition whose upper bound has passed.
//!
//! The expired rows are loaded with SQL in the store's own row format (`done` records, expiry in
//! the past by the database's clock, each with its history row); for partition drop they go into the previous day's
//! partition, created with the store's naming, so `drop_expired_partitions` drops it. Autovacuum
//! is turned off on the dedup tables, so the dead tuples counted are what the cleanup itself left.
//!
//! Each method: load, `CHECKPOINT` (with `--maintenance auto|always`, `VACUUM ANALYZE` first);
//! then the claim load starts, 2 s of warm-up (then, standing in for autovacuum, `ANALYZE` of the
//! tables the load writes to), an idle
//! phase (load only), then the cleanup phase: from the cleanup's start until it ends and at
//! least `--after` seconds, rounded up to whole seconds. Measured: p99 claim latency during
//! cleanup against idle, the lowest one-second throughput during cleanup against the idle mean,
//! the longest lock wait seen (`pg_locks.waitstart` of this scenario's backends, polled every
//! 50 ms), WAL written from the cleanup's start to its end, and dead tuples left right after.

use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::ValueEnum;
use idemgate_chart::{Frame, LineChart, LinePanel, Mark, Series, XAxis};
use idemgate_core::sweep::{Pacing, SweepOptions};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};
use idemgate_postgres::{Expiry, PgStore};
use tokio::task::JoinHandle;

use crate::pg::{Maintenance, admin, drop_schema, event_id, with_app_name};
use crate::progress::Progress;
use crate::report::{Latency, count, mib, ms, table, ticks};

/// The application name of every connection the scenario makes, so the lock poller sees only
/// this scenario's backends.
const APP: &str = "idemgate-bench-cleanup";
const WARMUP: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(50);
/// The load's claims stay live through the run.
const TTL: Duration = Duration::from_secs(3_600);
const LEASE: Duration = Duration::from_secs(60);
/// Rows per INSERT while loading the expired rows.
const LOAD_CHUNK: u64 = 100_000;
/// How long to wait for the store's backends to exit (and flush their counters to
/// `pg_stat_user_tables`) before dead tuples are counted.
const STATS_SETTLE: Duration = Duration::from_secs(10);

/// Targets, from the store issues.
const BATCHED_P99_RATIO: f64 = 1.5;
const BATCHED_LOWEST_TICK: f64 = 0.80;
const DROP_P99_RATIO: f64 = 1.1;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    postgres: crate::pg::Postgres,
    /// Expired rows in the table when cleanup starts.
    #[arg(long, default_value_t = 2_000_000)]
    rows: u64,
    /// Concurrent callers of the steady claim load (distinct new keys).
    #[arg(long, default_value_t = 64)]
    callers: usize,
    /// Seconds of load alone before cleanup starts (after 2 s of warm-up).
    #[arg(long, default_value_t = 10)]
    idle: u64,
    /// Least seconds the cleanup phase lasts (it lasts until the cleanup ends, in whole seconds).
    #[arg(long, default_value_t = 5)]
    after: u64,
    /// Whether the scenario stands in for autovacuum: `VACUUM ANALYZE` of the loaded tables before
    /// the load starts, and `ANALYZE` after the warm-up (autovacuum itself stays off on the dedup
    /// tables). The default is what a store gets from a server with autovacuum off: neither;
    /// `auto` stands in when the server's autovacuum is off.
    #[arg(long, value_enum, default_value = "never")]
    maintenance: Maintenance,
    /// Which methods to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "delete,sweeper,fixed,partitions"
    )]
    methods: Vec<Method>,
    /// The batched sweeper's rows per batch (the store's `sweep_batch`).
    #[arg(long, default_value_t = 5_000)]
    sweep_batch: u32,
    /// The batched sweeper's pause between batches (the store's `sweep_pause`).
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    sweep_pause: Duration,
    /// Where the chart goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Method {
    /// One unbounded DELETE.
    Delete,
    /// idemgate's batched sweeper, paced adaptively (the store's default).
    Sweeper,
    /// idemgate's batched sweeper at a fixed pace (`sweep_pacing = "fixed"`).
    Fixed,
    /// Partition drop.
    Partitions,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Sweeper => "sweeper",
            Self::Fixed => "fixed",
            Self::Partitions => "partitions",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Delete => "one unbounded DELETE",
            Self::Sweeper => "batched sweeper, adaptive",
            Self::Fixed => "batched sweeper, fixed",
            Self::Partitions => "partition drop",
        }
    }

    /// The batched sweepers.
    fn sweeps(self) -> bool {
        matches!(self, Self::Sweeper | Self::Fixed)
    }

    fn expiry(self, args: &Args) -> Expiry {
        match self {
            Self::Delete => Expiry::batched(),
            Self::Sweeper | Self::Fixed => Expiry::Batched {
                batch: NonZeroU32::new(args.sweep_batch).unwrap_or(NonZeroU32::MIN),
                pause: args.sweep_pause,
            },
            Self::Partitions => Expiry::partitioned(),
        }
    }
}

/// `(completed at, latency)` of each claim, times from the run's origin.
type Samples = Vec<(Duration, Duration)>;

/// One method's figures.
#[derive(Debug)]
struct Outcome {
    method: Method,
    /// What the cleanup did, in words.
    detail: String,
    cleanup: Duration,
    phase_secs: u64,
    idle_rate: f64,
    idle: Latency,
    during: Latency,
    /// The lowest one-second count of the cleanup phase.
    lowest_tick: u64,
    /// Every one-second count from the idle phase's start, as a share of the idle mean.
    timeline: Vec<f64>,
    longest_wait: Duration,
    wal: i64,
    wal_beyond_load: i64,
    /// Checkpoints the server began while the cleanup ran (timed or forced by WAL volume).
    checkpoints: i64,
    dead: i64,
    expired_left: i64,
}

impl Outcome {
    fn p99_ratio(&self) -> f64 {
        self.during.p99.as_secs_f64() / self.idle.p99.as_secs_f64()
    }

    fn lowest_share(&self) -> f64 {
        self.lowest_tick as f64 / self.idle_rate
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.callers > 0, "--callers must be at least 1");
    anyhow::ensure!(args.idle > 0, "--idle must be at least 1");
    let admin = admin(&args.postgres.url).await?;
    let (autovacuum, stand_in) = args.maintenance.resolve(&admin).await?;
    let tag = std::process::id();
    let mut outcomes = Vec::new();
    for &method in &args.methods {
        let schema = format!("bench_cleanup_{}_{tag}", method.name());
        let result = tokio::select! {
            r = run_method(&args, method, &schema, stand_in) => r,
            e = crate::pg::interrupted() => Err(e),
        };
        let dropped = drop_schema(&admin, &schema).await;
        outcomes.push(result?);
        dropped?;
    }

    println!(
        "\n{} expired rows cleared under {} callers claiming distinct new keys; idle: {} s of load alone; cleanup phase: from the cleanup's start until it ends, at least {} s:\n",
        args.rows, args.callers, args.idle, args.after
    );
    println!(
        "The server's autovacuum is {autovacuum} (off on the dedup tables in any case); {}.\n",
        if stand_in {
            "the scenario stood in for autovacuum: VACUUM ANALYZE of the loaded tables before the load, ANALYZE of the dedup and history tables after the warm-up"
        } else {
            "the scenario ran no maintenance: nothing vacuumed or analyzed (a CHECKPOINT wrote the loaded rows before the load began)"
        }
    );
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            vec![
                o.method.label().to_owned(),
                format!("{:.1}", o.cleanup.as_secs_f64()),
                format!("{:.0}", o.idle_rate),
                ms(o.idle.p99),
                ms(o.during.p99),
                format!("{:.2}x", o.p99_ratio()),
                ms(o.during.max),
                format!("{:.0}%", o.lowest_share() * 100.0),
                ms(o.longest_wait),
                mib(o.wal),
                mib(o.wal_beyond_load),
                o.checkpoints.to_string(),
                o.dead.to_string(),
                o.expired_left.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "method",
                "cleanup s",
                "idle claims/s",
                "idle p99 ms",
                "cleanup p99 ms",
                "p99 ratio",
                "cleanup max ms",
                "lowest 1-s tick",
                "longest lock wait ms",
                "WAL MiB",
                "WAL beyond the load MiB",
                "checkpoints",
                "dead tuples",
                "expired left",
            ],
            &rows
        )
    );
    println!();
    for o in &outcomes {
        println!(
            "{}: {}; cleanup phase {} s.",
            o.method.label(),
            o.detail,
            o.phase_secs
        );
    }
    println!(
        "\nClaims in each second, as a percentage of the idle mean (| marks the cleanup's start):"
    );
    for o in &outcomes {
        let pct = |v: &f64| format!("{:.0}", v * 100.0);
        let idle = args.idle as usize;
        let (before, during) = o.timeline.split_at(idle.min(o.timeline.len()));
        println!(
            "{}: {} | {}",
            o.method.label(),
            before.iter().map(pct).collect::<Vec<_>>().join(" "),
            during.iter().map(pct).collect::<Vec<_>>().join(" ")
        );
    }
    println!();
    for o in &outcomes {
        for line in verdicts(o) {
            println!("{line}");
        }
    }

    std::fs::create_dir_all(&args.out)?;
    let chart = args.out.join("cleanup.svg");
    let longest = outcomes.iter().map(|o| o.timeline.len()).max().unwrap_or(0);
    let xs: Vec<String> = (0..longest)
        .map(|i| (i as i64 - args.idle as i64).to_string())
        .collect();
    let series = outcomes.iter().map(|o| {
        Series::new(
            format!("{} ({:.1} s)", o.method.label(), o.cleanup.as_secs_f64()),
            o.timeline.iter().map(|v| v * 100.0),
        )
    });
    std::fs::write(
        &chart,
        LineChart::new(
            Frame::new(
                "cleanup",
                &format!(
                    "Claims per second while {} expired rows are cleared ({} callers)",
                    count(args.rows),
                    args.callers
                ),
            ),
            XAxis::Categories(xs),
            "seconds from the cleanup's start",
        )
        .panel(
            LinePanel::new("claims/s, % of the idle mean")
                .all_series(series)
                .x_mark(Mark::new(args.idle as f64, "cleanup starts"))
                .y_mark(Mark::new(
                    BATCHED_LOWEST_TICK * 100.0,
                    "80% (batched target)",
                )),
        )
        .render(),
    )?;
    println!("\nchart: {}", chart.display());
    Ok(())
}

/// The target lines for a method's outcome (none for the unbounded DELETE, the baseline).
fn verdicts(o: &Outcome) -> Vec<String> {
    let mark = |ok: bool| if ok { "met" } else { "missed" };
    match o.method {
        Method::Delete => vec![format!(
            "{}: p99 {:.2}x idle, lowest tick {:.0}% of idle (baseline, no target)",
            o.method.label(),
            o.p99_ratio(),
            o.lowest_share() * 100.0
        )],
        Method::Sweeper | Method::Fixed => vec![
            format!(
                "{}: p99 {:.2}x idle; target at most {BATCHED_P99_RATIO}x: {}",
                o.method.label(),
                o.p99_ratio(),
                mark(o.p99_ratio() <= BATCHED_P99_RATIO)
            ),
            format!(
                "{}: lowest one-second tick {:.0}% of the idle mean; target no tick below {:.0}%: {}",
                o.method.label(),
                o.lowest_share() * 100.0,
                BATCHED_LOWEST_TICK * 100.0,
                mark(o.lowest_share() >= BATCHED_LOWEST_TICK)
            ),
        ],
        Method::Partitions => vec![
            format!(
                "{}: p99 {:.2}x idle; target at most {DROP_P99_RATIO}x: {}",
                o.method.label(),
                o.p99_ratio(),
                mark(o.p99_ratio() <= DROP_P99_RATIO)
            ),
            format!(
                "{}: {} dead tuples left; target none: {}",
                o.method.label(),
                o.dead,
                mark(o.dead == 0)
            ),
        ],
    }
}

async fn run_method(
    args: &Args,
    method: Method,
    schema: &str,
    stand_in: bool,
) -> anyhow::Result<Outcome> {
    let url = with_app_name(&args.postgres.url, APP);
    let store = crate::pg::store(&url, schema, method.expiry(args)).await?;
    let admin = admin(&url).await?;
    load_expired(&admin, schema, method, args.rows).await?;

    let setup = Progress::phase(format!(
        "cleanup, {}: {}CHECKPOINT",
        method.label(),
        if stand_in { "VACUUM ANALYZE, " } else { "" }
    ));
    // The load's dirty pages are written before the load starts, either way; the stand-in also
    // vacuums and analyzes what it loaded, as autovacuum would have by now.
    let settle: Vec<String> = if stand_in {
        vec![
            format!("VACUUM ANALYZE {schema}.dedup"),
            format!("ANALYZE {schema}.history"),
            "CHECKPOINT".to_owned(),
        ]
    } else {
        vec!["CHECKPOINT".to_owned()]
    };
    for sql in settle {
        admin
            .batch_execute(&sql)
            .await
            .with_context(|| format!("running {sql}"))?;
    }
    setup.finish("");

    let phase = Progress::phase(format!(
        "cleanup, {}: {} s warm-up, {} s idle",
        method.label(),
        WARMUP.as_secs(),
        args.idle
    ));
    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let load = start_load(&store, args.callers, origin, &stop);
    let poller = tokio::spawn(poll_lock_waits(url.clone(), origin, stop.clone()));
    let outcome = async {
        tokio::time::sleep(WARMUP).await;
        if stand_in {
            // The current partition (partitioned mode) was empty when the claim plans were made.
            for sql in [
                format!("ANALYZE {schema}.dedup"),
                format!("ANALYZE {schema}.history"),
            ] {
                admin
                    .batch_execute(&sql)
                    .await
                    .with_context(|| format!("running {sql}"))?;
            }
        }
        let idle_from = origin.elapsed();
        let lsn0 = wal_lsn(&admin).await?;
        tokio::time::sleep_until((origin + idle_from + Duration::from_secs(args.idle)).into())
            .await;
        let cleanup_from = origin.elapsed();
        let lsn1 = wal_lsn(&admin).await?;
        let checkpoints1 = checkpoints(&admin).await?;
        phase.finish("");

        let detail = clean(args, &admin, &store, schema, method, args.rows).await?;
        let cleanup_to = origin.elapsed();
        let lsn2 = wal_lsn(&admin).await?;
        let checkpoints = checkpoints(&admin).await? - checkpoints1;
        let cleanup = cleanup_to - cleanup_from;
        let phase_secs = cleanup.as_secs_f64().ceil().max(args.after as f64) as u64;
        let phase_to = cleanup_from + Duration::from_secs(phase_secs);
        let tail = Progress::phase(format!(
            "cleanup, {}: done in {:.1?}; load until {phase_secs} s after its start",
            method.label(),
            cleanup
        ));
        tokio::time::sleep_until((origin + phase_to).into()).await;
        stop.store(true, Ordering::Relaxed);
        tail.finish("");
        Ok::<_, anyhow::Error>((
            detail,
            [idle_from, cleanup_from, cleanup_to, phase_to],
            [lsn0, lsn1, lsn2],
            phase_secs,
            checkpoints,
        ))
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for task in load {
        samples.extend(task.await??);
    }
    let waits = poller.await??;
    let (
        detail,
        [idle_from, cleanup_from, cleanup_to, phase_to],
        [lsn0, lsn1, lsn2],
        phase_secs,
        checkpoints,
    ) = outcome?;

    // A backend that flushed its counters less than a second ago holds the next ones for up to
    // 10 s of idleness, but flushes them when it exits: close the store's connections and wait
    // for their backends to go.
    drop(store);
    let settle = Instant::now();
    while settle.elapsed() < STATS_SETTLE {
        let left: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE application_name = $1 AND pid <> pg_backend_pid()",
                &[&APP],
            )
            .await?
            .get(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dead: i64 = admin
        .query_one(
            r"SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
               WHERE schemaname = $1 AND (relname = 'dedup' OR relname LIKE 'dedup\_p%')",
            &[&schema],
        )
        .await?
        .get(0);
    let expired_left: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM {schema}.dedup WHERE expires_at < now()"),
            &[],
        )
        .await?
        .get(0);

    let within = |from: Duration, to: Duration| {
        let mut lat: Vec<Duration> = samples
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|(_, l)| *l)
            .collect();
        let n = lat.len();
        (n, Latency::of(&mut lat))
    };
    let (idle_n, idle) = within(idle_from, cleanup_from);
    let (_, during) = within(cleanup_from, phase_to);
    let (cleanup_n, _) = within(cleanup_from, cleanup_to);
    let idle_rate = idle_n as f64 / (cleanup_from - idle_from).as_secs_f64();
    let done_at = || samples.iter().map(|(at, _)| *at);
    let lowest_tick = ticks(done_at(), cleanup_from, phase_to)
        .into_iter()
        .min()
        .unwrap_or(0);
    let timeline = ticks(done_at(), idle_from, phase_to)
        .into_iter()
        .map(|n| n as f64 / idle_rate)
        .collect();
    let longest_wait = waits
        .iter()
        .filter(|(at, _)| *at >= cleanup_from && *at < phase_to)
        .map(|(_, w)| *w)
        .max()
        .unwrap_or_default();
    let wal = lsn2 - lsn1;
    let wal_per_claim = (lsn1 - lsn0) as f64 / idle_n.max(1) as f64;
    Ok(Outcome {
        method,
        detail,
        cleanup: cleanup_to - cleanup_from,
        phase_secs,
        idle_rate,
        idle,
        during,
        lowest_tick,
        timeline,
        longest_wait,
        wal,
        wal_beyond_load: wal - (wal_per_claim * cleanup_n as f64) as i64,
        checkpoints,
        dead,
        expired_left,
    })
}

/// Loads `rows` expired `done` records: in batched mode expiring over the last hour, in
/// partitioned mode over the previous partition (created here, named as the store names them).
/// Autovacuum is turned off on every dedup table of the schema.
async fn load_expired(
    admin: &tokio_postgres::Client,
    schema: &str,
    method: Method,
    rows: u64,
) -> anyhow::Result<()> {
    // (first expiry as epoch seconds, span in seconds)
    let (from, span): (f64, f64) = match method {
        Method::Delete | Method::Sweeper | Method::Fixed => {
            let now: f64 = admin
                .query_one("SELECT extract(epoch FROM now())::float8", &[])
                .await?
                .get(0);
            (now - 3_600.0, 3_540.0)
        }
        Method::Partitions => {
            let row = admin
                .query_one(
                    &format!(
                        r#"SELECT format('CREATE TABLE %I.%I PARTITION OF %I.dedup FOR VALUES FROM (%L) TO (%L)',
                                      $1::text,
                                      'dedup_' || to_char(lo AT TIME ZONE 'UTC', '"p"YYYYMMDD"t"HH24MISS'),
                                      $1::text, lo, lo + w * interval '1 s'),
                                  extract(epoch FROM lo)::float8, w::float8
                             FROM (SELECT to_timestamp(floor(extract(epoch FROM now()) / w) * w - w) AS lo, w
                                     FROM (SELECT value::bigint AS w FROM {schema}.meta
                                            WHERE key = 'partition_width_s') m) x"#
                    ),
                    &[&schema],
                )
                .await
                .context("working out the previous dedup partition")?;
            let ddl: String = row.get(0);
            admin
                .batch_execute(&ddl)
                .await
                .with_context(|| format!("running {ddl}"))?;
            (row.get(1), row.get::<_, f64>(2) - 1.0)
        }
    };
    let tables: Vec<String> = admin
        .query(
            r"SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
                JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = $1 AND c.relkind = 'r'
                 AND (c.relname = 'dedup' OR c.relname LIKE 'dedup\_p%')",
            &[&schema],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for t in &tables {
        admin
            .batch_execute(&format!("ALTER TABLE {t} SET (autovacuum_enabled = false)"))
            .await?;
    }
    // Each record comes with the history row its claim wrote (history is never empty in a
    // store that has expired records to clear), received a day before it expired but not before
    // this month's history partition.
    let insert = admin
        .prepare(&format!(
            "WITH r AS (
                 SELECT g, 'old_' || md5(g::text) AS id, e,
                        greatest(e - interval '1 day',
                                 date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') AS seen
                   FROM generate_series($1::bigint, $2::bigint) g,
                        LATERAL (SELECT to_timestamp($3::float8 + g::float8 / $4::float8 * $5::float8) AS e) t
             ), d AS (
                 INSERT INTO {schema}.dedup (source, event_id, state, attempt, nonce, fingerprint,
                                             first_seen, lease_until, expires_at)
                 SELECT 'bench', id, 'done', 1, g, NULL, seen, NULL, e FROM r
             )
             INSERT INTO {schema}.history (source, event_id, outcome, processed, attempt,
                                           received_at, gap_ms, fingerprint)
             SELECT 'bench', id, 'claimed', true, 1, seen, NULL, NULL FROM r"
        ))
        .await?;
    let progress = Progress::counter(
        format!("cleanup, {}: loading expired rows", method.label()),
        rows,
        "rows",
    );
    let mut first = 1i64;
    let last = i64::try_from(rows)?;
    while first <= last {
        let to = (first + LOAD_CHUNK as i64 - 1).min(last);
        admin
            .execute(&insert, &[&first, &to, &from, &(rows as f64), &span])
            .await
            .context("loading expired rows")?;
        progress.set(to as u64);
        first = to + 1;
    }
    progress.finish("");
    Ok(())
}

/// Runs the method's cleanup once, to its end; what it did, in words.
async fn clean(
    args: &Args,
    admin: &tokio_postgres::Client,
    store: &PgStore,
    schema: &str,
    method: Method,
    rows: u64,
) -> anyhow::Result<String> {
    match method {
        Method::Delete => {
            let phase = Progress::phase("cleanup, one unbounded DELETE: running");
            let deleted = admin
                .execute(
                    &format!("DELETE FROM {schema}.dedup WHERE expires_at < now()"),
                    &[],
                )
                .await
                .context("the unbounded DELETE")?;
            // This backend's counters (dead tuples among them) reach the stats now.
            admin
                .batch_execute("SELECT pg_stat_force_next_flush()")
                .await?;
            phase.finish("");
            Ok(format!("deleted {deleted} rows in one statement"))
        }
        Method::Sweeper | Method::Fixed | Method::Partitions => {
            let progress = method.sweeps().then(|| {
                Progress::counter(
                    format!("cleanup, {}: deleting", method.label()),
                    rows,
                    "rows",
                )
            });
            let phase = (method == Method::Partitions)
                .then(|| Progress::phase("cleanup, partition drop: running"));
            let mut deleted = 0;
            // A pause nobody cuts short: the run goes to its end.
            let pause = |d| async move {
                tokio::time::sleep(d).await;
                true
            };
            let opts = SweepOptions {
                pacing: match method {
                    Method::Fixed => Pacing::Fixed,
                    _ => Pacing::Adaptive,
                },
                ..store.sweep_options()
            };
            let report = idemgate_core::Sweep::sweep_run(store, opts, pause, |n| {
                deleted += n;
                if let Some(p) = &progress {
                    p.set(deleted);
                }
            })
            .await
            .context("the store's sweep run")?;
            if let Some(p) = progress {
                p.finish("");
            }
            if let Some(p) = phase {
                p.finish("");
            }
            Ok(match method {
                Method::Sweeper | Method::Fixed => format!(
                    "deleted {} rows in {} batches of at most {} ({} apart at the configured pace), {} pacing: {} backoff(s), {:.1} s in pauses",
                    report.rows,
                    report.batches,
                    args.sweep_batch,
                    humantime::format_duration(args.sweep_pause),
                    opts.pacing.name(),
                    report.backoffs,
                    report.paused_for.as_secs_f64()
                ),
                _ => format!(
                    "dropped {} partition(s) ({}), deleted {} rows",
                    report.partitions_dropped.len(),
                    report.partitions_dropped.join(", "),
                    report.rows
                ),
            })
        }
    }
}

/// The steady load: `callers` tasks claiming distinct new keys until `stop`; each returns
/// `(completed at, latency)` per claim, times from `origin`.
fn start_load(
    store: &PgStore,
    callers: usize,
    origin: Instant,
    stop: &Arc<AtomicBool>,
) -> Vec<JoinHandle<anyhow::Result<Samples>>> {
    (0..callers as u64)
        .map(|c| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let req =
                        ClaimRequest::new(Key::parse("bench", &event_id(c << 40 | i))?, LEASE, TTL);
                    let t = Instant::now();
                    match store.claim(req).await {
                        Ok(ClaimOutcome::Claimed { .. }) => {}
                        Ok(other) => anyhow::bail!("a claim of a new key answered {other:?}"),
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            return Err(e).context("a claim of the steady load failed");
                        }
                    }
                    out.push((origin.elapsed(), t.elapsed()));
                    i += 1;
                }
                Ok(out)
            })
        })
        .collect()
}

/// Every 50 ms until `stop`: the longest current lock wait among this scenario's backends
/// (`clock_timestamp() - pg_locks.waitstart` of ungranted locks), with when it was seen.
async fn poll_lock_waits(
    url: String,
    origin: Instant,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Vec<(Duration, Duration)>> {
    let client = admin(&url).await?;
    let stmt = client
        .prepare(
            "SELECT coalesce(max(extract(epoch FROM clock_timestamp() - l.waitstart)), 0)::float8
               FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE NOT l.granted AND a.application_name = $1",
        )
        .await?;
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let secs: f64 = client.query_one(&stmt, &[&APP]).await?.get(0);
        out.push((origin.elapsed(), Duration::from_secs_f64(secs.max(0.0))));
        tokio::time::sleep(POLL).await;
    }
    Ok(out)
}

/// Checkpoints the server has begun since its statistics were reset, timed or requested.
async fn checkpoints(admin: &tokio_postgres::Client) -> anyhow::Result<i64> {
    read_i64(
        admin,
        "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter",
        "reading pg_stat_bgwriter",
    )
    .await
}

/// The current WAL position, in bytes.
async fn wal_lsn(admin: &tokio_postgres::Client) -> anyhow::Result<i64> {
    read_i64(
        admin,
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
        "reading the WAL position",
    )
    .await
}

/// The one bigint `sql` answers.
async fn read_i64(
    admin: &tokio_postgres::Client,
    sql: &str,
    what: &'static str,
) -> anyhow::Result<i64> {
    Ok(admin.query_one(sql, &[]).await.context(what)?.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(method: Method, idle_p99: u64, during_p99: u64, lowest: u64, dead: i64) -> Outcome {
        let lat = |p99| Latency {
            p50: Duration::ZERO,
            p99: Duration::from_millis(p99),
            p999: Duration::ZERO,
            max: Duration::ZERO,
        };
        Outcome {
            method,
            detail: String::new(),
            cleanup: Duration::from_secs(1),
            phase_secs: 5,
            idle_rate: 1_000.0,
            idle: lat(idle_p99),
            during: lat(during_p99),
            lowest_tick: lowest,
            timeline: Vec::new(),
            longest_wait: Duration::ZERO,
            wal: 0,
            wal_beyond_load: 0,
            checkpoints: 0,
            dead,
            expired_left: 0,
        }
    }

    #[test]
    fn batched_verdicts_follow_the_targets() {
        let ok = verdicts(&outcome(Method::Sweeper, 10, 15, 800, 5));
        assert!(ok.iter().all(|l| l.ends_with(": met")), "{ok:?}");
        let slow = verdicts(&outcome(Method::Sweeper, 10, 16, 799, 0));
        assert!(slow.iter().all(|l| l.ends_with(": missed")), "{slow:?}");
    }

    #[test]
    fn partition_verdicts_want_no_dead_tuples() {
        let ok = verdicts(&outcome(Method::Partitions, 10, 11, 0, 0));
        assert!(ok.iter().all(|l| l.ends_with(": met")), "{ok:?}");
        let bad = verdicts(&outcome(Method::Partitions, 10, 12, 0, 1));
        assert!(bad.iter().all(|l| l.ends_with(": missed")), "{bad:?}");
        assert_eq!(verdicts(&outcome(Method::Delete, 1, 9, 0, 9)).len(), 1);
    }
}
