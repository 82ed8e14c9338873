//! The history cases: one row per outcome (every store runs this), and the sources history
//! knows and what it observes of deliveries (for stores that implement [`HistoryQuery`]).

use super::*;

pub async fn history_has_one_row_per_outcome(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key).fingerprint(fp(1))).await;
    store.claim(req(&key).fingerprint(fp(1))).await.unwrap(); // in flight
    store.claim(req(&key).fingerprint(fp(2))).await.unwrap(); // conflict
    h.advance(Duration::from_millis(30)).await;
    store.complete(&token).await.unwrap();
    store.claim(req(&key).fingerprint(fp(1))).await.unwrap(); // duplicate
    let view = store.lookup(&key).await.unwrap();
    let got: Vec<_> = view.history.iter().map(|e| e.outcome).collect();
    assert_eq!(
        got,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::InFlight,
            HistoryOutcome::Conflict,
            HistoryOutcome::Completed,
            HistoryOutcome::Duplicate,
        ]
    );
    let dup = view.history.last().unwrap();
    let gap = dup
        .gap
        .expect("a duplicate records its gap since first receipt");
    assert!(gap >= Duration::from_millis(30), "{gap:?}");
    assert_eq!(view.history[0].attempt, Some(1));
    assert!(
        view.history.windows(2).all(|w| w[0].at <= w[1].at),
        "history is in order"
    );
}

pub async fn a_source_is_known_once_it_has_a_record_or_history<H>(h: &H)
where
    H: Harness,
    H::Store: HistoryQuery,
{
    let store = h.store();
    let name = format!("known-{:016x}", crate::machine::nonce());
    let source = crate::SourceName::new(name.clone()).expect("valid name");
    assert!(
        !store.has_source(&source).await.unwrap(),
        "{name} before any claim"
    );
    let k = Key::parse(&name, "evt_1").expect("valid key");
    let token = claimed(&store, req(&k)).await;
    assert!(
        store.has_source(&source).await.unwrap(),
        "{name} after a claim"
    );
    // Released: no record, but history knows the source.
    store.release(&token).await.unwrap();
    assert!(
        store.has_source(&source).await.unwrap(),
        "{name} after a release"
    );
    let other = crate::SourceName::new(format!("other-{:016x}", crate::machine::nonce()))
        .expect("valid name");
    assert!(!store.has_source(&other).await.unwrap());
}

pub async fn observe_counts_deliveries_gaps_and_late_duplicates<H>(h: &H)
where
    H: Harness,
    H::Store: HistoryQuery,
{
    let store = h.store();
    let step = Duration::from_millis(300);
    let a = key("observed");
    let token = claimed(&store, ClaimRequest::new(a.clone(), SHORT_LEASE, SHORT_TTL)).await;
    store.complete(&token).await.unwrap();
    let b = key("observed");
    claimed(&store, req(&b)).await;
    store.claim(req(&b)).await.unwrap(); // in flight, gap ~0
    h.advance(step).await;
    store.claim(req(&a)).await.unwrap(); // duplicate, gap >= 300 ms
    h.advance(step).await;
    store.claim(req(&a)).await.unwrap(); // duplicate, gap >= 600 ms
    h.advance(SHORT_TTL).await;
    store.claim(req(&a)).await.unwrap(); // late duplicate (flagged), gap >= TTL
    let mut all = store.observe(Duration::from_secs(3_600)).await.unwrap();
    assert_eq!(all.len(), 1, "one source: {all:?}");
    let obs = all.pop().unwrap();
    assert_eq!(obs.source.as_str(), "observed");
    assert_eq!(obs.first_receipts, 2);
    assert_eq!(
        obs.deliveries, 6,
        "claims, repeats and the late duplicate; not completions"
    );
    assert_eq!(obs.late_duplicates, 1);
    let mut gaps = obs.gaps.clone();
    gaps.sort();
    assert_eq!(gaps.len(), 4, "{gaps:?}");
    assert!(gaps[0] < step, "{gaps:?}");
    assert!(gaps[1] >= step && gaps[1] < step * 2, "{gaps:?}");
    assert!(
        gaps[2] >= step * 2 && gaps[2] < step * 2 + SHORT_TTL,
        "{gaps:?}"
    );
    assert!(gaps[3] >= step * 2 + SHORT_TTL, "{gaps:?}");
    // A period that ends before the history begins holds nothing of it.
    let none = store.observe(Duration::from_millis(1)).await.unwrap();
    assert!(none.iter().all(|o| o.first_receipts == 0), "{none:?}");
}
