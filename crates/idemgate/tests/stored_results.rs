//! `Dedup::process_once_storing` on the in-memory store (on a manual clock): the work's result
//! kept with the completion and given back to the event's duplicates byte for byte; a result
//! over the limit, a failed work, a claim marked on receipt and an expired record, each with the
//! answer its duplicates get.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idemgate::engines::core::ManualClock;
use idemgate::{
    AnyStore, ClaimMode, ClaimRequest, ClaimStore, Dedup, Key, MemoryStore, Once, ProcessError,
    RESULT_LIMIT, RecordResult, StoredResult,
};

const TTL: Duration = Duration::from_secs(3_600);
const LEASE: Duration = Duration::from_secs(60);

fn key(id: &str) -> Key {
    Key::parse("payments", id).unwrap()
}

fn req(id: &str) -> ClaimRequest {
    ClaimRequest::new(key(id), LEASE, TTL)
}

fn on_clock() -> (Dedup, ManualClock) {
    let clock = ManualClock::starting_now();
    let store = AnyStore::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    (Dedup::new(store), clock)
}

/// What a payments API answers a creation: a status, headers to replay, a body.
fn created(id: &str) -> StoredResult {
    StoredResult::new(201)
        .header("content-type", "application/json")
        .header("location", format!("/payments/{id}"))
        .body(format!(r#"{{"id":"{id}","amount":1000}}"#).into_bytes())
}

/// Processes `id` keeping `created(payment)` as its result; counts the runs.
async fn create(
    dedup: &Dedup,
    req: ClaimRequest,
    payment: &str,
    runs: &AtomicUsize,
) -> Once<String> {
    dedup
        .process_once_storing(req, |_claimed| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>((payment.to_owned(), created(payment)))
        })
        .await
        .unwrap()
}

fn replayed(once: Once<String>) -> Option<RecordResult> {
    match once {
        Once::Duplicate {
            first_seen: Some(_),
            result,
        } => result,
        other => panic!("expected a duplicate answered by the store, got {other:?}"),
    }
}

#[tokio::test]
async fn a_duplicate_gets_the_first_result_byte_for_byte() {
    let (dedup, _clock) = on_clock();
    let runs = AtomicUsize::new(0);
    assert_eq!(
        create(&dedup, req("k-1"), "pay_1", &runs).await,
        Once::Processed("pay_1".to_owned())
    );
    // The retry's work would create another payment: it does not run, and hears the first's.
    for _ in 0..3 {
        let again = create(&dedup, req("k-1"), "pay_2", &runs).await;
        assert_eq!(
            replayed(again),
            Some(RecordResult::Stored(created("pay_1")))
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // `process_once` keeps none and reads none.
    let plain = dedup
        .process_once(req("k-1"), |_| async { Ok::<_, String>(()) })
        .await
        .unwrap();
    assert!(
        matches!(plain, Once::Duplicate { result: None, .. }),
        "{plain:?}"
    );
}

#[tokio::test]
async fn a_result_over_the_limit_completes_the_claim_without_it() {
    let clock = ManualClock::starting_now();
    let store = AnyStore::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let limit = created("pay_1").size() - 1;
    let dedup = Dedup::builder(store).result_limit(limit).build();
    assert_eq!(dedup.result_limit(), limit);
    let runs = AtomicUsize::new(0);
    // The work was done: processed, whatever became of its result.
    assert_eq!(
        create(&dedup, req("k-2"), "pay_1", &runs).await,
        Once::Processed("pay_1".to_owned())
    );
    let rec = dedup
        .store()
        .lookup(&key("k-2"))
        .await
        .unwrap()
        .record
        .unwrap();
    assert!(rec.completed, "completed without its result");
    assert_eq!(
        replayed(create(&dedup, req("k-2"), "pay_2", &runs).await),
        Some(RecordResult::Withheld {
            size: created("pay_1").size()
        })
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The default limit is 64 KiB.
    assert_eq!(Dedup::new(AnyStore::memory()).result_limit(), RESULT_LIMIT);
}

#[tokio::test]
async fn a_failed_work_keeps_nothing_and_its_retry_keeps_its_own() {
    let (dedup, _clock) = on_clock();
    let failed = dedup
        .process_once_storing(req("k-3"), |_| async {
            Err::<(String, StoredResult), _>("the bank said no")
        })
        .await;
    assert!(matches!(
        failed,
        Err(ProcessError::Failed("the bank said no"))
    ));
    assert!(
        dedup
            .store()
            .lookup(&key("k-3"))
            .await
            .unwrap()
            .record
            .is_none()
    );
    let runs = AtomicUsize::new(0);
    assert_eq!(
        create(&dedup, req("k-3"), "pay_3", &runs).await,
        Once::Processed("pay_3".to_owned())
    );
    assert_eq!(
        replayed(create(&dedup, req("k-3"), "pay_4", &runs).await),
        Some(RecordResult::Stored(created("pay_3")))
    );
}

/// No completion, no result: a claim marked done on receipt, or completed by `process_once`,
/// answers its duplicates that none was kept.
#[tokio::test]
async fn without_a_completion_that_kept_one_a_duplicate_hears_none_was_kept() {
    let (dedup, _clock) = on_clock();
    let runs = AtomicUsize::new(0);
    let on_receipt = || req("k-4").mode(ClaimMode::OnReceipt);
    assert_eq!(
        create(&dedup, on_receipt(), "pay_5", &runs).await,
        Once::Processed("pay_5".to_owned())
    );
    assert_eq!(
        replayed(create(&dedup, on_receipt(), "pay_6", &runs).await),
        Some(RecordResult::None)
    );
    dedup
        .process_once(req("k-5"), |_| async { Ok::<_, String>(()) })
        .await
        .unwrap();
    assert_eq!(
        replayed(create(&dedup, req("k-5"), "pay_7", &runs).await),
        Some(RecordResult::None)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The result lives as long as the record: once it expired, the event is processed again and
/// its new result is the one replayed.
#[tokio::test]
async fn a_result_expires_with_its_record() {
    let (dedup, clock) = on_clock();
    let runs = AtomicUsize::new(0);
    create(&dedup, req("k-6"), "pay_8", &runs).await;
    clock.advance(TTL);
    assert_eq!(
        create(&dedup, req("k-6"), "pay_9", &runs).await,
        Once::Processed("pay_9".to_owned())
    );
    assert_eq!(
        replayed(create(&dedup, req("k-6"), "pay_10", &runs).await),
        Some(RecordResult::Stored(created("pay_9")))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
