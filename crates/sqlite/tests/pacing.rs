//! The adaptive sweep on SQLite: each claim's time is recorded for the sweeper, and a run backs
//! off while claims are slower than the baseline learned from them, yet deletes every expired
//! record.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_core::sweep::{Pacing, SweepOptions};
use idemgate_core::time::ManualClock;
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key, Stats, Sweep};
use idemgate_sqlite::{SqliteOptions, SqliteStore};

fn key() -> Key {
    Key::parse(
        "src",
        &format!("evt_{:016x}", idemgate_core::machine::nonce()),
    )
    .unwrap()
}

async fn claim(store: &SqliteStore, ttl: Duration) {
    let outcome = store
        .claim(ClaimRequest::new(key(), Duration::from_secs(1), ttl))
        .await
        .unwrap();
    assert!(
        matches!(outcome, ClaimOutcome::Claimed { .. }),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_sweep_backs_off_while_claims_are_slow_and_deletes_every_expired_record() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::starting_now();
    let store = SqliteStore::open_with(
        dir.path(),
        SqliteOptions {
            clock: Arc::new(clock.clone()),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    // 300 records that expire in a minute of the store's clock, then 30 live ones taken one at
    // a time over more than one baseline period: the baseline is learned from them.
    for _ in 0..300 {
        claim(&store, Duration::from_secs(60)).await;
    }
    clock.advance(Duration::from_secs(120));
    for _ in 0..30 {
        claim(&store, Duration::from_secs(3_600)).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let latency = store.claim_latency().expect("the store records its claims");
    let baseline = latency
        .baseline()
        .expect("a baseline, learned from the claims");

    // Claims reported at three times the baseline during the first three pauses.
    let pauses = Mutex::new(Vec::new());
    let pause = |d: Duration| {
        let mut seen = pauses.lock().unwrap();
        if seen.len() < 3 {
            latency.record(baseline * 3, 10);
        }
        seen.push(d);
        async { true }
    };
    let opts = SweepOptions {
        batch: NonZeroU32::new(40).unwrap(),
        pause: Duration::from_millis(10),
        pacing: Pacing::Adaptive,
    };
    let report = store.sweep_run(opts, pause, |_| {}).await.unwrap();
    let ms: Vec<u128> = pauses
        .into_inner()
        .unwrap()
        .iter()
        .map(Duration::as_millis)
        .collect();
    assert_eq!(report.backoffs, 3);
    assert_eq!(ms[..5], [10, 20, 40, 80, 70], "{ms:?}");
    assert_eq!(report.rows, 300);
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.expired, stats.live), (0, 30));
}
