//! The `claims` scenario: durable claims per second and p50/p99/p999 at 1, 16 and 64 callers on
//! distinct keys, for idemgate-sqlite, idemgate-postgres in both expiry modes, and the plain
//! statement most tutorials write (one `INSERT ... ON CONFLICT DO NOTHING RETURNING` per round
//! trip, each caller on its own connection), same database, same run.

use std::future::Future;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_chart::{Frame, LineChart, LinePanel, Series, XAxis};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};

use crate::pg::admin;
use crate::report::{Latency, ms, table};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    postgres: crate::pg::Postgres,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Concurrent callers, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    callers: Vec<usize>,
    /// Where the chart goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

struct Measured {
    engine: &'static str,
    callers: usize,
    per_sec: f64,
    latency: Latency,
}

/// Runs `op(caller, i)` from `callers` tasks for `secs`; claims per second and latencies.
async fn timed<F, Fut>(callers: usize, secs: Duration, op: F) -> anyhow::Result<(f64, Latency)>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let op = Arc::new(op);
    let started = Instant::now();
    let deadline = started + secs;
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    op(c, i).await?;
                    lat.push(t.elapsed());
                    i += 1;
                }
                Ok::<_, anyhow::Error>(lat)
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    let per_sec = lat.len() as f64 / started.elapsed().as_secs_f64();
    Ok((per_sec, Latency::of(&mut lat)))
}

fn claim_op<S: ClaimStore + Clone + 'static>(
    store: S,
    run: usize,
) -> impl Fn(usize, u64) -> std::pin::Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>
+ Send
+ Sync
+ 'static {
    move |c, i| {
        let store = store.clone();
        Box::pin(async move {
            let key = Key::parse("bench", &format!("r{run}-c{c}-{i}"))?;
            let req = ClaimRequest::new(
                key,
                Duration::from_secs(60),
                Duration::from_secs(7 * 86_400),
            );
            match store.claim(req).await? {
                ClaimOutcome::Claimed { .. } => Ok(()),
                other => anyhow::bail!("a claim of a new key answered {other:?}"),
            }
        })
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let secs = Duration::from_secs(args.secs);
    let admin = admin(&args.postgres.url).await?;
    let tag = std::process::id();
    let (plain, batched, partitioned) = (
        format!("bench_plain_{tag}"),
        format!("bench_batched_{tag}"),
        format!("bench_partitioned_{tag}"),
    );
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {plain}; CREATE TABLE {plain}.processed_webhooks (
                 event_id text PRIMARY KEY, event_type text NOT NULL, expires_at timestamptz NOT NULL)"
        ))
        .await?;
    let result = measure(&args, secs, &plain, &batched, &partitioned).await;
    for schema in [&plain, &batched, &partitioned] {
        admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await?;
    }
    let rows = result?;
    let plain_rate = |callers| {
        rows.iter()
            .find(|m| m.engine == "plain statement" && m.callers == callers)
            .map_or(f64::NAN, |m| m.per_sec)
    };
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|m| {
            vec![
                m.engine.to_owned(),
                m.callers.to_string(),
                format!("{:.0}", m.per_sec),
                ms(m.latency.p50),
                ms(m.latency.p99),
                ms(m.latency.p999),
                format!("{:.2}x", m.per_sec / plain_rate(m.callers)),
            ]
        })
        .collect();
    println!(
        "\nDurable claims on distinct keys, {} s per measurement (ratio: against the plain statement at the same callers):\n",
        args.secs
    );
    print!(
        "{}",
        table(
            &[
                "engine", "callers", "claims/s", "p50 ms", "p99 ms", "p999 ms", "ratio"
            ],
            &table_rows
        )
    );
    std::fs::create_dir_all(&args.out)?;
    let chart = args.out.join("claims.svg");
    std::fs::write(
        &chart,
        LineChart::new(
            Frame::new("claims", "Durable claims per second, distinct keys"),
            XAxis::Categories(args.callers.iter().map(|c| c.to_string()).collect()),
            "concurrent callers",
        )
        .panel(
            LinePanel::new("claims/s").all_series(
                [
                    "idemgate-sqlite",
                    "idemgate-postgres batched",
                    "idemgate-postgres partitioned",
                    "plain statement",
                ]
                .iter()
                .map(|e| {
                    // A measurement missing (a failed engine) breaks the line.
                    let ys = args.callers.iter().map(|c| {
                        rows.iter()
                            .find(|m| m.engine == *e && m.callers == *c)
                            .map_or(f64::NAN, |m| m.per_sec)
                    });
                    Series::new(*e, ys)
                }),
            ),
        )
        .render(),
    )?;
    println!("\nchart: {}", chart.display());
    Ok(())
}

async fn measure(
    args: &Args,
    secs: Duration,
    plain: &str,
    batched: &str,
    partitioned: &str,
) -> anyhow::Result<Vec<Measured>> {
    let say = |what: String| {
        if std::io::stderr().is_terminal() {
            eprintln!("measuring {what}");
        }
    };
    let dir = tempfile::tempdir()?;
    let sqlite = idemgate_sqlite::SqliteStore::open(dir.path())?;
    let pg = |schema: &str, expiry| {
        let mut cfg = idemgate_postgres::PgConfig::new(args.postgres.url.clone());
        cfg.schema = schema.to_owned();
        cfg.expiry = expiry;
        idemgate_postgres::PgStore::connect(cfg)
    };
    let pg_batched = pg(batched, idemgate_postgres::Expiry::batched()).await?;
    let pg_partitioned = pg(partitioned, idemgate_postgres::Expiry::partitioned()).await?;
    let mut out = Vec::new();
    for (run, &callers) in args.callers.iter().enumerate() {
        for engine in [
            "idemgate-sqlite",
            "idemgate-postgres batched",
            "idemgate-postgres partitioned",
            "plain statement",
        ] {
            say(format!("{engine} at {callers} callers"));
            let (per_sec, latency) = match engine {
                "idemgate-sqlite" => timed(callers, secs, claim_op(sqlite.clone(), run)).await?,
                "idemgate-postgres batched" => {
                    timed(callers, secs, claim_op(pg_batched.clone(), run)).await?
                }
                "idemgate-postgres partitioned" => {
                    timed(callers, secs, claim_op(pg_partitioned.clone(), run)).await?
                }
                _ => plain_statement(&args.postgres.url, plain, callers, secs, run).await?,
            };
            out.push(Measured {
                engine,
                callers,
                per_sec,
                latency,
            });
        }
    }
    Ok(out)
}

/// The plain statement, one per round trip, each caller on its own connection.
async fn plain_statement(
    url: &str,
    schema: &str,
    callers: usize,
    secs: Duration,
    run: usize,
) -> anyhow::Result<(f64, Latency)> {
    let mut clients = Vec::new();
    for _ in 0..callers {
        let client = admin(url).await?;
        client
            .batch_execute(&format!("SET search_path = {schema}"))
            .await?;
        let stmt = client
            .prepare(
                "INSERT INTO processed_webhooks (event_id, event_type, expires_at) \
                 VALUES ($1, $2, now() + interval '7 days') ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
            )
            .await?;
        clients.push(Arc::new((client, stmt)));
    }
    let clients = Arc::new(clients);
    timed(callers, secs, move |c, i| {
        let conn = clients[c].clone();
        async move {
            let rows = conn
                .0
                .query(&conn.1, &[&format!("r{run}-c{c}-{i}"), &"invoice.paid"])
                .await?;
            anyhow::ensure!(
                rows.len() == 1,
                "the plain insert of a new id returned {} rows",
                rows.len()
            );
            Ok(())
        }
    })
    .await
}
