//! The SQLite store's clock against a wall clock that steps: a lease this process holds is not
//! taken over by its own next claim because the host's clock jumped ahead, and an expiry is not
//! stretched because it jumped back.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key, SteadyClock};
use idemgate_sqlite::{SqliteOptions, SqliteStore};

/// The wall clock of this test: the real one, stepped by `STEP_S` seconds.
static STEP_S: AtomicI64 = AtomicI64::new(0);

fn wall() -> SystemTime {
    let step = STEP_S.load(Ordering::SeqCst);
    if step >= 0 {
        SystemTime::now() + Duration::from_secs(step as u64)
    } else {
        SystemTime::now() - Duration::from_secs(step.unsigned_abs())
    }
}

fn req(id: &str, lease: Duration, ttl: Duration) -> ClaimRequest {
    ClaimRequest::new(Key::parse("src", id).unwrap(), lease, ttl)
}

#[tokio::test]
async fn a_wall_clock_step_moves_no_lease_and_no_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_with(
        dir.path(),
        SqliteOptions {
            clock: Arc::new(SteadyClock::with_wall(wall)),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let lease = Duration::from_secs(60);
    let ClaimOutcome::Claimed { .. } = store
        .claim(req("held", lease, Duration::from_secs(3_600)))
        .await
        .unwrap()
    else {
        panic!("not claimed");
    };
    let ClaimOutcome::Claimed { .. } = store
        .claim(req("short", lease, Duration::from_secs(90)))
        .await
        .unwrap()
    else {
        panic!("not claimed");
    };

    // Two minutes ahead: on the wall clock the lease lapsed (and "short" expired), but not for
    // the process holding them.
    STEP_S.store(120, Ordering::SeqCst);
    let again = store
        .claim(req("held", lease, Duration::from_secs(3_600)))
        .await
        .unwrap();
    assert!(
        matches!(again, ClaimOutcome::InFlight { retry_after } if retry_after > Duration::from_secs(55)),
        "the live claim was taken over after a clock step: {again:?}"
    );
    assert!(matches!(
        store
            .claim(req("short", lease, Duration::from_secs(90)))
            .await
            .unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    let ahead = store.clock().wall_divergence_ms().unwrap();
    assert!((119_000..=120_100).contains(&ahead), "{ahead}");

    // And back ten minutes: nothing is stretched or shortened either.
    STEP_S.store(-600, Ordering::SeqCst);
    let record = store
        .lookup(&Key::parse("src", "held").unwrap())
        .await
        .unwrap()
        .record
        .unwrap();
    let left = record.lease_until.unwrap().since(store.clock().now());
    assert!(left > Duration::from_secs(55) && left <= lease, "{left:?}");
    STEP_S.store(0, Ordering::SeqCst);
}
