//! The lease renewal cases: a renewal keeps a takeover out and changes only the lease, succeeds
//! after the lease lapsed while nobody took over, never reaches beyond the record's expiry,
//! answers a done claim's expiry and writes nothing, and refuses a stale token. Every store runs
//! them.

use super::*;
use crate::claim::ClaimMode;

fn assert_stale_renewal(result: Result<crate::Timestamp, StoreError>) {
    assert!(
        matches!(result, Err(StoreError::StaleToken { .. })),
        "expected StaleToken, got {result:?}"
    );
}

pub async fn renew_keeps_a_takeover_out(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, LONG_TTL),
    )
    .await;
    let before = record(&store, &key).await;
    let until = store.renew(&token, LONG_LEASE).await.expect("renew");
    let rec = record(&store, &key).await;
    assert_eq!(
        rec.lease_until,
        Some(until),
        "renew answers the lease it set"
    );
    assert!(
        until >= before.lease_until.unwrap().plus(LONG_LEASE - SHORT_LEASE),
        "{until:?} against {before:?}"
    );
    assert_eq!(
        (rec.attempt, rec.nonce, rec.expires_at, rec.state),
        (
            before.attempt,
            before.nonce,
            before.expires_at,
            before.state
        ),
        "renew changes only the lease"
    );
    h.advance(SHORT_LEASE).await;
    match store.claim(req(&key)).await.unwrap() {
        ClaimOutcome::InFlight { retry_after } => {
            assert!(retry_after > LONG_LEASE / 2, "{retry_after:?}");
        }
        other => panic!("the renewed lease keeps a takeover out, got {other:?}"),
    }
    store.complete(&token).await.unwrap();
    assert_eq!(
        outcomes(&store, &key).await,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::InFlight,
            HistoryOutcome::Completed
        ],
        "renewals write no history row"
    );
}

pub async fn renew_of_a_stale_token_is_refused(h: &impl Harness) {
    let store = h.store();
    // Taken over.
    let key = key("src");
    let first = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, LONG_TTL),
    )
    .await;
    h.advance(SHORT_LEASE).await;
    let second = claimed(&store, req(&key)).await;
    let held = record(&store, &key).await;
    assert_stale_renewal(store.renew(&first, LONG_LEASE).await);
    assert_eq!(
        record(&store, &key).await,
        held,
        "a refused renewal changes nothing"
    );
    // Released.
    store.release(&second).await.unwrap();
    assert_stale_renewal(store.renew(&second, LONG_LEASE).await);
    assert!(store.lookup(&key).await.unwrap().record.is_none());
    // Expired.
    let other = self::key("src");
    let token = claimed(
        &store,
        ClaimRequest::new(other.clone(), SHORT_TTL, SHORT_TTL),
    )
    .await;
    h.advance(SHORT_TTL).await;
    assert_stale_renewal(store.renew(&token, LONG_LEASE).await);
    assert!(store.lookup(&other).await.unwrap().record.is_none());
}

pub async fn renew_after_the_lease_lapsed_succeeds_while_nobody_took_over(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, LONG_TTL),
    )
    .await;
    h.advance(SHORT_LEASE).await;
    let until = store.renew(&token, LONG_LEASE).await.expect("renew");
    assert_eq!(record(&store, &key).await.lease_until, Some(until));
    assert!(
        matches!(
            store.claim(req(&key)).await.unwrap(),
            ClaimOutcome::InFlight { .. }
        ),
        "renewed in time: no takeover"
    );
    store.complete(&token).await.unwrap();
}

pub async fn renew_never_reaches_beyond_the_record_expiry(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL),
    )
    .await;
    let until = store.renew(&token, LONG_TTL).await.expect("renew");
    let rec = record(&store, &key).await;
    assert_eq!(until, rec.expires_at);
    assert_eq!(rec.lease_until, Some(rec.expires_at));
}

pub async fn renew_of_a_done_claim_answers_its_expiry_and_writes_nothing(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    store.complete(&token).await.unwrap();
    let before = store.lookup(&key).await.unwrap();
    let until = store.renew(&token, LONG_LEASE).await.expect("renew");
    assert_eq!(until, before.record.as_ref().unwrap().expires_at);
    assert_eq!(store.lookup(&key).await.unwrap(), before);
    // A mark-on-receipt claim is done at once.
    let other = self::key("src");
    let token = claimed(&store, req(&other).mode(ClaimMode::OnReceipt)).await;
    let until = store.renew(&token, LONG_LEASE).await.expect("renew");
    assert_eq!(until, record(&store, &other).await.expires_at);
}
