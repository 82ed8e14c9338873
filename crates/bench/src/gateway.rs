//! The `gateway` scenario: signed Stripe deliveries against `idemgate serve` and against the
//! receiver most tutorials show, same load, same run.
//!
//! Each receiver runs as its own process (so its peak RSS is its own) and forwards to a
//! downstream in this process that answers 200 at once and counts what it got per event id, so a
//! receiver that forwards an event twice, or never, shows it. `--connections` keep-alive
//! connections (64) send pre-signed deliveries, 90% new and 10% repeats of earlier ones.
//!
//! - `idemgate serve` on SQLite and on PostgreSQL, forward mode. Beside each, in the same run,
//!   the raw rate of a fresh store of the same kind doing what a delivery does to it: claim a
//!   new key, then complete it, from as many callers as there are connections.
//! - The tutorial receiver (`crates/bench/tutorial/`): Express with the raw body, stripe-node's
//!   `constructEvent`, an `INSERT ... ON CONFLICT (event_id) DO NOTHING` claim on a
//!   node-postgres pool, two `cluster` workers, in a PostgreSQL schema of its own that is
//!   dropped after. It runs on the machine's `node` (after `npm ci` when its `node_modules` is
//!   absent); without node the row is skipped and the scenario says so, and `--tutorial off`
//!   skips it on purpose. Both idemgate rows are compared with this one PostgreSQL receiver:
//!   the tutorials have no SQLite form.
//!
//! PostgreSQL runs as a new user's does: a fresh schema, the server's own settings (printed:
//! autovacuum, `plan_cache_mode`), and no maintenance the user would not do. `--maintenance
//! auto|always` runs an `ANALYZE` of the gateway's tables after the warm-up, standing in for
//! autovacuum; it is not the default. `--rounds N` sends N rounds of new events, one after
//! another, to one receiver whose tables grow: req/s and p99 per round, and whether the last
//! round holds the first one's speed.
//!
//! Printed: the table, whether each target is met, and `gateway.svg` in `--out` (req/s and p99
//! per receiver, side by side).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::ValueEnum;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use idemgate_chart::{BarLayout, Bars, Frame, Mark, Series};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Fingerprint, Key};
use tokio::io::AsyncBufReadExt;

use crate::report::{Latency, ms, table};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreArg {
    Sqlite,
    Postgres,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Tutorial {
    /// Run the tutorial receiver (skipped, with a note, when there is no node).
    On,
    /// Skip it.
    Off,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which store the gateway runs on.
    #[arg(long, value_enum, default_value = "both")]
    pub(crate) store: StoreArg,
    #[command(flatten)]
    pub(crate) postgres: crate::pg::Postgres,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 64)]
    pub(crate) connections: usize,
    /// Deliveries to send to each receiver (per round).
    #[arg(long, default_value_t = 20_000)]
    pub(crate) requests: usize,
    /// Rounds of `--requests` deliveries each, one after another on one receiver, each of new
    /// events (so the tables grow from round to round): req/s and p99 per round, and whether
    /// the last round holds the first one's speed.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Whether the scenario stands in for autovacuum: ANALYZE of the gateway's PostgreSQL
    /// tables after the warm-up (`auto`: when the server's autovacuum is off). The default is
    /// what a new store gets from a server with autovacuum off: no maintenance at all.
    #[arg(long, value_enum, default_value = "never")]
    maintenance: crate::pg::Maintenance,
    /// Share of deliveries that repeat an earlier event.
    #[arg(long, default_value_t = 0.1)]
    pub(crate) duplicates: f64,
    /// New deliveries each receiver takes first, not measured nor counted (a JIT, caches and
    /// connection pools warm up).
    #[arg(long, default_value_t = 2_000)]
    pub(crate) warmup: usize,
    /// The idemgate binary (default: next to this one; build it with
    /// `cargo build --release -p idemgate-cli`).
    #[arg(long)]
    idemgate: Option<PathBuf>,
    /// The tutorial receiver (Express + stripe-node + node-postgres, 2 workers) on PostgreSQL,
    /// same deliveries, same downstream.
    #[arg(long, value_enum, default_value = "on")]
    tutorial: Tutorial,
    /// The node binary the tutorial receiver runs on (`npm` is taken from PATH).
    #[arg(long, default_value = "node")]
    node: PathBuf,
    /// Instead of the receivers above: the gateway publishing into each destination named
    /// (`nats`, `amqp`), beside HTTP to nginx, forward and inbox mode, same run (see
    /// `destinations`).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) destination: Vec<Destination>,
    /// NATS with JetStream, for `--destination nats` (streams of the run's own, deleted after).
    #[arg(
        long,
        env = "IDEMGATE_TEST_NATS",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub(crate) nats: String,
    /// RabbitMQ, for `--destination amqp` (queues of the run's own, deleted after).
    #[arg(
        long,
        env = "IDEMGATE_TEST_AMQP",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub(crate) amqp: String,
    /// The nginx binary the HTTP baseline of `--destination` runs on.
    #[arg(long, default_value_os_t = default_nginx())]
    pub(crate) nginx: PathBuf,
    /// Where the chart goes.
    #[arg(long, default_value = "bench/results")]
    pub(crate) out: PathBuf,
}

pub(crate) const SECRET: &str = "whsec_bench_secret";

/// The targets the gateway is held to, at 64 connections.
const RAW_RATIO: f64 = 0.5;
const POSTGRES_P99: Duration = Duration::from_millis(10);
const OVER_TUTORIAL_POSTGRES: f64 = 5.0;
const OVER_TUTORIAL_SQLITE: f64 = 10.0;
const PEAK_RSS_MIB: f64 = 100.0;
const TARGET_CONNECTIONS: usize = 64;

/// The tutorial receiver's workers (one per core of the machine the figures are taken on).
const TUTORIAL_WORKERS: usize = 2;
/// How long the tutorial receiver may take to say it is ready.
const TUTORIAL_READY: Duration = Duration::from_secs(30);

/// Who received the deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiver {
    Idemgate(Store),
    /// Always on PostgreSQL.
    Tutorial,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    Sqlite,
    Postgres,
}

impl Store {
    fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "SQLite",
            Self::Postgres => "PostgreSQL",
        }
    }
}

impl Receiver {
    fn label(self) -> String {
        match self {
            Self::Idemgate(store) => format!("idemgate serve, {}", store.name()),
            Self::Tutorial => format!(
                "tutorial receiver (Express + stripe-node + pg, {TUTORIAL_WORKERS} workers), PostgreSQL"
            ),
        }
    }

    /// For the chart's categories.
    fn short(self) -> String {
        match self {
            Self::Idemgate(store) => format!("idemgate, {}", store.name()),
            Self::Tutorial => "tutorial receiver, PostgreSQL".to_owned(),
        }
    }
}

/// One receiver's run.
#[derive(Debug)]
struct Run {
    receiver: Receiver,
    rps: f64,
    latency: Latency,
    /// Summed over the receiver's processes (each one's own peak).
    peak_rss_kib: u64,
    processes: usize,
    /// Answers by `Idemgate-Outcome`, or by HTTP status where there is none.
    answers: BTreeMap<String, usize>,
    forwarded: Forwarded,
    /// Claim+complete per second of a fresh store of the same kind (idemgate rows).
    raw: Option<f64>,
    /// Each round's req/s and latencies, in order.
    rounds: Vec<Round>,
}

/// One round of `--requests` deliveries.
#[derive(Debug, Clone, Copy)]
struct Round {
    rps: f64,
    latency: Latency,
}

/// Targets for `--rounds`: the last round within this share of the first one's req/s, and its
/// p99 within this many times the first one's.
const ROUNDS_RPS: f64 = 0.15;
const ROUNDS_P99: f64 = 1.5;

/// Where a source's events go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Destination {
    /// HTTP to nginx (always measured first, as the baseline).
    Http,
    /// NATS JetStream.
    Nats,
    /// RabbitMQ.
    Amqp,
}

impl Destination {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Http => "HTTP (nginx)",
            Self::Nats => "JetStream",
            Self::Amqp => "RabbitMQ",
        }
    }
}

/// `--nginx`'s default.
pub fn default_nginx() -> PathBuf {
    PathBuf::from("nginx")
}

impl Run {
    fn peak_rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }
}

/// Checks the arguments and finds the `idemgate` binary; `--destination` runs (see
/// `destinations`) start here too.
///
/// # Errors
/// An argument out of range, or no binary.
pub fn binary(args: &Args) -> anyhow::Result<PathBuf> {
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(args.requests > 0, "--requests must be at least 1");
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(
        (0.0..1.0).contains(&args.duplicates),
        "--duplicates must be a share from 0 up to (not including) 1, not {}",
        args.duplicates
    );
    idemgate_binary(args.idemgate.as_deref())
}

/// The `idemgate` binary: `explicit` (`--idemgate`), or the one beside this binary.
///
/// # Errors
/// No such file (with how to build it).
pub(crate) fn idemgate_binary(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let bin = match explicit {
        Some(p) => p.to_owned(),
        None => std::env::current_exe()?.with_file_name("idemgate"),
    };
    if !bin.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p idemgate-cli`, or pass --idemgate",
            bin.display()
        );
    }
    Ok(bin)
}

/// `npm ci` in `dir` unless its `node_modules` is there already; `needed_for` and `skip` word
/// the errors (what the packages are for, and the flag that does without them).
///
/// # Errors
/// npm could not be run, or failed.
pub(crate) async fn npm_ci(dir: &Path, needed_for: &str, skip: &str) -> anyhow::Result<()> {
    if dir.join("node_modules").is_dir() {
        return Ok(());
    }
    eprintln!("npm ci in {}", dir.display());
    let status = tokio::process::Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .await
        .with_context(|| format!("cannot run npm (needed once, {needed_for}; {skip})"))?;
    if !status.success() {
        bail!("npm ci in {} failed ({status}); {skip}", dir.display());
    }
    Ok(())
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bin = binary(&args)?;
    let stores: &[Store] = match args.store {
        StoreArg::Sqlite => &[Store::Sqlite],
        StoreArg::Postgres => &[Store::Postgres],
        StoreArg::Both => &[Store::Sqlite, Store::Postgres],
    };
    // Each round's events are its own: the rounds' distinct events add up.
    let events = args.rounds * distinct_events(&deliveries(args.requests, args.duplicates)?);
    let server = if stores.contains(&Store::Postgres) || args.tutorial == Tutorial::On {
        Some(server_settings(&args).await?)
    } else {
        None
    };
    let mut runs = Vec::new();
    for &store in stores {
        eprintln!(
            "gateway: raw claim+complete on a fresh {} store",
            store.name()
        );
        let raw = raw_claims(store, &args).await?;
        eprintln!("gateway: idemgate serve on {}", store.name());
        let mut run = gateway(store, &bin, &args).await?;
        run.raw = Some(raw);
        runs.push(run);
    }
    // A tutorial receiver that fails is reported after the idemgate rows, not instead of them.
    let mut failed = None;
    let skipped = match args.tutorial {
        Tutorial::Off => Some("skipped (--tutorial off)".to_owned()),
        Tutorial::On => match node_version(&args.node).await {
            None => Some(format!(
                "skipped: no node to run it ({} --version did not answer)",
                args.node.display()
            )),
            Some(version) => {
                eprintln!("gateway: the tutorial receiver on node {version}");
                match tutorial(&args).await {
                    Ok(run) => {
                        runs.push(run);
                        None
                    }
                    Err(e) => {
                        let note = format!("failed: {e:#}");
                        failed = Some(e.context("the tutorial receiver failed"));
                        Some(note)
                    }
                }
            }
        },
    };
    let tutorial_rps = runs
        .iter()
        .find(|r| r.receiver == Receiver::Tutorial)
        .map(|r| r.rps);

    println!(
        "\nSigned Stripe deliveries, {} connections, {} requests ({:.0}% repeats, {events} distinct events) to each receiver after {} of warm-up, forwarded to a downstream answering at once:\n",
        args.connections,
        args.requests * args.rounds,
        args.duplicates * 100.0,
        args.warmup
    );
    if let Some(server) = &server {
        println!("{server}\n");
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let dash = || "-".to_owned();
            vec![
                r.receiver.label(),
                format!("{:.0}", r.rps),
                ms(r.latency.p50),
                ms(r.latency.p99),
                ms(r.latency.max),
                r.raw.map_or_else(dash, |raw| format!("{raw:.0}")),
                r.raw
                    .map_or_else(dash, |raw| format!("{:.2}x", r.rps / raw)),
                match (r.receiver, tutorial_rps) {
                    (Receiver::Idemgate(_), Some(t)) => format!("{:.1}x", r.rps / t),
                    _ => dash(),
                },
                if r.processes > 1 {
                    format!("{:.1} ({} processes)", r.peak_rss_mib(), r.processes)
                } else {
                    format!("{:.1}", r.peak_rss_mib())
                },
                r.answers
                    .iter()
                    .map(|(o, n)| format!("{o} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                r.forwarded.describe(events),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "receiver",
                "req/s",
                "p50 ms",
                "p99 ms",
                "max ms",
                "raw claim+complete/s",
                "ratio to raw",
                "ratio to tutorial",
                "peak RSS MiB",
                "answers",
                "forwarded (downstream's count)"
            ],
            &rows
        )
    );
    println!(
        "\nraw claim+complete/s: a fresh store of the same kind, {} callers, each claiming a new key and completing it. \
         ratio to tutorial: against the tutorial receiver on PostgreSQL, for both stores.",
        args.connections
    );
    if let Some(why) = &skipped {
        println!("tutorial receiver: {why}.");
    }
    println!();
    if args.connections != TARGET_CONNECTIONS {
        println!(
            "(The targets are set at {TARGET_CONNECTIONS} connections; this run used {}.)",
            args.connections
        );
    }
    if args.rounds > 1 {
        print_rounds(&runs, args.requests);
    }
    for line in verdicts(&runs, events) {
        println!("{line}");
    }

    std::fs::create_dir_all(&args.out)?;
    let chart = args.out.join("gateway.svg");
    std::fs::write(&chart, draw(&runs, &args)?)?;
    println!("\nchart: {}", chart.display());
    failed.map_or(Ok(()), Err)
}

/// Whether each target is met, one line each.
fn verdicts(runs: &[Run], events: usize) -> Vec<String> {
    let mark = |ok: bool| if ok { "met" } else { "missed" };
    let tutorial = runs
        .iter()
        .find(|r| r.receiver == Receiver::Tutorial)
        .map(|r| r.rps);
    let mut out = Vec::new();
    for r in runs {
        let label = r.receiver.label();
        let Receiver::Idemgate(store) = r.receiver else {
            continue;
        };
        if let Some(raw) = r.raw {
            out.push(format!(
                "{label}: {:.2}x its store's raw claim+complete rate; target at least {RAW_RATIO}x: {}",
                r.rps / raw,
                mark(r.rps / raw >= RAW_RATIO)
            ));
        }
        if store == Store::Postgres {
            out.push(format!(
                "{label}: p99 {} ms; target under {} ms: {}",
                ms(r.latency.p99),
                POSTGRES_P99.as_millis(),
                mark(r.latency.p99 < POSTGRES_P99)
            ));
        }
        if let Some(t) = tutorial {
            let want = match store {
                Store::Sqlite => OVER_TUTORIAL_SQLITE,
                Store::Postgres => OVER_TUTORIAL_POSTGRES,
            };
            out.push(format!(
                "{label}: {:.1}x the tutorial receiver on PostgreSQL; target at least {want}x: {}",
                r.rps / t,
                mark(r.rps / t >= want)
            ));
        }
        out.push(format!(
            "{label}: peak RSS {:.1} MiB; target under {PEAK_RSS_MIB} MiB: {}",
            r.peak_rss_mib(),
            mark(r.peak_rss_mib() < PEAK_RSS_MIB)
        ));
    }
    for r in runs {
        if let (Some(first), Some(last)) = (r.rounds.first(), r.rounds.last())
            && r.rounds.len() > 1
        {
            let kept = last.rps / first.rps;
            out.push(format!(
                "{}: last of {} rounds {:.0} req/s, {:.0}% of the first's {:.0}; target within {:.0}%: {}",
                r.receiver.label(),
                r.rounds.len(),
                last.rps,
                kept * 100.0,
                first.rps,
                ROUNDS_RPS * 100.0,
                mark(kept >= 1.0 - ROUNDS_RPS)
            ));
            let grew = last.latency.p99.as_secs_f64() / first.latency.p99.as_secs_f64().max(1e-9);
            out.push(format!(
                "{}: last round's p99 {} ms, {grew:.2}x the first's {} ms; target within {ROUNDS_P99}x: {}",
                r.receiver.label(),
                ms(last.latency.p99),
                ms(first.latency.p99),
                mark(grew <= ROUNDS_P99)
            ));
        }
    }
    for r in runs {
        out.push(format!(
            "{}: every event forwarded exactly once ({}): {}",
            r.receiver.label(),
            r.forwarded.describe(events),
            mark(r.forwarded.exactly_once(events))
        ));
    }
    out
}

/// Each receiver's rounds, one row each: how the rate and latencies moved as its tables grew.
fn print_rounds(runs: &[Run], per_round: usize) {
    let rows: Vec<Vec<String>> = runs
        .iter()
        .flat_map(|r| {
            r.rounds.iter().enumerate().map(move |(i, round)| {
                vec![
                    r.receiver.short(),
                    format!("{}", i + 1),
                    format!("{}", (i + 1) * per_round),
                    format!("{:.0}", round.rps),
                    ms(round.latency.p50),
                    ms(round.latency.p99),
                    ms(round.latency.max),
                ]
            })
        })
        .collect();
    println!("\nPer round, on one receiver whose tables grow ({per_round} deliveries a round):\n");
    print!(
        "{}",
        table(
            &[
                "receiver",
                "round",
                "deliveries so far",
                "req/s",
                "p50 ms",
                "p99 ms",
                "max ms"
            ],
            &rows
        )
    );
    println!();
}

/// What the PostgreSQL server runs with, and what the scenario does for it, in one line.
async fn server_settings(args: &Args) -> anyhow::Result<String> {
    let admin = crate::pg::admin(&args.postgres.url).await?;
    let show = |name: &'static str| {
        let admin = &admin;
        async move {
            admin
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .map(|row| row.get::<_, String>(0))
                .with_context(|| format!("SHOW {name}"))
        }
    };
    let version = show("server_version").await?;
    let autovacuum = show("autovacuum").await?;
    let plan_cache = show("plan_cache_mode").await?;
    let (_, stand_in) = args.maintenance.resolve(&admin).await?;
    Ok(format!(
        "PostgreSQL {version} with its own settings: autovacuum {autovacuum}, plan_cache_mode {plan_cache} \
         (idemgate's sessions ask for force_generic_plan). Each run starts on a fresh schema; {}.",
        if stand_in {
            "the scenario ran ANALYZE of the gateway's tables after the warm-up (--maintenance)"
        } else {
            "no maintenance: nothing analyzed, vacuumed or re-planned for it"
        }
    ))
}

/// req/s and p99 per receiver, one chart above the other, in one document.
fn draw(runs: &[Run], args: &Args) -> anyhow::Result<String> {
    let categories: Vec<String> = runs.iter().map(|r| r.receiver.short()).collect();
    let load = format!(
        "{} signed Stripe deliveries, {:.0}% repeats, {} connections",
        args.requests,
        args.duplicates * 100.0,
        args.connections
    );
    let rps = Bars::new(
        Frame::new(
            "gateway-rps",
            &format!("Webhook receivers, requests per second (higher is better): {load}"),
        ),
        categories.clone(),
        "receiver",
        "req/s",
    )
    .layout(BarLayout::Grouped)
    .series(Series::new("req/s", runs.iter().map(|r| r.rps.round())))
    .render();
    let p99 = Bars::new(
        Frame::new("gateway-p99", "p99 latency, ms (lower is better)"),
        categories,
        "receiver",
        "p99 ms",
    )
    .layout(BarLayout::Grouped)
    .series(Series::new(
        "p99 ms",
        runs.iter()
            .map(|r| (r.latency.p99.as_secs_f64() * 10_000.0).round() / 10.0),
    ))
    .y_mark(Mark::new(
        POSTGRES_P99.as_secs_f64() * 1000.0,
        "10 ms target",
    ))
    .render();
    let summary: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{}: {:.0} req/s, p99 {} ms",
                r.receiver.short(),
                r.rps,
                ms(r.latency.p99)
            )
        })
        .collect();
    stack(
        "gateway",
        &format!("Webhook receivers side by side: {load}"),
        &format!("{load}. {}.", summary.join("; ")),
        &[rps, p99],
    )
}

/// Charts (whole SVG documents with a width and a height) stacked top to bottom in one
/// document, titled `title`.
pub(crate) fn stack(
    id: &str,
    title: &str,
    desc: &str,
    charts: &[String],
) -> anyhow::Result<String> {
    let mut body = String::new();
    let (mut width, mut height) = (0.0_f64, 0.0_f64);
    for chart in charts {
        let (w, h) = size(chart).context("a chart without a width and a height")?;
        let rest = chart
            .strip_prefix("<svg ")
            .context("a chart that does not start with its <svg> element")?;
        body.push_str(&format!("<svg y=\"{height}\" {rest}"));
        width = width.max(w);
        height += h;
    }
    let esc = idemgate_chart::escape;
    Ok(format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" \
         role=\"img\" aria-labelledby=\"{id}-title {id}-desc\">\
         <title id=\"{id}-title\">{}</title><desc id=\"{id}-desc\">{}</desc>{body}</svg>\n",
        esc(title),
        esc(desc)
    ))
}

/// The `width` and `height` of a document's root element.
fn size(svg: &str) -> Option<(f64, f64)> {
    let root = &svg[..svg.find('>')?];
    let attr = |name: &str| -> Option<f64> {
        let at = root.find(&format!(" {name}=\""))? + name.len() + 3;
        let len = root[at..].find('"')?;
        root[at..at + len].parse().ok()
    };
    Some((attr("width")?, attr("height")?))
}

/// A PostgreSQL schema name no other run uses.
pub(crate) fn schema(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    )
}

pub(crate) async fn drop_schema(url: &str, schema: &str) -> anyhow::Result<()> {
    let client = crate::pg::admin(url).await?;
    crate::pg::drop_schema(&client, schema).await
}

/// Claims+completions per second on a fresh store of the same kind, `connections` callers.
async fn raw_claims(store: Store, args: &Args) -> anyhow::Result<f64> {
    match store {
        Store::Sqlite => {
            let dir = tempfile::tempdir()?;
            let s = idemgate_sqlite::SqliteStore::open(dir.path())?;
            drive(s, args.requests, args.connections, Work::ClaimComplete).await
        }
        Store::Postgres => {
            let schema = schema("bench_raw");
            let mut cfg = idemgate_postgres::PgConfig::new(args.postgres.url.clone());
            cfg.schema = schema.clone();
            let s = idemgate_postgres::PgStore::connect(cfg)
                .await
                .context("PostgreSQL for the raw claims")?;
            let result = drive(s, args.requests, args.connections, Work::ClaimComplete).await;
            drop_schema(&args.postgres.url, &schema).await?;
            result
        }
    }
}

/// What a raw caller does with each new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Claim it (what an inbox acknowledgement writes, less the queue item).
    Claim,
    /// Claim it, then complete it (what a forwarded delivery does to the store).
    ClaimComplete,
}

/// `n` new keys from `callers` tasks, each claimed (with a payload fingerprint, as the gateway
/// claims) and, for [`Work::ClaimComplete`], completed; keys per second.
pub async fn drive<S: ClaimStore + Clone + 'static>(
    store: S,
    n: usize,
    callers: usize,
    work: Work,
) -> anyhow::Result<f64> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (next, store) = (next.clone(), store.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, anyhow::Error>(());
                    }
                    let key = Key::parse("stripe-live", &format!("evt_raw_{i}"))?;
                    let mut fingerprint = [0; 32];
                    fingerprint[..8].copy_from_slice(&(i as u64).to_le_bytes());
                    let req = ClaimRequest::new(
                        key,
                        Duration::from_secs(60),
                        Duration::from_secs(7 * 86_400),
                    )
                    .fingerprint(Fingerprint(fingerprint));
                    match store.claim(req).await? {
                        ClaimOutcome::Claimed { token, .. } => {
                            if work == Work::ClaimComplete {
                                store.complete(&token).await?;
                            }
                        }
                        other => bail!("a raw claim of a new key answered {other:?}"),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// What a downstream got: deliveries per event id, and bodies it found no id in.
#[derive(Debug, Default)]
struct Counter {
    per_event: Mutex<HashMap<String, u32>>,
    unknown: AtomicUsize,
}

impl Counter {
    fn clear(&self) {
        self.per_event
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        self.unknown.store(0, Ordering::Relaxed);
    }

    fn summary(&self) -> Forwarded {
        let per_event = self
            .per_event
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Forwarded {
            events: per_event.len(),
            deliveries: per_event.values().map(|&n| n as usize).sum(),
            repeated: per_event.values().filter(|&&n| n > 1).count(),
            most: per_event.values().copied().max().unwrap_or(0),
            unknown: self.unknown.load(Ordering::Relaxed),
        }
    }
}

/// What a receiver forwarded, as the downstream counted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Forwarded {
    /// Distinct event ids.
    events: usize,
    /// Deliveries, repeats included.
    deliveries: usize,
    /// Events forwarded more than once.
    repeated: usize,
    /// The most times one event was forwarded.
    most: u32,
    /// Deliveries without an event id.
    unknown: usize,
}

impl Forwarded {
    /// Each of the `events` sent forwarded once, nothing else.
    fn exactly_once(&self, events: usize) -> bool {
        self.events == events && self.repeated == 0 && self.unknown == 0
    }

    fn describe(&self, events: usize) -> String {
        let mut words = vec![format!("{} of {events} events", self.events)];
        if self.repeated == 0 {
            words.push("none twice".to_owned());
        } else {
            words.push(format!(
                "{} more than once (up to {} times; {} deliveries)",
                self.repeated, self.most, self.deliveries
            ));
        }
        if self.unknown > 0 {
            words.push(format!("{} without an event id", self.unknown));
        }
        words.join(", ")
    }
}

/// The `id` of a Stripe event body.
fn event_id(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("id")?.as_str().map(str::to_owned)
}

/// How many distinct events the deliveries carry.
pub(crate) fn distinct_events(deliveries: &[(hyper::HeaderMap, Bytes)]) -> usize {
    deliveries
        .iter()
        .filter_map(|(_, body)| event_id(body))
        .collect::<HashSet<_>>()
        .len()
}

/// A downstream that answers 200 at once and counts what it got per event id.
async fn downstream() -> anyhow::Result<(SocketAddr, Arc<Counter>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let counter = Arc::new(Counter::default());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let counter = counter.clone();
            move |body: Bytes| {
                let counter = counter.clone();
                async move {
                    match event_id(&body) {
                        Some(id) => {
                            *counter
                                .per_event
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .entry(id)
                                .or_default() += 1;
                        }
                        None => {
                            counter.unknown.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    "ok"
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, counter))
}

pub(crate) fn free_port() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Peak RSS summed over `pid` and its children (a cluster's primary and its workers), and how
/// many processes that is. Each process's own peak, so at most that much was ever resident at
/// once.
pub(crate) fn tree_peak_rss_kib(pid: u32) -> (u64, usize) {
    let mut pids = vec![pid];
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if parent(child) == Some(pid) {
                pids.push(child);
            }
        }
    }
    (pids.iter().map(|&p| peak_rss_kib(p)).sum(), pids.len())
}

/// A process's parent, from `/proc/PID/stat`: `pid (comm) state ppid ...`, where `comm` may
/// hold spaces and parentheses, so the fields are read after the last `)`.
pub(crate) fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Pre-signed deliveries: `n` of them, a share repeating an event at least 1000 places earlier.
pub(crate) fn deliveries(
    n: usize,
    duplicates: f64,
) -> anyhow::Result<Vec<(hyper::HeaderMap, Bytes)>> {
    deliveries_of(0, n, duplicates)
}

/// [`deliveries`] of round `round` (from 0): the same pattern, of events no other round has.
fn deliveries_of(
    round: usize,
    n: usize,
    duplicates: f64,
) -> anyhow::Result<Vec<(hyper::HeaderMap, Bytes)>> {
    let prefix = if round == 0 {
        "evt_gw_".to_owned()
    } else {
        format!("evt_gw{round}_")
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    signed((0..n).map(|i| {
        if i > 1000 && (rand() % 10_000) as f64 / 10_000.0 < duplicates {
            format!("{prefix}{}", rand() as usize % (i - 1000))
        } else {
            format!("{prefix}{i}")
        }
    }))
}

/// One signed delivery of a Stripe event per id, signed now.
pub(crate) fn signed(
    ids: impl Iterator<Item = String>,
) -> anyhow::Result<Vec<(hyper::HeaderMap, Bytes)>> {
    let sc: idemgate_gateway::config::SourceConfig = serde_json::from_value(serde_json::json!({
        "name": "stripe-live", "provider": "stripe", "secrets": [SECRET],
    }))?;
    let signer = idemgate_gateway::verifier(&sc)?;
    let now = SystemTime::now();
    let mut out = Vec::with_capacity(ids.size_hint().0);
    for id in ids {
        let body = Bytes::from(serde_json::to_vec(&serde_json::json!({
            "id": id, "object": "event", "type": "invoice.paid",
            "data": {"object": {"id": "in_1", "amount_paid": 4200, "currency": "eur"}},
        }))?);
        let mut headers = signer.sign(&id, now, &body)?;
        headers.insert("content-type", "application/json".parse()?);
        out.push((headers, body));
    }
    Ok(out)
}

/// Warms a receiver listening on `listen` up with `--warmup` new events of their own (then
/// forgotten by `counter`), then sends the deliveries; its rate, latencies and answers.
async fn load(
    receiver: Receiver,
    listen: SocketAddr,
    counter: &Counter,
    args: &Args,
    after_warmup: impl AsyncFnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<Sent> {
    if args.warmup > 0 {
        let warmup = signed((0..args.warmup).map(|i| format!("evt_warmup_{i}")))?;
        post_all(listen, warmup, args.connections)
            .await
            .with_context(|| format!("warming {} up", receiver.label()))?;
        // Every warm-up delivery was answered, so its forward is over.
        counter.clear();
    }
    after_warmup().await?;
    let mut all = Vec::with_capacity(args.requests * args.rounds);
    let mut outcomes = BTreeMap::new();
    let mut rounds = Vec::with_capacity(args.rounds);
    let mut elapsed = Duration::ZERO;
    for round in 0..args.rounds {
        let requests = deliveries_of(round, args.requests, args.duplicates)?;
        let started = Instant::now();
        let answers = post_all(listen, requests, args.connections)
            .await
            .with_context(|| format!("sending round {} to {}", round + 1, receiver.label()))?;
        let took = started.elapsed();
        elapsed += took;
        let mut latencies = Vec::with_capacity(answers.len());
        for (latency, outcome) in answers {
            latencies.push(latency);
            *outcomes.entry(outcome).or_default() += 1;
        }
        all.extend_from_slice(&latencies);
        rounds.push(Round {
            rps: args.requests as f64 / took.as_secs_f64(),
            latency: Latency::of(&mut latencies),
        });
        if args.rounds > 1 {
            eprintln!(
                "gateway: {} round {}: {:.0} req/s, p99 {} ms",
                receiver.short(),
                round + 1,
                rounds[round].rps,
                ms(rounds[round].latency.p99)
            );
        }
    }
    Ok(Sent {
        rps: (args.requests * args.rounds) as f64 / elapsed.as_secs_f64(),
        latency: Latency::of(&mut all),
        answers: outcomes,
        rounds,
    })
}

/// What a receiver was sent, and how it answered: over all rounds, and per round.
struct Sent {
    rps: f64,
    latency: Latency,
    answers: BTreeMap<String, usize>,
    rounds: Vec<Round>,
}

async fn gateway(store: Store, bin: &Path, args: &Args) -> anyhow::Result<Run> {
    let dir = tempfile::tempdir()?;
    let (down, counter) = downstream().await?;
    let listen = free_port()?;
    let pg_schema = schema("bench_gw");
    let store_toml = match store {
        Store::Sqlite => format!(
            "[store]\nkind = \"sqlite\"\npath = {:?}\n",
            dir.path().join("data").display().to_string()
        ),
        Store::Postgres => format!(
            "[store]\nkind = \"postgres\"\nurl = {:?}\n[store.postgres]\nschema = {pg_schema:?}\n",
            args.postgres.url
        ),
    };
    let config = format!(
        "listen = \"{listen}\"\n{store_toml}\n[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"{SECRET}\"]\nforward_url = \"http://{down}/hook\"\n"
    );
    let config_path = dir.path().join("idemgate.toml");
    std::fs::write(&config_path, config)?;
    let mut child = serve(bin, &config_path, listen).await?;
    let pid = child.id().context("the gateway exited at once")?;
    let receiver = Receiver::Idemgate(store);
    let analyze = async || {
        if store != Store::Postgres {
            return Ok(());
        }
        let admin = crate::pg::admin(&args.postgres.url).await?;
        let (_, stand_in) = args.maintenance.resolve(&admin).await?;
        if stand_in {
            eprintln!("gateway: ANALYZE of the gateway's tables (--maintenance)");
            admin
                .batch_execute(&format!(
                    "ANALYZE {pg_schema}.dedup; ANALYZE {pg_schema}.history"
                ))
                .await
                .context("ANALYZE of the gateway's tables")?;
        }
        Ok(())
    };
    let sent = load(receiver, listen, &counter, args, analyze).await;
    let peak_rss_kib = peak_rss_kib(pid);
    child.start_kill()?;
    let _ = child.wait().await;
    if store == Store::Postgres {
        drop_schema(&args.postgres.url, &pg_schema).await?;
    }
    let sent = sent?;
    Ok(Run {
        receiver,
        rps: sent.rps,
        latency: sent.latency,
        peak_rss_kib,
        processes: 1,
        answers: sent.answers,
        forwarded: counter.summary(),
        raw: None,
        rounds: sent.rounds,
    })
}

/// `node --version`, or `None` when there is no node to run.
pub(crate) async fn node_version(node: &Path) -> Option<String> {
    let out = tokio::process::Command::new(node)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .await
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The tutorial receiver's directory, in this crate's source tree.
fn tutorial_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tutorial")
}

/// The tutorial receiver on PostgreSQL, in a schema of its own, dropped after.
async fn tutorial(args: &Args) -> anyhow::Result<Run> {
    let dir = tutorial_dir();
    npm_ci(
        &dir,
        "to install the tutorial receiver's packages",
        "--tutorial off skips the tutorial receiver",
    )
    .await?;
    let schema = schema("bench_tutorial");
    let result = tutorial_in(&dir, &schema, args).await;
    let dropped = drop_schema(&args.postgres.url, &schema).await;
    let run = result?;
    dropped?;
    Ok(run)
}

async fn tutorial_in(dir: &Path, schema: &str, args: &Args) -> anyhow::Result<Run> {
    let (down, counter) = downstream().await?;
    let listen = free_port()?;
    let mut child = tokio::process::Command::new(&args.node)
        .arg("receiver.js")
        .current_dir(dir)
        .env("PORT", listen.port().to_string())
        .env("DATABASE_URL", &args.postgres.url)
        .env("SECRET", SECRET)
        .env("DOWNSTREAM", format!("http://{down}/hook"))
        .env("SCHEMA", schema)
        .env("WORKERS", TUTORIAL_WORKERS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {} receiver.js", args.node.display()))?;
    let pid = child.id().context("the tutorial receiver exited at once")?;
    let stdout = child
        .stdout
        .take()
        .context("the tutorial receiver's stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let ready = async {
        while let Some(line) = lines.next_line().await? {
            if line.starts_with("ready") {
                return Ok(());
            }
        }
        bail!("the tutorial receiver exited before it was ready (its words are above)")
    };
    tokio::time::timeout(TUTORIAL_READY, ready)
        .await
        .with_context(|| {
            format!(
                "the tutorial receiver did not say it was ready within {} s",
                TUTORIAL_READY.as_secs()
            )
        })??;
    let receiver = Receiver::Tutorial;
    let sent = load(receiver, listen, &counter, args, async || Ok(())).await;
    let (peak_rss_kib, processes) = tree_peak_rss_kib(pid);
    // End of input: the primary stops its workers and exits.
    drop(child.stdin.take());
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        child.start_kill()?;
        let _ = child.wait().await;
    }
    let sent = sent?;
    Ok(Run {
        receiver,
        rps: sent.rps,
        latency: sent.latency,
        peak_rss_kib,
        processes,
        answers: sent.answers,
        forwarded: counter.summary(),
        raw: None,
        rounds: sent.rounds,
    })
}

/// POSTs every delivery to `/hooks/stripe-live` over `connections` keep-alive connections, each
/// taking the next one; each answer's latency and outcome ([`Conn::post`]).
pub(crate) async fn post_all(
    listen: SocketAddr,
    requests: Vec<(hyper::HeaderMap, Bytes)>,
    connections: usize,
) -> anyhow::Result<Vec<(Duration, String)>> {
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (requests, next) = (requests.clone(), next.clone());
            tokio::spawn(async move {
                let mut conn = Conn::open(listen).await?;
                let mut seen = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((headers, body)) = requests.get(i) else {
                        return Ok::<_, anyhow::Error>(seen);
                    };
                    let t = Instant::now();
                    let outcome = conn
                        .post("/hooks/stripe-live", headers, body.clone())
                        .await?;
                    seen.push((t.elapsed(), outcome));
                }
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(requests.len());
    for t in tasks {
        answers.extend(t.await??);
    }
    Ok(answers)
}

/// Starts `idemgate serve --config config` (logging warnings only) and waits until it answers
/// `/healthz` on `listen`.
pub(crate) async fn serve(
    bin: &Path,
    config: &Path,
    listen: SocketAddr,
) -> anyhow::Result<tokio::process::Child> {
    let child = tokio::process::Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env("IDEMGATE_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let ready = async {
        loop {
            if let Ok(mut conn) = Conn::open(listen).await
                && conn
                    .get("/healthz")
                    .await
                    .map(|s| s == 200)
                    .unwrap_or(false)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), ready)
        .await
        .context("the gateway did not answer /healthz within 20 s")?;
    Ok(child)
}

/// One keep-alive HTTP/1.1 connection.
pub(crate) struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Conn {
    pub(crate) async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Self { sender })
    }

    pub(crate) async fn get(&mut self, path: &str) -> anyhow::Result<u16> {
        let req = Request::get(path)
            .header("host", "bench")
            .body(Full::new(Bytes::new()))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await?;
        Ok(status)
    }

    /// POSTs and returns the `Idemgate-Outcome`, or `HTTP <status>` from a receiver that sends
    /// none.
    pub(crate) async fn post(
        &mut self,
        path: &str,
        headers: &hyper::HeaderMap,
        body: Bytes,
    ) -> anyhow::Result<String> {
        let mut req = Request::post(path)
            .header("host", "bench")
            .body(Full::new(body))?;
        *req.headers_mut() = headers.clone();
        req.headers_mut().insert("host", "bench".parse()?);
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let outcome = match resp
            .headers()
            .get("idemgate-outcome")
            .and_then(|v| v.to_str().ok())
        {
            Some(outcome) => outcome.to_owned(),
            None => format!("HTTP {}", resp.status().as_u16()),
        };
        resp.into_body().collect().await?;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacked_charts_make_one_well_formed_document() {
        let chart = |id: &str, title: &str| {
            Bars::new(
                Frame::new(id, title),
                vec!["a".into(), "b".into()],
                "x",
                "y",
            )
            .series(Series::new("s", [1.0, 2.0]))
            .render()
        };
        let (top, bottom) = (chart("top", "Upper"), chart("bottom", "Lower"));
        let (w, h1) = size(&top).unwrap();
        let (_, h2) = size(&bottom).unwrap();
        let svg = stack("both", "Both <charts>", "two", &[top, bottom]).unwrap();
        idemgate_chart::xml::check(&svg).unwrap();
        assert_eq!(size(&svg), Some((w, h1 + h2)));
        assert!(
            svg.contains(&format!("<svg y=\"{h1}\" ")),
            "the second below the first"
        );
        assert!(svg.contains(">Upper</title>") && svg.contains(">Lower</title>"));
        assert!(svg.contains("Both &lt;charts&gt;"));
        assert!(stack("x", "x", "x", &["<g/>".to_owned()]).is_err());
    }

    #[test]
    fn the_downstream_count_shows_a_repeated_or_missing_forward() {
        let counter = Counter::default();
        for id in ["evt_1", "evt_2", "evt_2", "evt_3", "evt_2"] {
            *counter
                .per_event
                .lock()
                .unwrap()
                .entry(id.to_owned())
                .or_default() += 1;
        }
        let f = counter.summary();
        assert_eq!((f.events, f.deliveries, f.repeated, f.most), (3, 5, 1, 3));
        assert!(!f.exactly_once(3));
        assert_eq!(
            f.describe(3),
            "3 of 3 events, 1 more than once (up to 3 times; 5 deliveries)"
        );
        let once = Forwarded {
            events: 3,
            deliveries: 3,
            most: 1,
            ..Forwarded::default()
        };
        assert!(once.exactly_once(3));
        assert!(!once.exactly_once(4), "one event never forwarded");
        assert_eq!(once.describe(4), "3 of 4 events, none twice");
    }

    #[test]
    fn deliveries_repeat_the_share_asked_for() {
        let sent = deliveries(5_000, 0.1).unwrap();
        let events = distinct_events(&sent);
        let repeats = 5_000 - events;
        assert!((300..=500).contains(&repeats), "{repeats} repeats");
        assert_eq!(distinct_events(&deliveries(2_000, 0.0).unwrap()), 2_000);
        let mut two_rounds = deliveries_of(0, 2_000, 0.1).unwrap();
        let first = distinct_events(&two_rounds);
        two_rounds.extend(deliveries_of(1, 2_000, 0.1).unwrap());
        assert_eq!(
            distinct_events(&two_rounds),
            2 * first,
            "rounds share no event"
        );
        assert_eq!(
            event_id(br#"{"object":"event","id":"evt_9"}"#).as_deref(),
            Some("evt_9")
        );
        assert_eq!(event_id(b"not json"), None);
    }

    #[test]
    fn a_child_process_counts_in_the_peak_rss_of_its_parent() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let found = parent(child.id());
        // Peaks only grow (other tests run in this process meanwhile): each read before the
        // tree's is a lower bound of what the tree's sum holds for that process.
        let own = peak_rss_kib(std::process::id());
        let its = peak_rss_kib(child.id());
        let (kib, processes) = tree_peak_rss_kib(std::process::id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found, Some(std::process::id()));
        assert!(processes >= 2, "{processes}");
        assert!(its > 0, "the child's peak RSS was not read");
        assert!(kib >= own + its, "{kib} KiB < {own} + {its}");
    }
}
