//! The expiry cases: an expired record is absent for every operation, swept or not (every store
//! runs these), and a sweep deletes only expired records, in bounded batches (for stores that
//! implement [`Sweep`]).

use super::*;
use std::num::NonZeroU32;

pub async fn expired_record_is_absent(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL),
    )
    .await;
    store.complete(&token).await.unwrap();
    h.advance(SHORT_TTL).await;
    // Not swept, yet absent for every operation.
    assert!(store.lookup(&key).await.unwrap().record.is_none());
    assert_stale(store.complete(&token).await);
    assert_stale(store.release(&token).await);
    let again = claimed(&store, req(&key)).await;
    assert_eq!(again.attempt, 1);
    let hist = outcomes(&store, &key).await;
    assert_eq!(hist.first(), Some(&HistoryOutcome::Claimed));
    assert_eq!(hist.get(1), Some(&HistoryOutcome::Completed));
    assert_eq!(hist.len(), 3, "{hist:?}");
}

pub async fn expired_processing_record_starts_over(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let stale = claimed(&store, ClaimRequest::new(key.clone(), SHORT_TTL, SHORT_TTL)).await;
    h.advance(SHORT_TTL).await;
    let fresh = claimed(&store, req(&key)).await;
    assert_eq!(
        fresh.attempt, 1,
        "an expired record is absent, not taken over"
    );
    assert_stale(store.complete(&stale).await);
    let rec = store.lookup(&key).await.unwrap().record.unwrap();
    assert!(rec.expires_at > rec.first_seen);
}

pub async fn sweep_deletes_only_expired_records_in_bounded_batches<H>(h: &H)
where
    H: Harness,
    H::Store: Sweep,
{
    let store = h.store();
    let short: Vec<Key> = (0..5).map(|_| key("sweep")).collect();
    for k in &short {
        let token = claimed(&store, ClaimRequest::new(k.clone(), SHORT_LEASE, SHORT_TTL)).await;
        store.complete(&token).await.unwrap();
    }
    let long = key("sweep");
    claimed(&store, req(&long)).await;
    h.advance(SHORT_TTL).await;
    let two = NonZeroU32::new(2).unwrap();
    let mut deleted = Vec::new();
    loop {
        let n = store.sweep_expired(two).await.unwrap();
        assert!(n <= 2, "a batch deletes at most its size, got {n}");
        if n == 0 {
            break;
        }
        deleted.push(n);
    }
    assert_eq!(deleted.iter().sum::<u64>(), 5, "{deleted:?}");
    assert!(
        store.lookup(&long).await.unwrap().record.is_some(),
        "live records stay"
    );
    // History outlives the dedup record.
    assert!(!store.lookup(&short[0]).await.unwrap().history.is_empty());
}
