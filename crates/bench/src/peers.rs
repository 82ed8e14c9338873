//! The `peers` scenario: idemgate beside the nearest existing engine, NATS JetStream's publish
//! deduplication (a stream with a duplicate window on file storage; each publish carries a
//! `Nats-Msg-Id`, and a repeat within the window is acknowledged as a duplicate and not stored).
//! Beside it, in the same run and at the same callers (16 and 64, or `--callers`): idemgate-postgres
//! (batched expiry) and the idemgate Redis store, both marking on receipt (a claim is the event
//! done, as a JetStream publish is); and idemgate-postgres again with `synchronous_commit = off`
//! for its sessions, acknowledging before the commit is flushed, as JetStream acknowledges
//! before fsync (the same durability, to show what the flush costs).
//!
//! Every engine sees the same keys: source `bench`, event ids `r<run>-c<caller>-<i>`, all
//! distinct. idemgate scopes a key by its source; a JetStream window is per stream, so the source
//! goes into the message id (`bench/<event id>`), on the subject `<stream's prefix>.bench`. The
//! dedup window is the same for all (`--window`: JetStream's `duplicate_window`, idemgate's TTL).
//! JetStream's messages have an empty body: the id is all a dedup needs, and idemgate keeps no
//! body in these modes either.
//!
//! Each caller waits for its own answer before the next claim or publish, for every engine. The
//! JetStream callers share `--nats-connections` connections (4 by default; caller `c` takes
//! connection `c mod n`), on which their publishes are in flight together, matched back by
//! reply subject, as NATS clients do. idemgate-postgres claims over its pool (16 connections by
//! default), group-committing concurrent claims; the Redis store over one multiplexed
//! connection.
//!
//! Before each measurement the host's dirty pages are written out (`sync`), so no engine's fsyncs
//! pay for what the engine before it left in the page cache.
//!
//! After each measurement, the first id of up to ten callers is claimed again and must come back
//! a duplicate (from JetStream: `"duplicate": true`), so the window is really in use; JetStream's
//! stream must then hold exactly one message per new id.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use idemgate_chart::{BarLayout, Bars, Frame, Series};
use idemgate_core::{ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, Key};
use idemgate_postgres::Expiry;
use idemgate_redis::{RedisConfig, RedisStore};

use crate::claims::timed;
use crate::nats::Nats;
use crate::report::{Latency, ms, table};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// NATS server with JetStream (a stream of the run's own is created and deleted).
    #[arg(
        long,
        env = "IDEMGATE_TEST_NATS",
        default_value = "nats://127.0.0.1:4222"
    )]
    nats: String,
    #[command(flatten)]
    postgres: crate::pg::Postgres,
    /// Redis for the idemgate Redis store (keys under a prefix of the run's own, deleted after).
    #[arg(
        long,
        env = "IDEMGATE_TEST_REDIS",
        default_value = "redis://127.0.0.1:6379"
    )]
    redis: String,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    secs: u64,
    /// Concurrent callers, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    callers: Vec<usize>,
    /// Connections the JetStream callers share.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    nats_connections: u64,
    /// Engines to measure, comma-separated (all by default; every service is still set up).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "jetstream,postgres,postgres-no-flush,redis"
    )]
    engines: Vec<Engine>,
    /// The dedup window: JetStream's duplicate_window and idemgate's TTL.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    window: Duration,
    /// Where the chart goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

/// The engines compared, in the order each caller count measures them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Engine {
    /// NATS JetStream, publishing with Nats-Msg-Id.
    Jetstream,
    /// idemgate-postgres, batched expiry.
    Postgres,
    /// The same with `synchronous_commit = off` for its sessions: acknowledged before the
    /// commit is flushed, as JetStream acknowledges before fsync.
    PostgresNoFlush,
    /// The idemgate Redis store.
    Redis,
}

impl Engine {
    const ALL: [Self; 4] = [
        Self::Jetstream,
        Self::Postgres,
        Self::PostgresNoFlush,
        Self::Redis,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Jetstream => "JetStream (Nats-Msg-Id)",
            Self::Postgres => "idemgate-postgres",
            Self::PostgresNoFlush => "idemgate-postgres, synchronous_commit off",
            Self::Redis => "idemgate-redis store",
        }
    }
}

/// The source every key is scoped by.
const SOURCE: &str = "bench";
/// Callers whose first id is claimed again after each measurement.
const REPEATS: usize = 10;
/// A claim's lease (unused in mark-on-receipt mode, where a claim is done at once).
const LEASE: Duration = Duration::from_secs(60);

/// What the run acknowledges with, said under the table.
const DURABILITY_NOTE: &str = "JetStream holds its duplicate window in memory (a map of the \
     window's message ids) and acknowledges a publish once its file store has the message, \
     before any fsync (the file store syncs on a timer, not per publish); idemgate-postgres \
     acknowledges a claim after its transaction's commit is flushed to disk, or with \
     synchronous_commit off before the flush, as JetStream does (a server crash can then forget \
     up to 3 x wal_writer_delay, 600 ms by default, of claims, whose retries would be processed \
     again); the Redis store once Redis has \
     run the claim script in memory (as durable as Redis's own persistence).";

fn event_id(run: usize, caller: usize, i: u64) -> String {
    format!("r{run}-c{caller}-{i}")
}

struct Measured {
    engine: Engine,
    callers: usize,
    connections: usize,
    per_sec: f64,
    latency: Latency,
}

/// What the run creates, so it can all be removed whatever happens.
struct Names {
    stream: String,
    subject: String,
    schema: String,
    no_flush_schema: String,
    redis_prefix: String,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    if args.callers.contains(&0) {
        bail!("--callers: 0 callers measure nothing; give counts of 1 or more");
    }
    let tag = std::process::id();
    let names = Names {
        stream: format!("idemgate_bench_peers_{tag}"),
        subject: format!("idemgate-bench.peers-{tag}.{SOURCE}"),
        schema: format!("bench_peers_{tag}"),
        no_flush_schema: format!("bench_peers_no_flush_{tag}"),
        redis_prefix: format!("idemgate-bench:{tag}:peers:"),
    };
    let mut nats = Vec::new();
    for _ in 0..args.nats_connections {
        nats.push(Nats::connect(&args.nats).await?);
    }
    nats[0]
        .create_stream(&names.stream, &[&names.subject], args.window)
        .await
        .with_context(|| format!("cannot create the stream {}", names.stream))?;
    // Interrupted, the run still removes what it made.
    let result = tokio::select! {
        measured = measure(&args, &names, &nats) => measured,
        stopped = crate::pg::interrupted() => Err(stopped),
    };
    // Clean up everything, reporting the first failure after trying every step.
    let cleanup = [
        nats[0].delete_stream(&names.stream).await,
        async {
            let admin = crate::pg::admin(&args.postgres.url).await?;
            crate::pg::drop_schema(&admin, &names.schema).await?;
            crate::pg::drop_schema(&admin, &names.no_flush_schema).await
        }
        .await,
        delete_prefix(&args.redis, &names.redis_prefix).await,
    ];
    let rows = result?;
    cleanup.into_iter().collect::<anyhow::Result<Vec<()>>>()?;

    let rate = |callers| {
        rows.iter()
            .find(|m| m.engine == Engine::Jetstream && m.callers == callers)
            .map_or(f64::NAN, |m| m.per_sec)
    };
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|m| {
            vec![
                m.engine.name().to_owned(),
                m.callers.to_string(),
                m.connections.to_string(),
                format!("{:.0}", m.per_sec),
                ms(m.latency.p50),
                ms(m.latency.p99),
                ms(m.latency.p999),
                match m.per_sec / rate(m.callers) {
                    r if r.is_finite() => format!("{r:.2}x"),
                    _ => "-".to_owned(),
                },
            ]
        })
        .collect();
    println!(
        "\nFirst receipts of distinct ids, {} s per measurement, each caller waiting for its own \
         answer; window {}; idemgate in mark-on-receipt mode. ratio: against JetStream at the \
         same callers.\n",
        args.secs,
        humantime::format_duration(args.window)
    );
    print!(
        "{}",
        table(
            &[
                "engine",
                "callers",
                "connections",
                "claims/s",
                "p50 ms",
                "p99 ms",
                "p999 ms",
                "ratio",
            ],
            &table_rows
        )
    );
    println!("\n{DURABILITY_NOTE}");

    std::fs::create_dir_all(&args.out)?;
    let chart = args.out.join("peers.svg");
    let shown = Engine::ALL.into_iter().filter(|e| args.engines.contains(e));
    let bars = shown.fold(
        Bars::new(
            Frame::new(
                "peers",
                "First receipts per second, idemgate beside JetStream's dedup",
            )
            .desc(DURABILITY_NOTE),
            args.callers
                .iter()
                .map(|c| format!("{c} callers"))
                .collect(),
            "concurrent callers",
            "claims/s",
        )
        .layout(BarLayout::Grouped),
        |bars, e| {
            // A measurement missing (a failed engine) draws as zero.
            let ys = args.callers.iter().map(|c| {
                rows.iter()
                    .find(|m| m.engine == e && m.callers == *c)
                    .map_or(f64::NAN, |m| m.per_sec)
            });
            bars.series(Series::new(e.name(), ys))
        },
    );
    std::fs::write(&chart, bars.render())?;
    println!("\nchart: {}", chart.display());
    Ok(())
}

async fn measure(args: &Args, names: &Names, nats: &[Nats]) -> anyhow::Result<Vec<Measured>> {
    let pg = crate::pg::store(&args.postgres.url, &names.schema, Expiry::batched()).await?;
    let no_flush_url = with_session_setting(&args.postgres.url, "synchronous_commit", "off");
    let said: String = crate::pg::admin(&no_flush_url)
        .await?
        .query_one("SHOW synchronous_commit", &[])
        .await?
        .get(0);
    if said != "off" {
        bail!("a session opened with synchronous_commit = off has it {said}");
    }
    let pg_no_flush =
        crate::pg::store(&no_flush_url, &names.no_flush_schema, Expiry::batched()).await?;
    let pg_pool = idemgate_postgres::PgConfig::new(args.postgres.url.clone())
        .pool_size
        .get();
    let mut redis_cfg = RedisConfig::new(args.redis.clone());
    redis_cfg.key_prefix = names.redis_prefix.clone();
    let redis = RedisStore::connect(redis_cfg)
        .await
        .with_context(|| format!("cannot open the idemgate Redis store on {}", args.redis))?;
    let secs = Duration::from_secs(args.secs);
    let stored = Arc::new(AtomicU64::new(0));
    let mut out = Vec::new();
    for (run, &callers) in args.callers.iter().enumerate() {
        for engine in Engine::ALL.into_iter().filter(|e| args.engines.contains(e)) {
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                eprintln!("measuring {} at {callers} callers", engine.name());
            }
            settle().await?;
            let (connections, (per_sec, latency)) = match engine {
                Engine::Jetstream => {
                    let measured = timed(
                        callers,
                        secs,
                        publish_op(nats, &names.subject, run, stored.clone()),
                    )
                    .await?;
                    check_jetstream(nats, names, run, callers, stored.load(Ordering::Relaxed))
                        .await?;
                    (nats.len(), measured)
                }
                Engine::Postgres => {
                    let measured =
                        timed(callers, secs, claim_op(pg.clone(), args.window, run)).await?;
                    check_idemgate(&pg, engine.name(), args.window, run, callers).await?;
                    (pg_pool, measured)
                }
                Engine::PostgresNoFlush => {
                    let store = pg_no_flush.clone();
                    let measured = timed(callers, secs, claim_op(store, args.window, run)).await?;
                    check_idemgate(&pg_no_flush, engine.name(), args.window, run, callers).await?;
                    (pg_pool, measured)
                }
                Engine::Redis => {
                    let measured =
                        timed(callers, secs, claim_op(redis.clone(), args.window, run)).await?;
                    check_idemgate(&redis, engine.name(), args.window, run, callers).await?;
                    (1, measured)
                }
            };
            out.push(Measured {
                engine,
                callers,
                connections,
                per_sec,
                latency,
            });
        }
    }
    Ok(out)
}

type Op = std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// A JetStream publish of a new id by caller `c`, on its connection; counts what was stored.
fn publish_op(
    nats: &[Nats],
    subject: &str,
    run: usize,
    stored: Arc<AtomicU64>,
) -> impl Fn(usize, u64) -> Op + Send + Sync + 'static {
    let (nats, subject) = (nats.to_vec(), subject.to_owned());
    move |c, i| {
        let (conn, subject, stored) = (
            nats[c % nats.len()].clone(),
            subject.clone(),
            stored.clone(),
        );
        Box::pin(async move {
            let id = format!("{SOURCE}/{}", event_id(run, c, i));
            let ack = conn.publish(&subject, &id, b"").await?;
            if ack.duplicate {
                bail!("JetStream answered a publish of the new id {id} as a duplicate");
            }
            stored.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }
}

/// A claim of a new key, marked on receipt, by caller `c`.
fn claim_op<S: ClaimStore + Clone + 'static>(
    store: S,
    window: Duration,
    run: usize,
) -> impl Fn(usize, u64) -> Op + Send + Sync + 'static {
    move |c, i| {
        let store = store.clone();
        Box::pin(async move {
            match store.claim(request(run, c, i, window)?).await? {
                ClaimOutcome::Claimed { .. } => Ok(()),
                other => bail!("a claim of a new key answered {other:?}"),
            }
        })
    }
}

fn request(run: usize, c: usize, i: u64, window: Duration) -> anyhow::Result<ClaimRequest> {
    let key = Key::parse(SOURCE, &event_id(run, c, i))?;
    Ok(ClaimRequest::new(key, LEASE, window).mode(ClaimMode::OnReceipt))
}

/// Repeats the first id of up to [`REPEATS`] callers: each must be a duplicate, and the stream
/// must hold exactly the `stored` new ids published so far.
async fn check_jetstream(
    nats: &[Nats],
    names: &Names,
    run: usize,
    callers: usize,
    stored: u64,
) -> anyhow::Result<()> {
    for c in 0..callers.min(REPEATS) {
        let id = format!("{SOURCE}/{}", event_id(run, c, 0));
        let ack = nats[c % nats.len()]
            .publish(&names.subject, &id, b"")
            .await?;
        if !ack.duplicate || ack.stream != names.stream {
            bail!(
                "JetStream stored a repeat of {id} within its window (seq {} in stream {})",
                ack.seq,
                ack.stream
            );
        }
    }
    let held = nats[0].stream_messages(&names.stream).await?;
    if held != stored {
        bail!("JetStream's stream holds {held} messages for {stored} new ids published");
    }
    Ok(())
}

/// Repeats the first key of up to [`REPEATS`] callers: each must be a duplicate.
async fn check_idemgate<S: ClaimStore>(
    store: &S,
    engine: &str,
    window: Duration,
    run: usize,
    callers: usize,
) -> anyhow::Result<()> {
    for c in 0..callers.min(REPEATS) {
        let req = request(run, c, 0, window)?;
        match store.claim(req).await? {
            ClaimOutcome::Duplicate { .. } => {}
            other => bail!(
                "{engine} answered a repeat of {} with {other:?}, not Duplicate",
                event_id(run, c, 0)
            ),
        }
    }
    Ok(())
}

/// `url` with a server setting for its sessions (`options=-c name=value`), in URL or key=value
/// form.
fn with_session_setting(url: &str, name: &str, value: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}options=-c%20{name}%3D{value}")
    } else {
        format!("{url} options='-c {name}={value}'")
    }
}

/// Writes out the host's dirty pages (`sync`) before a measurement. JetStream leaves its
/// messages in the page cache; on a journaling file system the next engine's first fsyncs would
/// otherwise write them out too, and that engine would pay for the one measured before it.
async fn settle() -> anyhow::Result<()> {
    let status = tokio::process::Command::new("sync")
        .status()
        .await
        .context("cannot run sync to write out the page cache between measurements")?;
    if !status.success() {
        bail!("sync failed between measurements ({status})");
    }
    Ok(())
}

/// Deletes every key under `prefix` (SCAN and UNLINK).
async fn delete_prefix(url: &str, prefix: &str) -> anyhow::Result<()> {
    let mut con = redis::Client::open(url)
        .with_context(|| format!("{url} is no Redis URL"))?
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot connect to Redis at {url} to delete {prefix}*"))?;
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(5_000)
            .query_async(&mut con)
            .await
            .with_context(|| format!("cannot list the keys under {prefix} on {url}"))?;
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(&mut con)
                .await
                .with_context(|| format!("cannot delete the keys under {prefix} on {url}"))?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_setting_goes_in_either_url_form() {
        assert_eq!(
            with_session_setting(
                "postgres://root@localhost/test",
                "synchronous_commit",
                "off"
            ),
            "postgres://root@localhost/test?options=-c%20synchronous_commit%3Doff"
        );
        assert_eq!(
            with_session_setting("postgres://h/db?sslmode=disable", "a", "b"),
            "postgres://h/db?sslmode=disable&options=-c%20a%3Db"
        );
        assert_eq!(
            with_session_setting("host=h user=u", "a", "b"),
            "host=h user=u options='-c a=b'"
        );
    }
}
