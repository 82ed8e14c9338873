//! `Dedup::process_once` on a PostgreSQL store that stops answering just after the work
//! succeeded: the caller hears `Processed` within the store wait, not after the outage, and the
//! event's other deliveries meanwhile are answered as duplicates here, without reaching the
//! store (where a lease that lapsed during the outage could be taken over and the event
//! processed again).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use idemgate::{AnyStore, ClaimRequest, Dedup, Key, Once};
use idemgate_postgres::testing::{FaultyLink, LinkMode};
use idemgate_postgres::{PgConfig, PgStore};

fn url() -> String {
    std::env::var("IDEMGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@localhost/test".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_stuck_on_a_silent_store_neither_holds_the_caller_nor_lets_a_retry_through() {
    let pg: tokio_postgres::Config = url().parse().unwrap();
    let Some(()) = idemgate_core::testkit::require_service(
        tokio_postgres::connect(&url(), tokio_postgres::NoTls)
            .await
            .map(|_| ()),
        "start PostgreSQL on 127.0.0.1:5432 or set IDEMGATE_TEST_POSTGRES",
    ) else {
        return;
    };
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    let upstream = tokio::net::lookup_host(("127.0.0.1", port))
        .await
        .unwrap()
        .next()
        .unwrap();
    let link = Arc::new(FaultyLink::start(upstream).await.unwrap());
    let schema = format!("slow_store_{}", std::process::id());
    let mut cfg = PgConfig::new(format!(
        "postgres://{}@{}/{}?sslmode=disable",
        pg.get_user().unwrap_or("root"),
        link.addr(),
        pg.get_dbname().unwrap_or("test")
    ));
    cfg.schema = schema.clone();
    let store = PgStore::connect(cfg).await.unwrap();
    let dedup = Dedup::new(AnyStore::new(store));
    let key = Key::parse("slow", "evt_1").unwrap();
    let req = || {
        ClaimRequest::new(
            key.clone(),
            Duration::from_secs(60),
            Duration::from_secs(3_600),
        )
    };
    let runs = Arc::new(AtomicUsize::new(0));

    let started = Instant::now();
    let first = dedup
        .process_once(req(), |_| {
            let (link, runs) = (link.clone(), runs.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                // The store goes silent as the work succeeds: the completion cannot land.
                link.set(LinkMode::Blackhole);
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    assert_eq!(first, Once::Processed(()));
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "held {took:?} by a silent store"
    );

    // A retry while the completion is pending: a duplicate, answered here.
    let started = Instant::now();
    let again = dedup
        .process_once(req(), |_| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(())
            }
        })
        .await
        .unwrap();
    assert_eq!(
        again,
        Once::Duplicate {
            first_seen: None,
            result: None
        }
    );
    assert!(started.elapsed() < Duration::from_millis(100));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The store answers again: the completion lands.
    link.set(LinkMode::Forward);
    let mut done = false;
    for _ in 0..100 {
        if dedup.finisher().pending() == 0 {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(done, "the completion never landed");
    assert!(matches!(
        dedup
            .process_once(req(), |_| async { Ok::<_, String>(()) })
            .await
            .unwrap(),
        Once::Duplicate {
            first_seen: Some(_),
            ..
        }
    ));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    drop(dedup);
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}
