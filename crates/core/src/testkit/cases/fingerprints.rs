//! The fingerprint cases: a delivery whose payload fingerprint differs from the first receipt's
//! is a conflict, and one without a fingerprint never is. Every store runs them.

use super::*;

pub async fn fingerprint_mismatch_is_a_conflict(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key).fingerprint(fp(1))).await;
    let first_seen = store.lookup(&key).await.unwrap().record.unwrap().first_seen;
    // While processing, and once done.
    for done in [false, true] {
        if done {
            store.complete(&token).await.unwrap();
        }
        match store.claim(req(&key).fingerprint(fp(2))).await.unwrap() {
            ClaimOutcome::Conflict { first_seen: f } => assert_eq!(f, first_seen),
            other => panic!("expected Conflict, got {other:?}"),
        }
    }
    assert!(matches!(
        store.claim(req(&key).fingerprint(fp(1))).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    let view = store.lookup(&key).await.unwrap();
    assert_eq!(
        view.record.unwrap().fingerprint,
        Some(fp(1)),
        "a conflict writes nothing"
    );
    let conflicts: Vec<_> = view
        .history
        .iter()
        .filter(|e| e.outcome == HistoryOutcome::Conflict)
        .collect();
    assert_eq!(conflicts.len(), 2);
    assert_eq!(
        conflicts[0].fingerprint,
        Some(fp(2)),
        "history keeps the conflicting fingerprint"
    );
}

pub async fn missing_fingerprint_never_conflicts(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    store.complete(&token).await.unwrap();
    assert!(matches!(
        store.claim(req(&key).fingerprint(fp(9))).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    let other = self::key("src");
    let token = claimed(&store, req(&other).fingerprint(fp(9))).await;
    store.complete(&token).await.unwrap();
    assert!(matches!(
        store.claim(req(&other)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
}
