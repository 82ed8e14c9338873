//! The late-duplicate cases: a delivery of an event processed once, whose record has since
//! expired, is flagged, rejected or claimed afresh as the claim asks, and told late only within
//! the claim's horizon; a released or unfinished attempt does not count as processed, a
//! mark-on-receipt claim does. Every store runs them.

use super::*;
use crate::claim::{ClaimMode, LateDuplicates};

/// Claims and expects a plain `Claimed`, not flagged as a late duplicate.
async fn assert_not_late<S: ClaimStore>(store: &S, req: ClaimRequest) {
    match store.claim(req).await.expect("claim") {
        ClaimOutcome::Claimed { late_duplicate, .. } => assert_eq!(late_duplicate, None),
        other => panic!("expected Claimed, got {other:?}"),
    }
}

/// Claims and completes `key` with a TTL that then passes.
async fn processed_then_expired<H: Harness>(h: &H, key: &Key) {
    let store = h.store();
    let token = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL),
    )
    .await;
    store.complete(&token).await.unwrap();
    h.advance(SHORT_TTL).await;
}

pub async fn late_duplicate_is_flagged_after_the_ttl(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    processed_then_expired(h, &key).await;
    let first = store.lookup(&key).await.unwrap().history[0].at;
    match store
        .claim(req(&key).late_duplicates(LateDuplicates::Flag))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed {
            token,
            late_duplicate,
            ..
        } => {
            assert_eq!(
                late_duplicate,
                Some(first),
                "flagged with the first receipt"
            );
            assert_eq!(token.attempt, 1);
            store.complete(&token).await.unwrap();
        }
        other => panic!("expected a flagged Claimed, got {other:?}"),
    }
    let view = store.lookup(&key).await.unwrap();
    let late = view
        .history
        .iter()
        .find(|e| e.outcome == HistoryOutcome::LateDuplicate);
    let late = late.expect("a late_duplicate history row");
    assert!(late.gap.unwrap() >= SHORT_TTL, "{:?}", late.gap);
    assert!(matches!(
        store.claim(req(&key)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
}

pub async fn late_duplicate_is_rejected_under_reject(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    processed_then_expired(h, &key).await;
    let first = store.lookup(&key).await.unwrap().history[0].at;
    match store
        .claim(req(&key).late_duplicates(LateDuplicates::Reject))
        .await
        .unwrap()
    {
        ClaimOutcome::LateDuplicate {
            first_seen,
            expires_at,
        } => {
            assert_eq!(first_seen, first);
            assert!(expires_at > first_seen);
        }
        other => panic!("expected LateDuplicate, got {other:?}"),
    }
    // Its retries are plain duplicates now.
    let again = store
        .claim(req(&key).late_duplicates(LateDuplicates::Reject))
        .await
        .unwrap();
    assert!(matches!(again, ClaimOutcome::Duplicate { .. }), "{again:?}");
    let hist = outcomes(&store, &key).await;
    assert_eq!(
        hist,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::Completed,
            HistoryOutcome::LateDuplicate,
            HistoryOutcome::Duplicate
        ]
    );
}

pub async fn late_duplicates_off_claims_afresh(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    processed_then_expired(h, &key).await;
    assert_not_late(&store, req(&key).late_duplicates(LateDuplicates::Off)).await;
    assert_eq!(
        outcomes(&store, &key).await.last(),
        Some(&HistoryOutcome::Claimed)
    );
}

/// A delivery of an event processed and first received longer ago than the claim's
/// late-duplicate horizon is a first receipt; within it, a late duplicate.
pub async fn a_late_duplicate_is_told_only_within_the_horizon(h: &impl Harness) {
    let store = h.store();
    let (beyond, within) = (key("src"), key("src"));
    for k in [&beyond, &within] {
        let token = claimed(&store, ClaimRequest::new(k.clone(), SHORT_LEASE, SHORT_TTL)).await;
        store.complete(&token).await.unwrap();
    }
    h.advance(SHORT_TTL).await;
    assert_not_late(&store, req(&beyond).late_horizon(SHORT_TTL / 2)).await;
    assert_eq!(
        outcomes(&store, &beyond).await,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::Completed,
            HistoryOutcome::Claimed
        ],
        "history before the horizon is not asked"
    );
    match store
        .claim(req(&within).late_horizon(SHORT_TTL * 20))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed {
            late_duplicate: Some(_),
            ..
        } => {}
        other => panic!("expected a flagged Claimed within the horizon, got {other:?}"),
    }
}

pub async fn released_attempt_is_not_a_late_duplicate(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    // Processed once in mark-on-receipt mode, then given up: the retry is legitimate.
    let token = claimed(&store, req(&key).mode(ClaimMode::OnReceipt)).await;
    store.release(&token).await.unwrap();
    assert_not_late(&store, req(&key)).await;
}

pub async fn unfinished_attempt_is_not_a_late_duplicate(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    // Claimed, never completed (the worker died), then the record expired.
    claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL),
    )
    .await;
    h.advance(SHORT_TTL).await;
    assert_not_late(&store, req(&key)).await;
}

pub async fn mark_on_receipt_claim_counts_as_processed(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let short = ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL).mode(ClaimMode::OnReceipt);
    claimed(&store, short).await;
    h.advance(SHORT_TTL).await;
    let late = store
        .claim(req(&key).late_duplicates(LateDuplicates::Reject))
        .await
        .unwrap();
    assert!(
        matches!(late, ClaimOutcome::LateDuplicate { .. }),
        "{late:?}"
    );
}
