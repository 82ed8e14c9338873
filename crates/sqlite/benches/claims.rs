//! Durable claims per second on the SQLite store, beside the plain approach.
//!
//! `idemgate/N`: N concurrent callers claiming distinct keys through [`SqliteStore`] (WAL,
//! `synchronous = FULL`, group commit). `plain_insert/N`: N threads, each with its own
//! connection to a file set up the same way, sending one `INSERT ... ON CONFLICT DO NOTHING` per
//! transaction. Both are durable per answer; the ratio of their throughputs is what group commit
//! buys.
//!
//! Run: `cargo bench -p idemgate-sqlite`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key, LateDuplicates};
use idemgate_sqlite::SqliteStore;

static NEXT: AtomicU64 = AtomicU64::new(0);

fn next_id() -> String {
    format!("evt_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Splits `iters` operations over `callers` and returns how many each does.
fn share(iters: u64, callers: u64, i: u64) -> u64 {
    iters / callers + u64::from(i < iters % callers)
}

async fn idemgate_claims(
    store: &SqliteStore,
    callers: u64,
    iters: u64,
    late: LateDuplicates,
) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..share(iters, callers, i) {
                    let key = Key::parse("bench", &next_id()).expect("key");
                    let req = ClaimRequest::new(
                        key,
                        Duration::from_secs(60),
                        Duration::from_secs(7 * 86_400),
                    )
                    .late_duplicates(late);
                    let outcome = store.claim(req).await.expect("claim");
                    assert!(matches!(outcome, ClaimOutcome::Claimed { .. }));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    start.elapsed()
}

fn plain_connection(path: &std::path::Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.busy_timeout(Duration::from_secs(30))
        .expect("busy timeout");
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = FULL;
         CREATE TABLE IF NOT EXISTS processed_webhooks (
             event_id TEXT PRIMARY KEY, event_type TEXT, expires_at INTEGER NOT NULL
         ) WITHOUT ROWID;
         CREATE INDEX IF NOT EXISTS processed_webhooks_expiry ON processed_webhooks (expires_at);",
    )
    .expect("setup");
    conn
}

fn plain_inserts(path: &std::path::Path, callers: u64, iters: u64) -> Duration {
    let conns: Vec<_> = (0..callers).map(|_| plain_connection(path)).collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for (i, conn) in conns.into_iter().enumerate() {
            s.spawn(move || {
                let mut stmt = conn
                    .prepare(
                        "INSERT INTO processed_webhooks (event_id, event_type, expires_at)
                         VALUES (?1, 'invoice.paid', unixepoch() * 1000 + 604800000)
                         ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
                    )
                    .expect("prepare");
                for _ in 0..share(iters, callers, i as u64) {
                    let mut rows = stmt.query([next_id()]).expect("insert");
                    assert!(rows.next().expect("row").is_some());
                }
            });
        }
    });
    start.elapsed()
}

fn claims(c: &mut Criterion) {
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime"),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open(dir.path().join("idemgate")).expect("open");
    let plain = dir.path().join("plain.db");

    let mut group = c.benchmark_group("durable_claims");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for callers in [1u64, 16, 64] {
        group.bench_with_input(
            BenchmarkId::new("plain_insert", callers),
            &callers,
            |b, &n| {
                b.iter_custom(|iters| plain_inserts(&plain, n, iters));
            },
        );
        let before = store.writer_stats();
        group.bench_with_input(BenchmarkId::new("idemgate", callers), &callers, |b, &n| {
            b.iter_custom(|iters| {
                rt.block_on(idemgate_claims(&store, n, iters, LateDuplicates::Flag))
            });
        });
        let after = store.writer_stats();
        println!(
            "idemgate/{callers}: {:.1} claims per commit on average, {} at most",
            (after.commands - before.commands) as f64
                / (after.commits - before.commits).max(1) as f64,
            after.largest_batch
        );
    }
    // The late-duplicate lookup's cost on the first-claim path: the same load with it off.
    group.bench_with_input(
        BenchmarkId::new("idemgate_late_off", 16),
        &16u64,
        |b, &n| {
            b.iter_custom(|iters| {
                rt.block_on(idemgate_claims(&store, n, iters, LateDuplicates::Off))
            });
        },
    );
    group.finish();
}

criterion_group!(benches, claims);
criterion_main!(benches);
