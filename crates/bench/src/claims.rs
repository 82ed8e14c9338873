//! The `claims` scenario: durable claims per second and p50/p99/p999 at 1, 16 and 64 callers (or
//! `--callers`) on distinct keys, for idemgate-sqlite, idemgate-postgres in both expiry modes, the
//! plain statement most tutorials write (one `INSERT ... ON CONFLICT DO NOTHING RETURNING` per
//! round trip, from a pool of as many connections as callers, or as the server has free), and a
//! ceiling: the rows a claim writes, inserted 256 at a time from 4 connections with no claim logic
//! at all. Same database, same run.

use std::future::Future;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use idemgate_chart::{Frame, LineChart, LinePanel, Series, XAxis};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};

use crate::pg::{Slots, admin};
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
    /// Also measure idemgate-postgres (batched) on a store whose history spans this many
    /// monthly partitions (the default 400-day retention keeps 14), pre-filled with
    /// `--history-rows` rows spread over them, beside the fresh store. 0: not measured.
    #[arg(long, default_value_t = 0)]
    history_partitions: usize,
    /// Rows pre-filled into that store's history.
    #[arg(long, default_value_t = 3_000_000)]
    history_rows: u64,
    /// Where the chart goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

const SQLITE: &str = "idemgate-sqlite";
const PG_BATCHED: &str = "idemgate-postgres batched";
const PG_PARTITIONED: &str = "idemgate-postgres partitioned";
const PG_LONG_HISTORY: &str = "idemgate-postgres batched, long history";
const PG_RECENT_HISTORY: &str =
    "idemgate-postgres batched, the same history without its partitions past the horizon";
const PLAIN: &str = "plain statement";
const PLAIN_HISTORY: &str = "plain statement + history row";
const PLAIN_STORE_TABLES: &str = "plain statement + history row, the store's tables";
const CEILING: &str = "ceiling: multi-row inserts";
const ENGINES: [&str; 7] = [
    SQLITE,
    PG_BATCHED,
    PG_PARTITIONED,
    PLAIN,
    PLAIN_HISTORY,
    PLAIN_STORE_TABLES,
    CEILING,
];

/// The plain statement: the tutorial's insert.
const PLAIN_INSERT: &str = "INSERT INTO processed_webhooks (event_id, event_type, expires_at) \
     VALUES ($1, $2, now() + interval '7 days') ON CONFLICT (event_id) DO NOTHING RETURNING event_id";
/// The plain statement with a history row written by the same statement, when it inserted: the
/// least a claim that also answers "did we process X, and when?" writes.
const PLAIN_HISTORY_INSERT: &str = "WITH ins AS (\
     INSERT INTO processed_webhooks (event_id, event_type, expires_at) \
     VALUES ($1, $2, now() + interval '7 days') ON CONFLICT (event_id) DO NOTHING RETURNING event_id) \
     INSERT INTO webhook_history (event_id, event_type, received_at) \
     SELECT ins.event_id, $2, now() FROM ins RETURNING event_id";
/// The same, one claim per statement, into tables of the store's shape (the ceiling's): a dedup
/// row and its 'claimed' history row as `claim_fresh.sql` writes them, with none of its reads.
/// What a claim costs beyond it is the claim's own logic, not the width of its rows.
const PLAIN_STORE_INSERT: &str = "WITH ins AS (\
     INSERT INTO dedup (source, event_id, state, attempt, nonce, fingerprint, first_seen, \
                        lease_until, expires_at, holder_instance, holder_boot) \
     VALUES ('bench', $1, 'processing', 1, 1, NULL, now(), now() + interval '60 s', \
             now() + interval '7 days', NULL, NULL) \
     ON CONFLICT DO NOTHING RETURNING source, event_id, state, fingerprint) \
     INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms, \
                          fingerprint) \
     SELECT ins.source, ins.event_id, 'claimed', ins.state = 'done', 1, now(), NULL, \
            ins.fingerprint FROM ins RETURNING event_id";
/// Target: claims on a store with a long history within this share of a fresh store's.
const LONG_HISTORY_TARGET: f64 = 0.10;
/// Target: one caller's idemgate-postgres claim within this many times the plain statement +
/// history row's time.
const ONE_CALLER_TARGET: f64 = 1.3;

/// Rows per ceiling statement.
const CEILING_BATCH: usize = 256;
/// Connections the ceiling inserts from.
const CEILING_CONNECTIONS: usize = 4;
/// Connections the plain statement's pool leaves free on the server, for everyone else.
const PLAIN_MARGIN: i64 = 10;

const CEILING_SCHEMA: &str = include_str!("../sql/ceiling_schema.sql");
const CEILING_INSERT: &str = include_str!("../sql/ceiling_insert.sql");

struct Measured {
    engine: &'static str,
    callers: usize,
    /// The connections the engine claims over (its pool's limit); none for SQLite.
    connections: Option<usize>,
    per_sec: f64,
    latency: Latency,
}

/// Runs `op(caller, i)` from `callers` tasks for `secs`; claims per second and latencies.
pub(crate) async fn timed<F, Fut>(
    callers: usize,
    secs: Duration,
    op: F,
) -> anyhow::Result<(f64, Latency)>
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

/// The TTL of the scenario's claims (a Stripe-like week).
const CLAIM_TTL: Duration = Duration::from_secs(7 * 86_400);

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
            let req = ClaimRequest::new(key, Duration::from_secs(60), CLAIM_TTL);
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
    let schemas = Schemas {
        plain: format!("bench_plain_{tag}"),
        batched: format!("bench_batched_{tag}"),
        partitioned: format!("bench_partitioned_{tag}"),
        ceiling: format!("bench_ceiling_{tag}"),
        history: format!("bench_history_{tag}"),
        recent: format!("bench_recent_{tag}"),
    };
    // One transaction: a failure leaves neither schema behind.
    admin
        .batch_execute(&format!(
            "BEGIN;
             CREATE SCHEMA {plain}; CREATE TABLE {plain}.processed_webhooks (
                 event_id text PRIMARY KEY, event_type text NOT NULL, expires_at timestamptz NOT NULL);
             CREATE TABLE {plain}.webhook_history (
                 id bigserial PRIMARY KEY, event_id text NOT NULL, event_type text NOT NULL,
                 received_at timestamptz NOT NULL);
             CREATE INDEX ON {plain}.webhook_history (event_id);
             CREATE SCHEMA {ceiling}; SET LOCAL search_path = {ceiling};
             {CEILING_SCHEMA}
             COMMIT;",
            plain = schemas.plain,
            ceiling = schemas.ceiling,
        ))
        .await
        .context("cannot create the plain statement's and the ceiling's tables")?;
    let result = measure(&args, secs, &schemas).await;
    for schema in [
        &schemas.plain,
        &schemas.batched,
        &schemas.partitioned,
        &schemas.ceiling,
        &schemas.history,
        &schemas.recent,
    ] {
        crate::pg::drop_schema(&admin, schema).await?;
    }
    let rows = result?;
    let rate = |engine: &str, callers| {
        rows.iter()
            .find(|m| m.engine == engine && m.callers == callers)
            .map_or(f64::NAN, |m| m.per_sec)
    };
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|m| {
            vec![
                m.engine.to_owned(),
                m.callers.to_string(),
                m.connections
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                format!("{:.0}", m.per_sec),
                ms(m.latency.p50),
                ms(m.latency.p99),
                ms(m.latency.p999),
                format!("{:.2}x", m.per_sec / rate(PLAIN, m.callers)),
                format!("{:.1}%", 100.0 * m.per_sec / rate(CEILING, m.callers)),
            ]
        })
        .collect();
    println!(
        "\nDurable claims on distinct keys, {} s per measurement. connections: the engine's pool \
         (the plain statement's is bounded by the server's free slots, callers beyond it wait for \
         one); ratio: against the plain statement at the same callers; of ceiling: against \
         {CEILING_BATCH}-row inserts of a claim's dedup and history rows from \
         {CEILING_CONNECTIONS} connections, measured again beside each caller count (its \
         latencies are a whole batch's):\n",
        args.secs
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
                "of ceiling"
            ],
            &table_rows
        )
    );
    if args.history_partitions > 0 {
        for &callers in &args.callers {
            // What retention costs: the same rows within the horizon, with and without the
            // partitions before it.
            let kept = rate(PG_LONG_HISTORY, callers) / rate(PG_RECENT_HISTORY, callers);
            println!(
                "\n{callers} callers: history in {} monthly partitions, {:.0} claims/s; the same \
                 rows within the late-duplicate horizon with the older partitions dropped, {:.0} \
                 claims/s; retention kept {:.1}% (target within {:.0}%: {})",
                args.history_partitions,
                rate(PG_LONG_HISTORY, callers),
                rate(PG_RECENT_HISTORY, callers),
                kept * 100.0,
                LONG_HISTORY_TARGET * 100.0,
                if kept >= 1.0 - LONG_HISTORY_TARGET {
                    "met"
                } else {
                    "missed"
                }
            );
            let kept = rate(PG_LONG_HISTORY, callers) / rate(PG_BATCHED, callers);
            println!(
                "{callers} callers: with history in {} monthly partitions holding {} rows, \
                 {:.0} claims/s, {:.1}% of an empty store's {:.0} (the rows within the horizon \
                 included: their indexes are larger)",
                args.history_partitions,
                args.history_rows,
                rate(PG_LONG_HISTORY, callers),
                kept * 100.0,
                rate(PG_BATCHED, callers),
            );
        }
    }
    if args.callers.contains(&1) {
        // Time per claim, one caller: the inverse of the rate.
        let verdict = |ratio: f64| {
            if ratio <= ONE_CALLER_TARGET {
                "met"
            } else {
                "missed"
            }
        };
        let ratio = rate(PLAIN_HISTORY, 1) / rate(PG_BATCHED, 1);
        let like = rate(PLAIN_STORE_TABLES, 1) / rate(PG_BATCHED, 1);
        println!(
            "\none caller: an idemgate-postgres claim takes {ratio:.2}x the plain statement + \
             history row (target at most {ONE_CALLER_TARGET}x: {}), and {like:.2}x the same \
             written into tables of the store's shape ({})",
            verdict(ratio),
            verdict(like)
        );
    }
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
            LinePanel::new("claims/s").all_series(ENGINES.iter().map(|e| {
                // A measurement missing (a failed engine) breaks the line.
                let ys = args.callers.iter().map(|c| {
                    rows.iter()
                        .find(|m| m.engine == *e && m.callers == *c)
                        .map_or(f64::NAN, |m| m.per_sec)
                });
                Series::new(*e, ys)
            })),
        )
        .render(),
    )?;
    println!("\nchart: {}", chart.display());
    Ok(())
}

/// The scenario's schemas, one per engine that works in PostgreSQL.
struct Schemas {
    plain: String,
    batched: String,
    partitioned: String,
    ceiling: String,
    /// The store whose history is pre-filled (`--history-partitions`).
    history: String,
    /// The same history, its monthly partitions older than the claims' late-duplicate horizon
    /// dropped: what the claims read is the same, retention is not.
    recent: String,
}

async fn measure(args: &Args, secs: Duration, schemas: &Schemas) -> anyhow::Result<Vec<Measured>> {
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
    let pg_pool = idemgate_postgres::PgConfig::new(args.postgres.url.clone())
        .pool_size
        .get();
    let pg_batched = pg(&schemas.batched, idemgate_postgres::Expiry::batched()).await?;
    let pg_partitioned = pg(
        &schemas.partitioned,
        idemgate_postgres::Expiry::partitioned(),
    )
    .await?;
    let long_history = if args.history_partitions > 0 {
        let store = pg(&schemas.history, idemgate_postgres::Expiry::batched()).await?;
        say(format!(
            "(pre-filling {} history rows over {} monthly partitions)",
            args.history_rows, args.history_partitions
        ));
        prefill_history(
            &args.postgres.url,
            &schemas.history,
            args.history_partitions,
            args.history_rows,
        )
        .await?;
        let recent = pg(&schemas.recent, idemgate_postgres::Expiry::batched()).await?;
        prefill_history(
            &args.postgres.url,
            &schemas.recent,
            args.history_partitions,
            args.history_rows,
        )
        .await?;
        drop_before_horizon(&args.postgres.url, &schemas.recent).await?;
        Some((store, recent))
    } else {
        None
    };
    let url = &args.postgres.url;
    let mut out = Vec::new();
    for (run, &callers) in args.callers.iter().enumerate() {
        // The long-history store right after the fresh one it is compared with.
        let engines = ENGINES.iter().copied().flat_map(|e| {
            let next = (e == PG_BATCHED && long_history.is_some())
                .then_some([PG_LONG_HISTORY, PG_RECENT_HISTORY]);
            std::iter::once(e).chain(next.into_iter().flatten())
        });
        for engine in engines {
            say(format!("{engine} at {callers} callers"));
            let (connections, (per_sec, latency)) = match engine {
                SQLITE => (
                    None,
                    timed(callers, secs, claim_op(sqlite.clone(), run)).await?,
                ),
                PG_BATCHED => (
                    Some(pg_pool),
                    timed(callers, secs, claim_op(pg_batched.clone(), run)).await?,
                ),
                PG_PARTITIONED => (
                    Some(pg_pool),
                    timed(callers, secs, claim_op(pg_partitioned.clone(), run)).await?,
                ),
                PG_LONG_HISTORY | PG_RECENT_HISTORY => {
                    let (long, recent) = long_history.clone().context("no long-history store")?;
                    let store = if engine == PG_LONG_HISTORY {
                        long
                    } else {
                        recent
                    };
                    (
                        Some(pg_pool),
                        timed(callers, secs, claim_op(store, run)).await?,
                    )
                }
                PLAIN | PLAIN_HISTORY | PLAIN_STORE_TABLES => {
                    let (schema, sql, tag) = match engine {
                        PLAIN => (&schemas.plain, PLAIN_INSERT, "p"),
                        PLAIN_HISTORY => (&schemas.plain, PLAIN_HISTORY_INSERT, "h"),
                        _ => (&schemas.ceiling, PLAIN_STORE_INSERT, "s"),
                    };
                    let (n, m) =
                        plain_statement(url, schema, sql, callers, secs, (tag, run)).await?;
                    (Some(n), m)
                }
                _ => (
                    Some(CEILING_CONNECTIONS),
                    ceiling(url, &schemas.ceiling, secs, run).await?,
                ),
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

/// Gives the store in `schema` a history of `partitions` monthly partitions, the current month
/// and those before it (those after it, made ahead by the store, count too), holding `rows` rows
/// of events no claim of the scenario uses, spread evenly over that span: the history a store
/// that has run for a year or so keeps. Not analyzed afterwards, as nobody would.
async fn prefill_history(
    url: &str,
    schema: &str,
    partitions: usize,
    rows: u64,
) -> anyhow::Result<()> {
    let admin = admin(url).await?;
    let have: i64 = admin
        .query_one(
            &format!("SELECT count(*) FROM pg_partition_tree('{schema}.history') WHERE isleaf"),
            &[],
        )
        .await?
        .get(0);
    let back = (partitions as i64 - have).max(0);
    admin
        .batch_execute(&format!(
            "SET search_path = {schema};
             DO $$
             DECLARE v_month timestamp := date_trunc('month', now() AT TIME ZONE 'UTC');
             BEGIN
                 FOR i IN 1..{back} LOOP
                     v_month := v_month - interval '1 month';
                     EXECUTE format('CREATE TABLE %I PARTITION OF history FOR VALUES FROM (%L) TO (%L)',
                                    'history_' || to_char(v_month, '\"y\"YYYY\"m\"MM'),
                                    v_month AT TIME ZONE 'UTC',
                                    (v_month + interval '1 month') AT TIME ZONE 'UTC');
                 END LOOP;
             END $$;
             INSERT INTO history (source, event_id, outcome, processed, attempt, received_at)
             SELECT 'bench', 'prefilled-' || i, 'completed', true, 1,
                    b.lo + (now() - b.lo) * (i::float8 / {rows})
               FROM (SELECT (date_trunc('month', now() AT TIME ZONE 'UTC')
                             - {back} * interval '1 month') AT TIME ZONE 'UTC' AS lo) b,
                    generate_series(1, {rows}::bigint) AS i;",
        ))
        .await
        .with_context(|| format!("cannot pre-fill the history of {schema}"))?;
    Ok(())
}

/// Drops the history partitions of `schema` that end before the claims' late-duplicate horizon
/// (the default, 30 days for the scenario's TTL) begins: the partitions no claim reads. Their
/// rows are gone; those within the horizon stay as they were.
async fn drop_before_horizon(url: &str, schema: &str) -> anyhow::Result<()> {
    let admin = admin(url).await?;
    let horizon = idemgate_core::default_late_horizon(CLAIM_TTL);
    let old: Vec<String> = admin
        .query(
            &format!(
                "SELECT c.relname::text
                   FROM pg_partition_tree('{schema}.history') t
                   JOIN pg_class c ON c.oid = t.relid
                  WHERE t.isleaf
                    AND (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                      'TO \\(''([^'']+)''\\)'))[1]::timestamptz
                        <= now() - $1::bigint * interval '1 ms'"
            ),
            &[&(horizon.as_millis() as i64)],
        )
        .await
        .with_context(|| format!("cannot list the old history partitions of {schema}"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for table in old {
        admin
            .batch_execute(&format!("DROP TABLE {schema}.{table}"))
            .await
            .with_context(|| format!("cannot drop {schema}.{table}"))?;
    }
    Ok(())
}

/// A plain statement (`sql`: [`PLAIN_INSERT`], [`PLAIN_HISTORY_INSERT`] or
/// [`PLAIN_STORE_INSERT`], which takes the id alone), one per round trip,
/// from a pool of one connection per caller, or of as many as the server has free (less a
/// margin) when that is fewer: callers beyond it wait for a connection, as an application's pool
/// makes them. Claims per second, latencies, and the connections used. `(tag, run)` keeps each
/// measurement's ids apart.
async fn plain_statement(
    url: &str,
    schema: &str,
    sql: &'static str,
    callers: usize,
    secs: Duration,
    (tag, run): (&'static str, usize),
) -> anyhow::Result<(usize, (f64, Latency))> {
    let slots = Slots::read(&admin(url).await?).await?;
    let size = callers.min(slots.free(PLAIN_MARGIN));
    anyhow::ensure!(
        size > 0,
        "PostgreSQL at {url} has no connection free for the plain statement: max_connections {}, \
         {} reserved, {} connected, and {PLAIN_MARGIN} left for others",
        slots.max,
        slots.reserved,
        slots.in_use
    );
    let mut cfg: tokio_postgres::Config = url
        .parse()
        .map_err(|e| anyhow::anyhow!("{url} is no PostgreSQL URL: {e}"))?;
    cfg.options(format!("-c search_path={schema}"));
    let manager = deadpool_postgres::Manager::from_config(
        cfg,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(size)
        .build()
        .context("cannot build the plain statement's pool")?;
    // Every connection opened and its statement prepared before the clock starts.
    let mut warm = Vec::with_capacity(size);
    for _ in 0..size {
        let client = pool.get().await.map_err(|e| {
            let why = crate::pg::reasons(&e);
            anyhow::Error::new(e).context(format!("cannot connect to PostgreSQL at {url}: {why}"))
        })?;
        client.prepare_cached(sql).await?;
        warm.push(client);
    }
    drop(warm);
    let measured = timed(callers, secs, move |c, i| {
        let pool = pool.clone();
        async move {
            let client = pool.get().await?;
            let stmt = client.prepare_cached(sql).await?;
            let id = format!("{tag}{run}-c{c}-{i}");
            let params: &[&(dyn tokio_postgres::types::ToSql + Sync)] = &[&id, &"invoice.paid"];
            let rows = client.query(&stmt, &params[..stmt.params().len()]).await?;
            anyhow::ensure!(
                rows.len() == 1,
                "the plain insert of a new id returned {} rows",
                rows.len()
            );
            Ok(())
        }
    })
    .await?;
    Ok((size, measured))
}

/// The ceiling: [`CEILING_BATCH`] claims' rows per statement from [`CEILING_CONNECTIONS`]
/// connections, whatever the callers. Claims (row pairs) per second and each batch's latency.
async fn ceiling(
    url: &str,
    schema: &str,
    secs: Duration,
    run: usize,
) -> anyhow::Result<(f64, Latency)> {
    let mut conns = Vec::with_capacity(CEILING_CONNECTIONS);
    for _ in 0..CEILING_CONNECTIONS {
        let client = admin(url).await?;
        client
            .batch_execute(&format!("SET search_path = {schema}"))
            .await?;
        let stmt = client
            .prepare(CEILING_INSERT)
            .await
            .context("cannot prepare the ceiling's insert")?;
        conns.push(Arc::new((client, stmt)));
    }
    let (batches, latency) = timed(CEILING_CONNECTIONS, secs, move |c, i| {
        let conn = conns[c].clone();
        async move {
            let ids: Vec<String> = (0..CEILING_BATCH)
                .map(|k| format!("r{run}-w{c}-{i}-{k}"))
                .collect();
            let nonces: Vec<i64> = (0..CEILING_BATCH as i64)
                .map(|k| ((c as i64) << 48) | ((i as i64) * CEILING_BATCH as i64 + k))
                .collect();
            let written = conn.0.execute(&conn.1, &[&ids, &nonces]).await?;
            anyhow::ensure!(
                written == CEILING_BATCH as u64,
                "a ceiling batch of {CEILING_BATCH} wrote {written} history rows"
            );
            Ok(())
        }
    })
    .await?;
    Ok((batches * CEILING_BATCH as f64, latency))
}
