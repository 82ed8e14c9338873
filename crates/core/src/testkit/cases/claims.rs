//! The claim cases: what a claim answers (claimed, a duplicate, in flight, taken over once its
//! lease lapses), the fencing of a taken-over claim's token, mark-on-receipt, sources as scopes
//! of event ids, and the holder a claim records. Every store runs them.

use super::*;
use crate::claim::{ClaimMode, RecordState};

pub async fn first_claim_is_claimed(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    assert_eq!(token.attempt, 1);
    assert_eq!(token.key, key);
    let view = store.lookup(&key).await.unwrap();
    let rec = view.record.expect("a live record");
    assert_eq!(rec.state, RecordState::Processing);
    assert_eq!(rec.attempt, 1);
    assert!(rec.expires_at > rec.first_seen);
}

pub async fn completed_claim_answers_duplicate(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    store.complete(&token).await.unwrap();
    let first_seen = store.lookup(&key).await.unwrap().record.unwrap().first_seen;
    for _ in 0..3 {
        match store.claim(req(&key)).await.unwrap() {
            ClaimOutcome::Duplicate {
                first_seen: f,
                state,
                expires_at,
            } => {
                assert!(expires_at > f, "a duplicate says when its record expires");
                assert_eq!(f, first_seen);
                assert_eq!(state, RecordState::Done);
            }
            other => panic!("expected Duplicate, got {other:?}"),
        }
    }
}

pub async fn live_lease_answers_in_flight(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    claimed(&store, req(&key)).await;
    match store.claim(req(&key)).await.unwrap() {
        ClaimOutcome::InFlight { retry_after } => {
            assert!(
                retry_after > Duration::ZERO && retry_after <= LONG_LEASE,
                "{retry_after:?}"
            );
        }
        other => panic!("expected InFlight, got {other:?}"),
    }
}

pub async fn lapsed_lease_is_taken_over(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let first = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, LONG_TTL),
    )
    .await;
    let expires_before = store.lookup(&key).await.unwrap().record.unwrap().expires_at;
    h.advance(SHORT_LEASE).await;
    let second = claimed(&store, req(&key)).await;
    assert_eq!(second.attempt, first.attempt + 1);
    let rec = store.lookup(&key).await.unwrap().record.unwrap();
    assert_eq!(rec.attempt, 2);
    assert_eq!(
        rec.expires_at, expires_before,
        "a takeover keeps expires_at"
    );
    assert_eq!(
        outcomes(&store, &key).await,
        [HistoryOutcome::Claimed, HistoryOutcome::Reclaimed]
    );
}

pub async fn stale_token_is_fenced_after_takeover(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let first = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, LONG_TTL),
    )
    .await;
    h.advance(SHORT_LEASE).await;
    let second = claimed(&store, req(&key)).await;
    assert_stale(store.complete(&first).await);
    assert_stale(store.release(&first).await);
    // The stale calls changed nothing: the second holder still holds the claim.
    let rec = store.lookup(&key).await.unwrap().record.unwrap();
    assert_eq!((rec.state, rec.attempt), (RecordState::Processing, 2));
    store.complete(&second).await.unwrap();
    assert!(matches!(
        store.claim(req(&key)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
}

pub async fn mark_on_receipt_is_done_at_once(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key).mode(ClaimMode::OnReceipt)).await;
    assert_eq!(token.attempt, 1);
    match store
        .claim(req(&key).mode(ClaimMode::OnReceipt))
        .await
        .unwrap()
    {
        ClaimOutcome::Duplicate { state, .. } => assert_eq!(state, RecordState::Done),
        other => panic!("expected Duplicate, got {other:?}"),
    }
    // Completing a mark-on-receipt claim is allowed and changes nothing.
    store.complete(&token).await.unwrap();
    assert_eq!(
        outcomes(&store, &key).await,
        [HistoryOutcome::Claimed, HistoryOutcome::Duplicate]
    );
}

pub async fn sources_scope_event_ids(h: &impl Harness) {
    let store = h.store();
    let a = key("source-a");
    let b = Key::new("source-b".parse().unwrap(), a.event_id.clone());
    let ta = claimed(&store, req(&a)).await;
    let tb = claimed(&store, req(&b)).await;
    store.complete(&ta).await.unwrap();
    assert!(matches!(
        store.claim(req(&a)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    assert!(matches!(
        store.claim(req(&b)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    // A token names its key: b's token cannot finish a's record.
    let forged = ClaimToken {
        key: a.clone(),
        ..tb.clone()
    };
    assert_stale(store.release(&forged).await);
    store.release(&tb).await.unwrap();
}

pub async fn lookup_of_unknown_event_is_empty(h: &impl Harness) {
    let view = h.store().lookup(&key("src")).await.unwrap();
    assert!(view.record.is_none() && view.history.is_empty());
}

pub async fn claimed_answer_carries_its_expiry(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    match store.claim(req(&key)).await.unwrap() {
        ClaimOutcome::Claimed {
            expires_at,
            late_duplicate,
            ..
        } => {
            let rec = store.lookup(&key).await.unwrap().record.unwrap();
            assert_eq!(expires_at, rec.expires_at);
            assert_eq!(late_duplicate, None);
        }
        other => panic!("expected Claimed, got {other:?}"),
    }
}

pub async fn claims_record_their_holder(h: &impl Harness) {
    let store = h.store();
    let (a, b) = (holder("gw-a", 1), holder("gw-b", 7));
    let key = key("src");
    claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, LONG_TTL).holder(a.clone()),
    )
    .await;
    assert_eq!(record(&store, &key).await.holder, Some(a.clone()));
    h.advance(SHORT_LEASE).await;
    let token = claimed(&store, req(&key).holder(b.clone())).await;
    let rec = record(&store, &key).await;
    assert_eq!(
        (rec.attempt, rec.holder),
        (2, Some(b.clone())),
        "a takeover records its holder"
    );
    store.renew(&token, LONG_LEASE).await.unwrap();
    assert_eq!(record(&store, &key).await.holder, Some(b.clone()));
    store.complete(&token).await.unwrap();
    assert_eq!(
        record(&store, &key).await.holder,
        None,
        "a done record has no holder"
    );
    let receipt = self::key("src");
    claimed(
        &store,
        req(&receipt).mode(ClaimMode::OnReceipt).holder(a.clone()),
    )
    .await;
    assert_eq!(record(&store, &receipt).await.holder, None);
    let anonymous = self::key("src");
    claimed(&store, req(&anonymous)).await;
    assert_eq!(record(&store, &anonymous).await.holder, None);
}
