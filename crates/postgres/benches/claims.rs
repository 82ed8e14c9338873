//! Durable claims per second and p50/p99 latency, idemgate's group-committed claim beside the
//! plain one-statement-per-round-trip insert, same server, same run.
//!
//! ```text
//! cargo bench -p idemgate-postgres --bench claims
//! ```
//!
//! Reads `IDEMGATE_TEST_POSTGRES` (default `postgres://root@localhost/test`) and
//! `IDEMGATE_BENCH_SECS` (seconds per measurement, default 5); `IDEMGATE_BENCH_INFLIGHT` and
//! `IDEMGATE_BENCH_LINGER_US` override `batch_inflight` and `batch_linger` for tuning. Each measurement runs its callers
//! on distinct keys; every schema it creates is dropped at the end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key, LateDuplicates};
use idemgate_postgres::{PgConfig, PgStore};
use tokio_postgres::NoTls;

const CALLERS: [usize; 3] = [1, 16, 64];
const PLAIN_SCHEMA: &str = "idemgate_bench_plain";
const STORE_SCHEMA: &str = "idemgate_bench_store";
const PLAIN_TABLE: &str = "CREATE TABLE processed_webhooks (
    event_id   text PRIMARY KEY,
    event_type text NOT NULL,
    expires_at timestamptz NOT NULL
)";
const PLAIN_INSERT: &str = "INSERT INTO processed_webhooks (event_id, event_type, expires_at) \
     VALUES ($1, $2, now() + interval '7 days') ON CONFLICT (event_id) DO NOTHING RETURNING event_id";

#[derive(Debug, Clone, Copy)]
struct Figures {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

fn figures(mut lat: Vec<Duration>, elapsed: Duration) -> Figures {
    lat.sort_unstable();
    let at = |q: f64| {
        lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Figures {
        per_sec: lat.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

async fn admin(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

async fn reset(client: &tokio_postgres::Client, schema: &str) {
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .expect("drop schema");
}

/// `callers` tasks claim distinct keys through one `PgStore` for `secs`.
async fn run_idemgate(
    store: &PgStore,
    callers: usize,
    secs: Duration,
    run: usize,
    late: LateDuplicates,
) -> Figures {
    let started = Instant::now();
    let deadline = started + secs;
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let key = Key::parse("bench", &format!("r{run}-c{c}-{i}")).expect("key");
                    i += 1;
                    let req = ClaimRequest::new(
                        key,
                        Duration::from_secs(60),
                        Duration::from_secs(7 * 86_400),
                    )
                    .late_duplicates(late);
                    let t = Instant::now();
                    let outcome = store.claim(req).await.expect("claim");
                    lat.push(t.elapsed());
                    assert!(matches!(outcome, ClaimOutcome::Claimed { .. }));
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.expect("task"));
    }
    figures(lat, started.elapsed())
}

/// `callers` tasks, each on its own connection, send the plain statement once per round trip.
async fn run_plain(url: &str, callers: usize, secs: Duration, run: usize) -> Figures {
    let mut clients = Vec::new();
    for _ in 0..callers {
        let client = admin(url).await.expect("connect");
        client
            .batch_execute(&format!(
                "SET search_path = {PLAIN_SCHEMA}; SET synchronous_commit = on"
            ))
            .await
            .expect("session");
        clients.push(client);
    }
    let started = Instant::now();
    let deadline = started + secs;
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, client)| {
            tokio::spawn(async move {
                let stmt = client.prepare(PLAIN_INSERT).await.expect("prepare");
                let mut lat = Vec::new();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    let id = format!("r{run}-c{c}-{i}");
                    i += 1;
                    let t = Instant::now();
                    let rows = client
                        .query(&stmt, &[&id, &"invoice.paid"])
                        .await
                        .expect("insert");
                    lat.push(t.elapsed());
                    assert_eq!(rows.len(), 1);
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.expect("task"));
    }
    figures(lat, started.elapsed())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1_000.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let url = std::env::var("IDEMGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@localhost/test".to_owned());
    let secs = Duration::from_secs(
        std::env::var("IDEMGATE_BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(5),
    );
    let admin = match admin(&url).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "benchmark skipped: {e}\nstart PostgreSQL on 127.0.0.1:5432 or set IDEMGATE_TEST_POSTGRES"
            );
            return;
        }
    };
    let sync: String = admin
        .query_one("SHOW synchronous_commit", &[])
        .await
        .expect("show")
        .get(0);
    let version: String = admin
        .query_one("SHOW server_version", &[])
        .await
        .expect("show")
        .get(0);
    reset(&admin, PLAIN_SCHEMA).await;
    reset(&admin, STORE_SCHEMA).await;
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {PLAIN_SCHEMA}; SET search_path = {PLAIN_SCHEMA}; {PLAIN_TABLE}"
        ))
        .await
        .expect("plain table");

    let mut cfg = PgConfig::new(url.clone());
    cfg.schema = STORE_SCHEMA.to_owned();
    if let Some(n) = std::env::var("IDEMGATE_BENCH_INFLIGHT")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        cfg.batch_inflight = n;
    }
    if let Some(us) = std::env::var("IDEMGATE_BENCH_LINGER_US")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        cfg.batch_linger = Duration::from_micros(us);
    }
    let store = PgStore::connect(cfg).await.expect("connect");

    println!(
        "PostgreSQL {version}, synchronous_commit={sync}, {} s per measurement, distinct keys",
        secs.as_secs()
    );
    println!(
        "| callers | idemgate claims/s | p50 | p99 | claims per batch | plain statement/s | p50 | p99 | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let store_ref = Arc::new(store);
    for (run, callers) in CALLERS.into_iter().enumerate() {
        let ours = run_idemgate(&store_ref, callers, secs, run, LateDuplicates::Flag).await;
        // Each fast-path batch stamps its history rows with one received_at.
        let per_batch: f64 = admin
            .query_one(
                &format!(
                    "SELECT (count(*)::float8 / greatest(count(DISTINCT received_at), 1))::float8 \
                     FROM {STORE_SCHEMA}.history WHERE event_id LIKE $1"
                ),
                &[&format!("r{run}-%")],
            )
            .await
            .expect("batch sizes")
            .get(0);
        let plain = run_plain(&url, callers, secs, run).await;
        println!(
            "| {callers} | {:.0} | {} | {} | {per_batch:.1} | {:.0} | {} | {} | {:.1}x |",
            ours.per_sec,
            ms(ours.p50),
            ms(ours.p99),
            plain.per_sec,
            ms(plain.p50),
            ms(plain.p99),
            ours.per_sec / plain.per_sec
        );
    }
    // What the late-duplicate lookup costs the first-claim path: the same load with the policy
    // off and on (flag), alternated, at 16 callers.
    let mut off = Vec::new();
    let mut flag = Vec::new();
    for round in 0..4 {
        let run = 100 + round;
        if round % 2 == 0 {
            off.push(
                run_idemgate(&store_ref, 16, secs, run, LateDuplicates::Off)
                    .await
                    .per_sec,
            );
        } else {
            flag.push(
                run_idemgate(&store_ref, 16, secs, run, LateDuplicates::Flag)
                    .await
                    .per_sec,
            );
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!();
    println!("| 16 callers | late_duplicates = off | late_duplicates = flag | cost |");
    println!("|---|---:|---:|---:|");
    println!(
        "| claims/s | {:.0} | {:.0} | {:.1}% |",
        mean(&off),
        mean(&flag),
        (1.0 - mean(&flag) / mean(&off)) * 100.0
    );
    drop(store_ref);
    reset(&admin, PLAIN_SCHEMA).await;
    reset(&admin, STORE_SCHEMA).await;
}
