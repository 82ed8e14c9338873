//! `Dedup::process_once` on the in-memory store: each outcome, failures, panics, cancellation and
//! lease renewal.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idemgate::{
    AnyStore, ClaimMode, ClaimRequest, ClaimStore, Dedup, Fingerprint, Key, LateDuplicates, Once,
    ProcessError,
};

const TTL: Duration = Duration::from_secs(3_600);
const LEASE: Duration = Duration::from_secs(60);

fn key(id: &str) -> Key {
    Key::parse("orders", id).unwrap()
}

fn req(id: &str) -> ClaimRequest {
    ClaimRequest::new(key(id), LEASE, TTL)
}

fn dedup() -> Dedup {
    Dedup::new(AnyStore::memory())
}

async fn ok(dedup: &Dedup, id: &str, runs: &AtomicUsize) -> Once<u32> {
    dedup
        .process_once(req(id), |claimed| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(claimed.token.attempt)
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn an_event_is_processed_once_and_then_a_duplicate() {
    let dedup = dedup();
    let runs = AtomicUsize::new(0);
    assert_eq!(ok(&dedup, "o-1", &runs).await, Once::Processed(1));
    match ok(&dedup, "o-1", &runs).await {
        // `process_once` keeps no result and reads none.
        Once::Duplicate { first_seen, result } => {
            assert!(first_seen.is_some());
            assert_eq!(result, None);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Completed in the store: the record is done.
    let view = dedup.store().lookup(&key("o-1")).await.unwrap();
    assert_eq!(view.record.unwrap().state, idemgate::RecordState::Done);
}

#[tokio::test]
async fn a_failed_work_is_released_and_the_next_delivery_runs_it() {
    let dedup = dedup();
    let failed = dedup
        .process_once(req("o-2"), |_| async { Err::<(), _>("downstream said no") })
        .await;
    assert!(matches!(
        failed,
        Err(ProcessError::Failed("downstream said no"))
    ));
    let runs = AtomicUsize::new(0);
    assert_eq!(ok(&dedup, "o-2", &runs).await, Once::Processed(1));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_work_releases_the_claim() {
    let dedup = dedup();
    let d = dedup.clone();
    let joined = tokio::spawn(async move {
        d.process_once(req("o-3"), |_| async {
            panic!("the work broke");
            #[allow(unreachable_code)]
            Ok::<(), String>(())
        })
        .await
    })
    .await;
    assert!(joined.unwrap_err().is_panic());
    let runs = AtomicUsize::new(0);
    assert_eq!(
        released_then_processed(&dedup, "o-3", &runs).await,
        Once::Processed(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_dropped_midway_releases_the_claim() {
    let dedup = dedup();
    let slow = dedup.process_once(req("o-4"), |_| async {
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok::<(), String>(())
    });
    // The caller gives up (a client that hung up, a timeout): the future is dropped.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), slow)
            .await
            .is_err()
    );
    let runs = AtomicUsize::new(0);
    assert_eq!(
        released_then_processed(&dedup, "o-4", &runs).await,
        Once::Processed(1)
    );
}

/// The release runs in the background: retries until it has landed.
async fn released_then_processed(dedup: &Dedup, id: &str, runs: &AtomicUsize) -> Once<u32> {
    for _ in 0..100 {
        match ok(dedup, id, runs).await {
            Once::InFlight { .. } => tokio::time::sleep(Duration::from_millis(20)).await,
            other => return other,
        }
    }
    panic!("the claim of {id} was never released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_caller_meanwhile_is_in_flight_and_the_lease_is_renewed() {
    let dedup = dedup();
    // A lease of 300 ms, and work that takes a second: without renewal the second caller would
    // take the claim over.
    let lease = Duration::from_millis(300);
    let first = {
        let dedup = dedup.clone();
        tokio::spawn(async move {
            dedup
                .process_once(ClaimRequest::new(key("o-5"), lease, TTL), |_| async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, String>("shipped")
                })
                .await
        })
    };
    let runs = Arc::new(AtomicUsize::new(0));
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let runs = runs.clone();
        let second = dedup
            .process_once(ClaimRequest::new(key("o-5"), lease, TTL), |_| async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>("shipped twice")
            })
            .await
            .unwrap();
        assert!(matches!(second, Once::InFlight { .. }), "{second:?}");
    }
    assert_eq!(first.await.unwrap().unwrap(), Once::Processed("shipped"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn another_payload_under_a_live_id_is_a_conflict() {
    let dedup = dedup();
    let runs = AtomicUsize::new(0);
    let with = |fp: u8| req("o-6").fingerprint(Fingerprint([fp; 32]));
    dedup
        .process_once(with(1), |_| async { Ok::<_, String>(()) })
        .await
        .unwrap();
    let other = dedup
        .process_once(with(2), |_| async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(())
        })
        .await
        .unwrap();
    assert!(matches!(other, Once::Conflict { .. }), "{other:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn late_duplicates_follow_the_policy() {
    let dedup = dedup();
    let short = |policy| {
        ClaimRequest::new(
            key("o-7"),
            Duration::from_millis(100),
            Duration::from_millis(150),
        )
        .late_duplicates(policy)
    };
    dedup
        .process_once(short(LateDuplicates::Flag), |_| async {
            Ok::<_, String>(())
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    // Rejected: not run again.
    let rejected = dedup
        .process_once(short(LateDuplicates::Reject), |_| async {
            Ok::<_, String>(())
        })
        .await
        .unwrap();
    assert!(
        matches!(rejected, Once::LateDuplicate { .. }),
        "{rejected:?}"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    // Flagged: run again, and told.
    let flagged = dedup
        .process_once(short(LateDuplicates::Flag), |claimed| async move {
            Ok::<_, String>(claimed.late_duplicate.is_some())
        })
        .await
        .unwrap();
    assert_eq!(flagged, Once::Processed(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn marked_on_receipt_other_deliveries_are_duplicates_while_it_runs() {
    let dedup = dedup();
    let on_receipt = || req("o-8").mode(ClaimMode::OnReceipt);
    let first = {
        let dedup = dedup.clone();
        tokio::spawn(async move {
            dedup
                .process_once(on_receipt(), |_| async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok::<_, String>(())
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = dedup
        .process_once(on_receipt(), |_| async { Ok::<_, String>(()) })
        .await
        .unwrap();
    assert!(matches!(second, Once::Duplicate { .. }), "{second:?}");
    assert_eq!(first.await.unwrap().unwrap(), Once::Processed(()));
}

#[tokio::test]
async fn the_observer_hears_every_claim() {
    let heard = Arc::new(AtomicUsize::new(0));
    let dedup = Dedup::builder(AnyStore::memory())
        .on_claim({
            let heard = heard.clone();
            move |req, result, _took| {
                assert_eq!(req.key.source.as_str(), "orders");
                assert!(result.is_ok());
                heard.fetch_add(1, Ordering::SeqCst);
            }
        })
        .build();
    let runs = AtomicUsize::new(0);
    ok(&dedup, "o-9", &runs).await;
    ok(&dedup, "o-9", &runs).await;
    assert_eq!(heard.load(Ordering::SeqCst), 2);
}

/// A claim whose caller leaves before the store answers (a request that timed out while the
/// store was slow) is seen through and, won, released at once: no record is left `processing`
/// for a lease that nobody holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_caller_left_before_the_answer_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let store = idemgate_sqlite::SqliteStore::open(dir.path()).unwrap();
    let dedup = Dedup::new(AnyStore::new(store));
    // Another connection holds the database's write lock, so the writer cannot answer while
    // the caller waits (the store is slow); the caller gives up, and only then is the lock let go.
    let blocker = rusqlite::Connection::open(dir.path().join(idemgate_sqlite::DB_FILE)).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let gave_up =
        tokio::time::timeout(Duration::from_millis(100), dedup.claim(req("o-left"))).await;
    assert!(
        gave_up.is_err(),
        "the writer answered through a held write lock"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    let mut outcomes = Vec::new();
    for _ in 0..200 {
        let view = dedup.store().lookup(&key("o-left")).await.unwrap();
        outcomes = view.history.iter().map(|h| h.outcome).collect::<Vec<_>>();
        if view.record.is_none() && !outcomes.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    use idemgate::HistoryOutcome::{Claimed, Released};
    assert_eq!(outcomes, [Claimed, Released]);
    // The sender's retry is processed at once, not answered in_flight for a lease.
    let runs = AtomicUsize::new(0);
    assert_eq!(ok(&dedup, "o-left", &runs).await, Once::Processed(1));
}
