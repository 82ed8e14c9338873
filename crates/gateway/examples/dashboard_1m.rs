//! How long `GET /dashboard` takes on a store with a million history rows.
//!
//! ```sh
//! cargo run --release -p idemgate-gateway --features postgres --example dashboard_1m -- sqlite
//! cargo run --release -p idemgate-gateway --features postgres --example dashboard_1m -- postgres
//! # options: --rows 1000000 (history rows), --live 100000 (dedup records), --spread 30d (how far
//! # back the rows go, evenly: 1d puts the whole million in the charts' last day)
//! ```
//!
//! Fills a fresh store (SQLite in a temporary directory; PostgreSQL in a schema of its own at
//! `IDEMGATE_TEST_POSTGRES`, dropped at the end) with history rows of two sources spread evenly
//! over the last `--spread`, and live dedup records, in bulk SQL; then times the page through the
//! router as a loopback browser asks for it: the first view (which computes the advisor's
//! figures, a scan of the advisor's month of history), ten views right after it (the advisor's
//! figures cached for a minute, record counts for five seconds), one view 6 s later (record
//! counts taken again: what an open dashboard reloading every 30 s costs between two advisor
//! refreshes, which run behind the page), and each of the page's store queries alone.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use http_body_util::BodyExt;
use idemgate_core::SourceName;
use idemgate_core::store::{HistoryQuery, Stats};
use idemgate_gateway::{AnyStore, AppState, Config, app};
use tower::ServiceExt;

const SOURCES: &str = "api_tokens = [\"bench-token-0123456789\"]\n[[source]]\nname = \"shop\"\nprovider = \"none\"\nretry_window = \"1h\"\n\
    event_id_header = \"x-event-id\"\nmode = \"on_receipt\"\n\
    [[source]]\nname = \"bus\"\nprovider = \"none\"\nretry_window = \"1h\"\n\
    event_id_header = \"x-event-id\"\nmode = \"on_receipt\"\n";

struct Args {
    engine: String,
    rows: u64,
    live: u64,
    spread: Duration,
}

fn args() -> Args {
    let mut args = Args {
        engine: String::new(),
        rows: 1_000_000,
        live: 100_000,
        spread: Duration::from_secs(30 * 86_400),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--rows" => args.rows = value().parse().expect("--rows: a number"),
            "--live" => args.live = value().parse().expect("--live: a number"),
            "--spread" => args.spread = humantime::parse_duration(&value()).expect("--spread: 30d"),
            "sqlite" | "postgres" => args.engine = a,
            other => panic!(
                "unknown argument {other:?}: sqlite|postgres [--rows N] [--live N] [--spread 30d]"
            ),
        }
    }
    assert!(!args.engine.is_empty(), "say sqlite or postgres");
    args
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    let dir = tempfile::tempdir().unwrap();
    let url = std::env::var("IDEMGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@localhost/test".into());
    let schema = format!("dashboard_1m_{}", std::process::id());
    let store_toml = match args.engine.as_str() {
        "sqlite" => format!("[store]\npath = {:?}\n", dir.path().display().to_string()),
        _ => format!(
            "[store]\nkind = \"postgres\"\nurl = {url:?}\n[store.postgres]\nschema = {schema:?}\n"
        ),
    };
    let config = Config::from_toml(&format!("{SOURCES}{store_toml}")).unwrap();
    let store = AnyStore::open(&config.store).await.unwrap();
    let started = Instant::now();
    let spread_ms = args.spread.as_millis() as i64;
    let pg = if args.engine == "sqlite" {
        fill_sqlite(dir.path(), args.rows, args.live, spread_ms);
        None
    } else {
        Some(fill_postgres(&url, &schema, args.rows, args.live, spread_ms).await)
    };
    eprintln!(
        "filled {} history rows over the last {} and {} live records in {:.1} s",
        args.rows,
        humantime::format_duration(args.spread),
        args.live,
        started.elapsed().as_secs_f64()
    );
    let state = AppState::new(&config, store.clone(), None).unwrap();
    let router = app(state);
    let page = || async {
        let mut req = Request::get("/dashboard").body(Body::empty()).unwrap();
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        req.extensions_mut().insert(ConnectInfo(peer));
        let started = Instant::now();
        let response = router.clone().oneshot(req).await.unwrap();
        assert!(response.status().is_success(), "{}", response.status());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (started.elapsed(), body.len())
    };
    let (first, bytes) = page().await;
    let mut warm = Vec::new();
    for _ in 0..10 {
        warm.push(page().await.0);
    }
    warm.sort();
    // A reload 30 s later finds the record counts stale (they are kept 5 s) and counts again;
    // the advisor's figures are still fresh.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (reload, _) = page().await;
    println!(
        "{}: {} history rows over {}, {} live: first view {:.0} ms; then median {:.1} ms, max {:.1} ms; with the record counts taken again {:.0} ms ({} KiB of HTML)",
        args.engine,
        args.rows,
        humantime::format_duration(args.spread),
        args.live,
        ms(first),
        ms(warm[warm.len() / 2]),
        ms(warm[warm.len() - 1]),
        ms(reload),
        bytes / 1024
    );
    // Each query alone.
    let shop = SourceName::new("shop").unwrap();
    let n = |v: u32| NonZeroU32::new(v).unwrap();
    let t = Instant::now();
    store.timeline(&shop, n(60), n(60)).await.unwrap();
    let hour = t.elapsed();
    let t = Instant::now();
    store.timeline(&shop, n(1_800), n(48)).await.unwrap();
    let day = t.elapsed();
    let t = Instant::now();
    store.stats().await.unwrap();
    let stats = t.elapsed();
    let t = Instant::now();
    store
        .observe(idemgate_gateway::dashboard::ADVICE_PERIOD)
        .await
        .unwrap();
    let observe = t.elapsed();
    println!(
        "  one source's last hour {:.1} ms, last day {:.1} ms; stats {:.1} ms; the advisor's 30-day observe {:.0} ms",
        ms(hour),
        ms(day),
        ms(stats),
        ms(observe)
    );
    if let Some(client) = pg {
        client
            .batch_execute(&format!(
                "SET client_min_messages = warning; DROP SCHEMA {schema} CASCADE"
            ))
            .await
            .unwrap();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// History rows: of every four, three first receipts and one duplicate (its gap up to an hour),
/// spread evenly back from now; half to each source.
fn fill_sqlite(dir: &std::path::Path, rows: u64, live: u64, spread_ms: i64) {
    let conn = rusqlite::Connection::open(dir.join(idemgate_sqlite::DB_FILE)).unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    conn.execute_batch(&format!(
        "BEGIN;
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {rows})
         INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms)
         SELECT CASE i % 2 WHEN 0 THEN 'shop' ELSE 'bus' END, 'evt_' || (i / 4),
                CASE i % 4 WHEN 3 THEN 'duplicate' ELSE 'claimed' END, 1, 1,
                {now} - (i * {spread_ms}) / {rows},
                CASE i % 4 WHEN 3 THEN (i * 7919) % 3600000 END
           FROM n;
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {live})
         INSERT INTO dedup (source, event_id, state, attempt, nonce, first_seen, expires_at)
         SELECT CASE i % 2 WHEN 0 THEN 'shop' ELSE 'bus' END, 'live_' || i, 'done', 1, i,
                {now} - 1000, {now} + 86400000
           FROM n;
         COMMIT;"
    ))
    .unwrap();
}

async fn fill_postgres(
    url: &str,
    schema: &str,
    rows: u64,
    live: u64,
    spread_ms: i64,
) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "SET search_path = {schema};
             -- The monthly history partitions the spread reaches back into.
             DO $$
             DECLARE m timestamp := date_trunc('month', (now() - {spread_ms} * interval '1 ms') AT TIME ZONE 'UTC');
             BEGIN
               WHILE m < date_trunc('month', now() AT TIME ZONE 'UTC') LOOP
                 IF to_regclass('history_' || to_char(m, '\"y\"YYYY\"m\"MM')) IS NULL THEN
                   EXECUTE format('CREATE TABLE %I PARTITION OF history FOR VALUES FROM (%L) TO (%L)',
                     'history_' || to_char(m, '\"y\"YYYY\"m\"MM'), m AT TIME ZONE 'UTC',
                     (m + interval '1 month') AT TIME ZONE 'UTC');
                 END IF;
                 m := m + interval '1 month';
               END LOOP;
             END $$;
             INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms)
             SELECT CASE i % 2 WHEN 0 THEN 'shop' ELSE 'bus' END, 'evt_' || (i / 4),
                    CASE i % 4 WHEN 3 THEN 'duplicate' ELSE 'claimed' END, true, 1,
                    now() - (i * {spread_ms} / {rows}) * interval '1 ms',
                    CASE i % 4 WHEN 3 THEN (i * 7919) % 3600000 END
               FROM generate_series(0::bigint, {rows} - 1) AS i;
             INSERT INTO dedup (source, event_id, state, attempt, nonce, first_seen, expires_at)
             SELECT CASE i % 2 WHEN 0 THEN 'shop' ELSE 'bus' END, 'live_' || i, 'done', 1, i,
                    now(), now() + interval '1 day'
               FROM generate_series(0::bigint, {live} - 1) AS i;
             ANALYZE history; ANALYZE dedup;"
        ))
        .await
        .unwrap();
    client
}
