//! A database that stops answering, through a faulty link (a TCP proxy that can stop forwarding,
//! swallow answers and cut connections): claims whose answer was lost are released once the
//! database answers again, and the store recovers when the link does.

mod common;

use std::time::{Duration, Instant};

use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, HistoryOutcome, Key};
use idemgate_postgres::testing::{FaultyLink, LinkMode};
use idemgate_postgres::{Expiry, PgConfig, PgStore};

/// A store on its own schema reached through a faulty link, and a direct one on the same schema
/// to look with.
async fn linked() -> Option<(FaultyLink, PgStore, PgStore, common::SchemaGuard)> {
    let (direct_cfg, guard) = common::config(Expiry::batched());
    let direct = common::connect(direct_cfg.clone()).await?;
    let pg: tokio_postgres::Config = common::url().parse().expect("the test URL parses");
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    let host = match pg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let upstream = tokio::net::lookup_host((host.as_str(), port))
        .await
        .expect("resolve the test server")
        .next()
        .expect("an address");
    let link = FaultyLink::start(upstream).await.expect("start the link");
    let mut cfg = PgConfig::new(format!(
        "postgres://{}@{}/{}?sslmode=disable",
        pg.get_user().unwrap_or("root"),
        link.addr(),
        pg.get_dbname().unwrap_or("test")
    ));
    cfg.schema = direct_cfg.schema.clone();
    cfg.pool_size = std::num::NonZeroUsize::new(4).unwrap();
    let store = PgStore::connect(cfg)
        .await
        .expect("connect through the link");
    Some((link, store, direct, guard))
}

fn req(id: &str) -> ClaimRequest {
    ClaimRequest::new(
        Key::parse("faults", id).unwrap(),
        Duration::from_secs(60),
        Duration::from_secs(3_600),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_answer_was_lost_is_released_once_the_database_answers() {
    let Some((link, store, direct, _guard)) = linked().await else {
        return;
    };
    // Warm: a connection in the pool.
    assert!(matches!(
        store.claim(req("warm")).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    // The claim reaches the server and commits; its answer never comes back, and the
    // connection breaks.
    link.set(LinkMode::SwallowAnswers);
    let claiming = tokio::spawn({
        let store = store.clone();
        async move { store.claim(req("lost")).await }
    });
    let key = Key::parse("faults", "lost").unwrap();
    for _ in 0..100 {
        if direct.lookup(&key).await.unwrap().record.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        direct.lookup(&key).await.unwrap().record.is_some(),
        "the claim committed"
    );
    link.cut();
    let lost = claiming.await.unwrap();
    assert!(lost.is_err(), "the caller was told nothing good: {lost:?}");
    // Back: the store releases the claim it may have won, so the retry is processed at once.
    link.set(LinkMode::Forward);
    let started = Instant::now();
    let mut outcomes = Vec::new();
    while started.elapsed() < Duration::from_secs(15) {
        let view = direct.lookup(&key).await.unwrap();
        outcomes = view.history.iter().map(|h| h.outcome).collect();
        if view.record.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        outcomes,
        [HistoryOutcome::Claimed, HistoryOutcome::Released]
    );
    assert!(matches!(
        store.claim(req("lost")).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_work_again_once_a_blackhole_ends() {
    let Some((link, store, _direct, _guard)) = linked().await else {
        return;
    };
    assert!(store.claim(req("before")).await.is_ok());
    link.set(LinkMode::Blackhole);
    // Waits (the caller bounds it), answers nothing.
    let stuck = tokio::time::timeout(Duration::from_secs(1), store.claim(req("during"))).await;
    assert!(stuck.is_err(), "answered through a blackhole: {stuck:?}");
    link.set(LinkMode::Forward);
    let started = Instant::now();
    let mut answered = false;
    while started.elapsed() < Duration::from_secs(20) {
        if let Ok(Ok(_)) =
            tokio::time::timeout(Duration::from_secs(2), store.claim(req("after"))).await
        {
            answered = true;
            break;
        }
    }
    assert!(
        answered,
        "no claim answered within 20 s of the blackhole's end"
    );
}
