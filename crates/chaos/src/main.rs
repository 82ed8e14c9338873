//! `idemgate-chaos`: idemgate's own chaos suite.
//!
//! Sends M events x K deliveries through real `idemgate serve` processes to a counting
//! downstream while killing gateways, restarting PostgreSQL and Redis, flushing and starving
//! Redis, sweeping aggressively, breaking the downstream, killing inbox dispatchers with a
//! backlog queued, starting a second gateway under a live one's name, hanging up on slow
//! forwards, blackholing PostgreSQL, filling the disk and stepping the wall clock, and killing
//! gateways and restarting brokers that publish into JetStream and RabbitMQ; then lets the senders retry as real senders do and prints a verdict per
//! scenario: events lost, events processed twice, and for each second processing the proof that
//! it was in flight at a SIGKILL (or that it was not).
//!
//! # Layout
//!
//! - [`scenarios`]: the scenarios, each a fault script over a [`run::Run`].
//! - [`run`](mod@run): one scenario run: downstream, gateways, senders, the finish and the verdict.
//! - [`load`]: the senders (signed deliveries, retries with backoff, deadlines).
//! - [`downstream`]: the counting HTTP server the gateways forward to, with its faults.
//! - [`gateway`]: `idemgate serve` processes (config, start, SIGKILL, restart, logs).
//! - [`pg`], [`redis`]: private PostgreSQL and redis-server instances; [`nats`], [`rabbit`]: a
//!   private `nats-server -js` and RabbitMQ node, and [`broker`]: their messages read back.
//! - [`second`]: a second `idemgate serve` on a running gateway's config; [`disk`]: a tmpfs to
//!   fill; [`faketime`]: libfaketime, to step a gateway's wall clock; [`health`]: `/healthz`
//!   asked while a fault lasts.
//! - [`fault`]: a fault's figures (p99 answer time during it, recovery after it).
//! - [`verdict`]: from the records to lost / processed twice / explained; [`report`]: markdown.
//! - [`cleanup`]: everything started is stopped and removed, also on failure and ctrl-c.
//! - [`rng`], [`clock`], [`http`]: seeded randomness, the run clock, the HTTP client.

mod broker;
mod cleanup;
mod clock;
mod disk;
mod downstream;
mod faketime;
mod fault;
mod gateway;
mod health;
mod http;
mod keyed;
mod load;
mod nats;
mod pg;
mod rabbit;
mod redis;
mod report;
mod rng;
mod run;
mod scenarios;
mod second;
mod verdict;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::report::{Ended, Scenario};

#[derive(Debug, Parser)]
#[command(
    name = "idemgate-chaos",
    about = "idemgate's chaos suite: deliveries through real gateways while things break; a verdict per scenario",
    version
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The idemgate binary (default: the `idemgate` next to this executable).
    #[arg(long, global = true)]
    idemgate: Option<PathBuf>,
    /// Events per scenario.
    #[arg(long, global = true, default_value_t = 600)]
    events: u32,
    /// Deliveries of each event (duplicates a sender sends, each retried until a 2xx).
    #[arg(long, global = true, default_value_t = 3)]
    deliveries: u32,
    /// Events in flight at once, at most.
    #[arg(long, global = true, default_value_t = 24)]
    concurrency: usize,
    /// Seed of every random choice (delays, spreads, storms, restart pauses).
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// The recovery scenario passes only if a restarted gateway processes the retry of every
    /// event that was mid-delivery at its SIGKILL within this long of being ready.
    #[arg(long, global = true, default_value = "2s", value_parser = humantime::parse_duration)]
    recovery_target: Duration,
    /// postgres-blackhole: how long the link to PostgreSQL carries nothing.
    #[arg(long, global = true, default_value = "5s", value_parser = humantime::parse_duration)]
    blackhole: Duration,
    /// full-disk: how long the disk stays full once a write was refused for it.
    #[arg(long, global = true, default_value = "2s", value_parser = humantime::parse_duration)]
    disk_full_for: Duration,
    /// clock-step: how far the gateway's wall clock steps ahead (whole seconds).
    #[arg(long, global = true, default_value = "2m", value_parser = humantime::parse_duration)]
    clock_step: Duration,
    /// Where initdb and pg_ctl are.
    #[arg(long, global = true, default_value = "/usr/lib/postgresql/15/bin")]
    pg_bin: PathBuf,
    /// Keep the run directory (configs, gateway logs, data) instead of removing it.
    #[arg(long, global = true)]
    keep: bool,
    /// Rows shown per table of doubles or lost events.
    #[arg(long, global = true, default_value_t = 25)]
    max_rows: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
enum Command {
    /// Every scenario, in order.
    All,
    /// SIGKILL of the gateway (SQLite) three times under load, each followed by a restart.
    KillSqlite,
    /// SIGKILL of the gateway (PostgreSQL) three times under load, each followed by a restart.
    KillPostgres,
    /// pg_ctl restart -m fast, then a 3 s stop, under load.
    PostgresRestart,
    /// Three gateways on one PostgreSQL, sweeping every second with short TTLs, one SIGKILLed;
    /// in both expiry modes.
    MultiPostgres,
    /// Three gateways on a 3-master Redis Cluster store, one SIGKILLed.
    MultiRedis,
    /// SQLite behind a Redis tier: FLUSHALL, maxmemory 1mb with allkeys-lru, a redis restart.
    RedisTier,
    /// An aggressive sweeper (3 s TTL, a sweep every second) beside the claims.
    Sweeper,
    /// The downstream answers 500 for a while, then hangs past forward_timeout.
    Downstream,
    /// Crash recovery time after a SIGKILL, against --recovery-target.
    Recovery,
    /// Inbox mode (SQLite): SIGKILL of the gateway three times with a backlog queued; drained.
    InboxKillSqlite,
    /// Inbox mode (PostgreSQL): SIGKILL of the gateway three times with a backlog queued; drained.
    InboxKillPostgres,
    /// Inbox mode: three gateways sharing one PostgreSQL queue, one SIGKILLed; drained.
    InboxMultiPostgres,
    /// A second `idemgate serve` under a live gateway's instance name (same address, another
    /// port) while it forwards; on SQLite and PostgreSQL.
    SecondStart,
    /// The downstream slower than the senders wait: they hang up and retry.
    Hangup,
    /// The link to PostgreSQL blackholed for --blackhole under load.
    PostgresBlackhole,
    /// SQLite on a small tmpfs, filled for a while under load.
    FullDisk,
    /// The gateway's wall clock stepped --clock-step ahead during forwards (libfaketime).
    ClockStep,
    /// JetStream destination (private nats-server): SIGKILL of the gateway three times under
    /// load, in forward and in inbox mode; every event stored once.
    KillJetstream,
    /// RabbitMQ destination (private node): SIGKILL of the gateway three times under load, in
    /// forward and in inbox mode; nothing lost, every copy kept twice explained.
    KillRabbitmq,
    /// JetStream destination: nats-server restarted, then stopped 10 s, under load (forward and
    /// inbox mode).
    JetstreamRestart,
    /// RabbitMQ destination: the node restarted, then stopped 10 s, under load (forward and inbox
    /// mode).
    RabbitmqRestart,
    /// A stream's duplicate window shortened below what the source needs: the audit says so;
    /// on_short_window = "refuse" and a subject no stream captures stop a start.
    ShortWindow,
}

const ORDER: &[Command] = &[
    Command::KillSqlite,
    Command::KillPostgres,
    Command::PostgresRestart,
    Command::MultiPostgres,
    Command::MultiRedis,
    Command::RedisTier,
    Command::Sweeper,
    Command::Downstream,
    Command::Recovery,
    Command::InboxKillSqlite,
    Command::InboxKillPostgres,
    Command::InboxMultiPostgres,
    Command::SecondStart,
    Command::Hangup,
    Command::PostgresBlackhole,
    Command::FullDisk,
    Command::ClockStep,
    Command::KillJetstream,
    Command::KillRabbitmq,
    Command::JetstreamRestart,
    Command::RabbitmqRestart,
    Command::ShortWindow,
];

/// Sizes of every scenario's load.
#[derive(Debug, Clone)]
pub struct Sizes {
    pub events: u32,
    pub deliveries: u32,
    pub concurrency: usize,
}

/// What every scenario shares.
#[derive(Debug)]
pub struct Ctx {
    pub bin: PathBuf,
    pub pg_bin: PathBuf,
    pub sizes: Sizes,
    pub seed: u64,
    /// Distinguishes this run's event ids, schemas and key prefixes from any other run's.
    pub nonce: String,
    pub recovery_target: Duration,
    /// postgres-blackhole's outage, full-disk's hold, clock-step's step.
    pub blackhole: Duration,
    pub disk_full_for: Duration,
    pub clock_step: Duration,
    pub registry: Arc<cleanup::Registry>,
    pub clock: clock::Clock,
    pub client: http::Client,
    /// CI set: a missing tool fails its scenario instead of skipping it.
    pub ci: bool,
    pg: tokio::sync::OnceCell<pg::PrivatePg>,
    nats: tokio::sync::OnceCell<tokio::sync::Mutex<nats::PrivateNats>>,
    rabbit: tokio::sync::OnceCell<tokio::sync::Mutex<rabbit::PrivateRabbit>>,
}

impl Ctx {
    /// The run's private PostgreSQL, started on first use.
    ///
    /// # Errors
    /// When it cannot be started.
    pub async fn postgres(&self) -> anyhow::Result<&pg::PrivatePg> {
        self.pg
            .get_or_try_init(|| async {
                eprintln!("starting a private PostgreSQL (initdb + pg_ctl)");
                pg::PrivatePg::start(&self.pg_bin, self.registry.dir(), self.registry.clone()).await
            })
            .await
    }

    /// The run's private nats-server, started on first use (and again if a scenario left it
    /// stopped), held until the guard is dropped.
    ///
    /// # Errors
    /// When nats-server is missing or does not start.
    pub async fn nats(&self) -> anyhow::Result<tokio::sync::MutexGuard<'_, nats::PrivateNats>> {
        let cell = self
            .nats
            .get_or_try_init(|| async {
                nats::available().await?;
                eprintln!("starting a private nats-server -js");
                let server =
                    nats::PrivateNats::start(self.registry.dir(), self.registry.clone()).await?;
                Ok::<_, anyhow::Error>(tokio::sync::Mutex::new(server))
            })
            .await?;
        let mut server = cell.lock().await;
        server.ensure().await?;
        Ok(server)
    }

    /// The run's private RabbitMQ node, started on first use (and again if a scenario left it
    /// stopped), held until the guard is dropped.
    ///
    /// # Errors
    /// When rabbitmq-server (or, as root, runuser and the rabbitmq user) is missing, or the node
    /// does not start.
    pub async fn rabbit(
        &self,
    ) -> anyhow::Result<tokio::sync::MutexGuard<'_, rabbit::PrivateRabbit>> {
        let cell = self
            .rabbit
            .get_or_try_init(|| async {
                rabbit::available().await?;
                eprintln!("starting a private RabbitMQ node");
                let node = rabbit::PrivateRabbit::start(
                    self.registry.dir(),
                    &self.nonce,
                    self.registry.clone(),
                )
                .await?;
                Ok::<_, anyhow::Error>(tokio::sync::Mutex::new(node))
            })
            .await?;
        let mut node = cell.lock().await;
        node.ensure().await?;
        Ok(node)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let bin = match &cli.idemgate {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("locating this executable")?
            .with_file_name("idemgate"),
    };
    if !bin.exists() {
        anyhow::bail!(
            "{} not found: build it with `cargo build -p idemgate-cli`, or pass --idemgate PATH",
            bin.display()
        );
    }
    // Gateways run in their scenario's directory: the path must not be relative.
    let bin = bin
        .canonicalize()
        .with_context(|| format!("resolving {}", bin.display()))?;
    if cli.events == 0 || cli.deliveries == 0 || cli.concurrency == 0 {
        anyhow::bail!("--events, --deliveries and --concurrency must be above zero");
    }
    let registry = Arc::new(cleanup::Registry::new(cli.keep)?);
    let nonce = format!(
        "{:04x}",
        (std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_micros())
            & 0xffff
    );
    let ctx = Arc::new(Ctx {
        bin,
        pg_bin: cli.pg_bin.clone(),
        sizes: Sizes {
            events: cli.events,
            deliveries: cli.deliveries,
            concurrency: cli.concurrency,
        },
        seed: cli.seed,
        nonce,
        recovery_target: cli.recovery_target,
        blackhole: cli.blackhole,
        disk_full_for: cli.disk_full_for,
        clock_step: cli.clock_step,
        registry: registry.clone(),
        clock: clock::Clock::start(),
        client: http::client(),
        ci: std::env::var_os("CI").is_some(),
        pg: tokio::sync::OnceCell::new(),
        nats: tokio::sync::OnceCell::new(),
        rabbit: tokio::sync::OnceCell::new(),
    });
    let commands: Vec<Command> = match cli.command {
        Command::All => ORDER.to_vec(),
        c => vec![c],
    };
    eprintln!(
        "idemgate-chaos: {} x {} deliveries per scenario, concurrency {}, seed {}; run directory {}",
        cli.events,
        cli.deliveries,
        cli.concurrency,
        cli.seed,
        registry.dir().display()
    );
    let started = Instant::now();
    let work = {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut done = Vec::new();
            for c in commands {
                done.extend(scenario(&ctx, c).await);
            }
            done
        })
    };
    let interrupted = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = async { match &mut term { Some(t) => { t.recv().await; } None => std::future::pending().await } } => "SIGTERM",
        }
    };
    let abort = work.abort_handle();
    let outcome = tokio::select! {
        r = work => r,
        signal = interrupted => {
            eprintln!("{signal}: stopping every gateway and private server, removing the run directory");
            abort.abort();
            tokio::time::sleep(Duration::from_millis(100)).await;
            registry.finish();
            return Ok(ExitCode::from(130));
        }
    };
    let scenarios = match outcome {
        Ok(s) => s,
        Err(e) => {
            registry.finish();
            anyhow::bail!("the scenarios panicked: {e}");
        }
    };
    if let Some(pg) = ctx.pg.get() {
        pg.remove().await;
    }
    if let Some(nats) = ctx.nats.get() {
        nats.lock().await.stop().await;
    }
    if let Some(rabbit) = ctx.rabbit.get() {
        rabbit.lock().await.remove().await;
    }
    registry.finish();
    let header = format!(
        "seed {} - {} events x {} deliveries per scenario - concurrency {} - recovery target {} - {:.1} s in all",
        cli.seed,
        cli.events,
        cli.deliveries,
        cli.concurrency,
        humantime::format_duration(cli.recovery_target),
        started.elapsed().as_secs_f64()
    );
    print!("{}", report::render(&header, &scenarios, cli.max_rows));
    let failed: Vec<&str> = scenarios
        .iter()
        .filter(|s| s.failed())
        .map(|s| s.name)
        .collect();
    if failed.is_empty() {
        eprintln!("every scenario passed");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("failed: {}", failed.join(", "));
        Ok(ExitCode::FAILURE)
    }
}

/// Runs one command's scenarios (multi-postgres is two), timing each.
async fn scenario(ctx: &Ctx, command: Command) -> Vec<Scenario> {
    use scenarios::Store;
    let mut out = Vec::new();
    let runs: Vec<(&'static str, &'static str)> = match command {
        Command::All => Vec::new(),
        Command::KillSqlite => vec![("kill-sqlite", "sqlite")],
        Command::KillPostgres => vec![("kill-postgres", "postgres")],
        Command::PostgresRestart => vec![("postgres-restart", "postgres")],
        Command::MultiPostgres => vec![
            ("multi-postgres-batched", "3 x postgres, batched"),
            ("multi-postgres-partitioned", "3 x postgres, partitioned"),
        ],
        Command::MultiRedis => vec![("multi-redis", "3 x redis cluster")],
        Command::RedisTier => vec![("redis-tier", "sqlite + redis tier")],
        Command::Sweeper => vec![("sweeper", "sqlite")],
        Command::Downstream => vec![("downstream", "sqlite")],
        Command::Recovery => vec![("recovery", "sqlite")],
        Command::InboxKillSqlite => vec![("inbox-kill-sqlite", "sqlite, inbox")],
        Command::InboxKillPostgres => vec![("inbox-kill-postgres", "postgres, inbox")],
        Command::InboxMultiPostgres => vec![("inbox-multi-postgres", "3 x postgres, inbox")],
        Command::SecondStart => vec![
            ("second-start-sqlite", "sqlite"),
            ("second-start-postgres", "postgres"),
        ],
        Command::Hangup => vec![("hangup", "sqlite")],
        Command::PostgresBlackhole => vec![("postgres-blackhole", "postgres via a faulty link")],
        Command::FullDisk => vec![("full-disk", "sqlite on a small tmpfs")],
        Command::ClockStep => vec![("clock-step", "sqlite, libfaketime")],
        Command::KillJetstream => vec![
            ("kill-jetstream", "sqlite -> jetstream"),
            ("inbox-kill-jetstream", "sqlite, inbox -> jetstream"),
        ],
        Command::KillRabbitmq => vec![
            ("kill-rabbitmq", "sqlite -> rabbitmq"),
            ("inbox-kill-rabbitmq", "sqlite, inbox -> rabbitmq"),
        ],
        Command::JetstreamRestart => vec![
            ("jetstream-restart", "sqlite -> jetstream"),
            ("inbox-jetstream-restart", "sqlite, inbox -> jetstream"),
        ],
        Command::RabbitmqRestart => vec![
            ("rabbitmq-restart", "sqlite -> rabbitmq"),
            ("inbox-rabbitmq-restart", "sqlite, inbox -> rabbitmq"),
        ],
        Command::ShortWindow => vec![("short-window", "sqlite -> jetstream")],
    };
    for (name, store) in runs {
        eprintln!("== {name} ({store})");
        let started = Instant::now();
        let result = match name {
            "kill-sqlite" => scenarios::kill(ctx, name, Store::Sqlite).await,
            "kill-postgres" => scenarios::kill(ctx, name, Store::Postgres).await,
            "postgres-restart" => scenarios::postgres_restart(ctx).await,
            "multi-postgres-batched" => scenarios::multi_postgres(ctx, name, "batched").await,
            "multi-postgres-partitioned" => {
                scenarios::multi_postgres(ctx, name, "partitioned").await
            }
            "multi-redis" => scenarios::multi_redis(ctx).await,
            "redis-tier" => scenarios::redis_tier(ctx).await,
            "sweeper" => scenarios::sweeper(ctx).await,
            "downstream" => scenarios::downstream(ctx).await,
            "recovery" => scenarios::recovery(ctx).await,
            "inbox-kill-sqlite" => scenarios::inbox_kill(ctx, name, Store::Sqlite).await,
            "inbox-kill-postgres" => scenarios::inbox_kill(ctx, name, Store::Postgres).await,
            "inbox-multi-postgres" => scenarios::inbox_multi_postgres(ctx).await,
            "second-start-sqlite" => scenarios::second_start(ctx, name, Store::Sqlite).await,
            "second-start-postgres" => scenarios::second_start(ctx, name, Store::Postgres).await,
            "hangup" => scenarios::hangup(ctx).await,
            "postgres-blackhole" => scenarios::postgres_blackhole(ctx).await,
            "full-disk" => scenarios::full_disk(ctx).await,
            "clock-step" => scenarios::clock_step(ctx).await,
            "short-window" => scenarios::short_window(ctx).await,
            broker => {
                use scenarios::Broker;
                let inbox = broker.starts_with("inbox-");
                let on = if broker.contains("jetstream") {
                    Broker::JetStream
                } else {
                    Broker::RabbitMq
                };
                if broker.contains("kill") {
                    scenarios::broker_kill(ctx, name, on, inbox).await
                } else {
                    scenarios::broker_restart(ctx, name, on, inbox).await
                }
            }
        };
        let ended = match result {
            Ok(v) => Ended::Judged(Box::new(v)),
            Err(e) => {
                let text = format!("{e:#}");
                let missing = text.contains("cannot run redis-")
                    || text.contains("no initdb/pg_ctl")
                    || text.contains("needs the `postgres` system user")
                    || text.contains("libfaketime not found")
                    || text.contains("cannot mount a tmpfs")
                    || text.contains("cannot run nats-server")
                    || text.contains("cannot run rabbitmq-server");
                if missing && !ctx.ci {
                    Ended::Skipped(text)
                } else {
                    Ended::Error(text)
                }
            }
        };
        let s = Scenario {
            name,
            store,
            ended,
            seconds: started.elapsed().as_secs_f64(),
        };
        eprintln!(
            "   {name}: {} in {:.1} s",
            match &s.ended {
                Ended::Judged(v) if v.pass() => "pass".to_owned(),
                Ended::Judged(v) => format!(
                    "FAIL (lost {}, unexplained doubles {}, failed checks {})",
                    v.lost.len(),
                    v.unexplained(),
                    v.failures.len()
                ),
                Ended::Error(e) => format!("ERROR: {}", e.lines().next().unwrap_or_default()),
                Ended::Skipped(why) => format!("skipped: {why}"),
            },
            s.seconds
        );
        out.push(s);
    }
    out
}
