//! The completion and release cases: a release lets the next delivery claim afresh, a completed
//! claim cannot be released (one marked on receipt can), and a stale or repeated call changes
//! nothing. Every store runs them.

use super::*;
use crate::claim::{ClaimMode, RecordState};

pub async fn release_lets_the_next_delivery_claim(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    store.release(&token).await.unwrap();
    assert!(store.lookup(&key).await.unwrap().record.is_none());
    let again = claimed(&store, req(&key)).await;
    assert_eq!(again.attempt, 1);
    assert_eq!(
        outcomes(&store, &key).await,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::Released,
            HistoryOutcome::Claimed
        ]
    );
}

pub async fn token_of_a_released_claim_stays_stale(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let old = claimed(&store, req(&key)).await;
    store.release(&old).await.unwrap();
    let new = claimed(&store, req(&key)).await;
    assert_eq!(old.attempt, new.attempt, "both are first attempts");
    assert_stale(store.complete(&old).await);
    assert_stale(store.release(&old).await);
    store.complete(&new).await.unwrap();
}

/// A release sent with the token that completed the claim (a worker undoing its own
/// completion by mistake) is refused and changes nothing: the event stays processed, its
/// retry a duplicate.
pub async fn a_completed_claim_cannot_be_released(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    store.complete(&token).await.unwrap();
    let refused = store.release(&token).await;
    assert!(
        matches!(&refused, Err(StoreError::Completed { key: k, attempt: 1 }) if *k == key),
        "{refused:?}"
    );
    let rec = record(&store, &key).await;
    assert_eq!((rec.state, rec.completed), (RecordState::Done, true));
    assert!(matches!(
        store.claim(req(&key)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    assert_eq!(
        outcomes(&store, &key).await,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::Completed,
            HistoryOutcome::Duplicate
        ],
        "the refusal wrote nothing"
    );
    // Completing again is still no error.
    store.complete(&token).await.unwrap();
}

/// Mark-on-receipt's undo: the record is done at the claim, and a release (its work failed)
/// deletes it so the sender's retry runs the work again.
pub async fn a_claim_marked_on_receipt_may_be_released(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key).mode(ClaimMode::OnReceipt)).await;
    let rec = record(&store, &key).await;
    assert_eq!((rec.state, rec.completed), (RecordState::Done, false));
    store.release(&token).await.unwrap();
    assert!(store.lookup(&key).await.unwrap().record.is_none());
    assert_eq!(claimed(&store, req(&key)).await.attempt, 1);
}

pub async fn complete_twice_is_harmless(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    store.complete(&token).await.unwrap();
    store.complete(&token).await.unwrap();
    assert_eq!(
        outcomes(&store, &key).await,
        [HistoryOutcome::Claimed, HistoryOutcome::Completed]
    );
}
