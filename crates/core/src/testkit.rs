//! The conformance suite: one set of cases every store runs.
//!
//! A store crate expands it once with [`conformance_tests!`](crate::conformance_tests), giving an
//! async expression that builds a fresh [`Harness`] per case (or `None` to skip with a message,
//! when a live service is unreachable outside CI):
//!
//! ```text
//! idemgate_core::conformance_tests!(harness());
//! idemgate_core::sweep_conformance_tests!(harness());
//! ```
//!
//! Stores whose clock can be injected use [`ManualHarness`]; stores on a server's clock use
//! [`RealTimeHarness`], which lets time pass by sleeping (the cases keep such sleeps short).

use std::collections::HashSet;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use crate::claim::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimToken, HistoryOutcome, LateDuplicates, RecordState,
};
use crate::key::{Fingerprint, Key};
use crate::store::{ClaimStore, HistoryQuery, StoreError, Sweep};
use crate::time::ManualClock;

/// A fresh store for one case, and a way to let time pass on its clock.
pub trait Harness: Send + Sync + 'static {
    type Store: ClaimStore + Clone + 'static;

    fn store(&self) -> Self::Store;

    /// Lets `d` pass on the store's clock.
    fn advance(&self, d: Duration) -> impl Future<Output = ()> + Send;
}

/// A store on a [`ManualClock`]: time passes only when a case says so.
#[derive(Debug, Clone)]
pub struct ManualHarness<S> {
    pub store: S,
    pub clock: ManualClock,
}

impl<S: ClaimStore + Clone + 'static> Harness for ManualHarness<S> {
    type Store = S;
    fn store(&self) -> S {
        self.store.clone()
    }
    async fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

/// A store on a server's clock: time passes by sleeping.
#[derive(Debug, Clone)]
pub struct RealTimeHarness<S> {
    pub store: S,
}

impl<S: ClaimStore + Clone + 'static> Harness for RealTimeHarness<S> {
    type Store = S;
    fn store(&self) -> S {
        self.store.clone()
    }
    async fn advance(&self, d: Duration) {
        // A little extra so a server clock read just before the sleep has surely moved past.
        tokio::time::sleep(d + Duration::from_millis(20)).await;
    }
}

/// For live-service tests: `Ok` passes through; an unreachable service panics with `CI` set and
/// otherwise prints `what_to_start` and skips.
pub fn require_service<T, E: std::fmt::Display>(
    result: Result<T, E>,
    what_to_start: &str,
) -> Option<T> {
    match result {
        Ok(t) => Some(t),
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("{e}\nCI is set, so this test does not skip: {what_to_start}")
        }
        Err(e) => {
            eprintln!("skipped: {e}\n{what_to_start}");
            None
        }
    }
}

/// Expands the claim conformance suite into `#[tokio::test]`s. See the [module docs](self).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@cases $make;
            first_claim_is_claimed,
            completed_claim_answers_duplicate,
            live_lease_answers_in_flight,
            lapsed_lease_is_taken_over,
            stale_token_is_fenced_after_takeover,
            release_lets_the_next_delivery_claim,
            token_of_a_released_claim_stays_stale,
            mark_on_receipt_is_done_at_once,
            expired_record_is_absent,
            expired_processing_record_starts_over,
            fingerprint_mismatch_is_a_conflict,
            missing_fingerprint_never_conflicts,
            sources_scope_event_ids,
            complete_twice_is_harmless,
            concurrent_claims_of_one_key_have_one_winner,
            concurrent_on_receipt_claims_have_one_winner,
            concurrent_claims_of_distinct_keys_all_win,
            history_has_one_row_per_outcome,
            lookup_of_unknown_event_is_empty,
            claimed_answer_carries_its_expiry,
            late_duplicate_is_flagged_after_the_ttl,
            late_duplicate_is_rejected_under_reject,
            late_duplicates_off_claims_afresh,
            released_attempt_is_not_a_late_duplicate,
            unfinished_attempt_is_not_a_late_duplicate,
            mark_on_receipt_claim_counts_as_processed,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                if let Some(harness) = $make.await {
                    $crate::testkit::cases::$case(&harness).await;
                }
            }
        )*
    };
}

/// Expands the sweep conformance cases, for stores that implement [`Sweep`].
#[macro_export]
macro_rules! sweep_conformance_tests {
    ($make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn sweep_deletes_only_expired_records_in_bounded_batches() {
            if let Some(harness) = $make.await {
                $crate::testkit::cases::sweep_deletes_only_expired_records_in_bounded_batches(
                    &harness,
                )
                .await;
            }
        }
    };
}

/// Expands the history cases, for stores that implement [`HistoryQuery`].
#[macro_export]
macro_rules! history_conformance_tests {
    ($make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn observe_counts_deliveries_gaps_and_late_duplicates() {
            if let Some(harness) = $make.await {
                $crate::testkit::cases::observe_counts_deliveries_gaps_and_late_duplicates(
                    &harness,
                )
                .await;
            }
        }
    };
}

/// The cases, one `async fn` each.
pub mod cases {
    use super::*;

    /// A lease long enough never to lapse during a case.
    const LONG_LEASE: Duration = Duration::from_secs(60);
    /// A lease a case lets lapse.
    const SHORT_LEASE: Duration = Duration::from_millis(250);
    /// A TTL long enough never to pass during a case.
    const LONG_TTL: Duration = Duration::from_secs(3_600);
    /// A TTL a case lets pass.
    const SHORT_TTL: Duration = Duration::from_millis(800);

    fn key(source: &str) -> Key {
        Key::parse(source, &format!("evt_{:016x}", crate::machine::nonce())).expect("valid key")
    }

    fn req(key: &Key) -> ClaimRequest {
        ClaimRequest::new(key.clone(), LONG_LEASE, LONG_TTL)
    }

    fn fp(byte: u8) -> Fingerprint {
        Fingerprint([byte; 32])
    }

    async fn claimed<S: ClaimStore>(store: &S, req: ClaimRequest) -> ClaimToken {
        match store.claim(req).await.expect("claim") {
            ClaimOutcome::Claimed { token, .. } => token,
            other => panic!("expected Claimed, got {other:?}"),
        }
    }

    async fn outcomes<S: ClaimStore>(store: &S, key: &Key) -> Vec<HistoryOutcome> {
        let view = store.lookup(key).await.expect("lookup");
        view.history.iter().map(|h| h.outcome).collect()
    }

    /// Claims and expects a plain `Claimed`, not flagged as a late duplicate.
    async fn assert_not_late<S: ClaimStore>(store: &S, req: ClaimRequest) {
        match store.claim(req).await.expect("claim") {
            ClaimOutcome::Claimed { late_duplicate, .. } => assert_eq!(late_duplicate, None),
            other => panic!("expected Claimed, got {other:?}"),
        }
    }

    fn assert_stale(result: Result<(), StoreError>) {
        assert!(
            matches!(result, Err(StoreError::StaleToken { .. })),
            "expected StaleToken, got {result:?}"
        );
    }

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
        // Releasing a completed claim is still the holder's right: the next delivery is processed.
        store.release(&token).await.unwrap();
        claimed(&store, req(&key)).await;
    }

    async fn race<H: Harness>(
        h: &H,
        n: usize,
        make: impl Fn(usize) -> ClaimRequest,
    ) -> Vec<ClaimOutcome> {
        let barrier = Arc::new(tokio::sync::Barrier::new(n));
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let store = h.store();
                let barrier = barrier.clone();
                let req = make(i);
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.claim(req).await
                })
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        for t in tasks {
            out.push(t.await.expect("task").expect("claim"));
        }
        out
    }

    pub async fn concurrent_claims_of_one_key_have_one_winner(h: &impl Harness) {
        let key = key("src");
        let results = race(h, 64, |_| req(&key)).await;
        let won = results
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::Claimed { .. }))
            .count();
        let in_flight = results
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::InFlight { .. }))
            .count();
        assert_eq!((won, in_flight), (1, 63), "{results:?}");
        let hist = outcomes(&h.store(), &key).await;
        assert_eq!(hist.len(), 64);
        assert_eq!(
            hist.iter()
                .filter(|o| **o == HistoryOutcome::Claimed)
                .count(),
            1
        );
    }

    pub async fn concurrent_on_receipt_claims_have_one_winner(h: &impl Harness) {
        let key = key("src");
        let results = race(h, 64, |_| req(&key).mode(ClaimMode::OnReceipt)).await;
        let won = results
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::Claimed { .. }))
            .count();
        let dup = results
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::Duplicate { .. }))
            .count();
        assert_eq!((won, dup), (1, 63), "{results:?}");
    }

    pub async fn concurrent_claims_of_distinct_keys_all_win(h: &impl Harness) {
        let keys: Vec<Key> = (0..64).map(|_| key("src")).collect();
        let results = race(h, 64, |i| req(&keys[i])).await;
        let mut seen = HashSet::new();
        for (i, outcome) in results.iter().enumerate() {
            match outcome {
                ClaimOutcome::Claimed { token, .. } => {
                    assert_eq!(token.key, keys[i], "each caller gets its own outcome");
                    assert!(seen.insert(token.nonce), "nonces are distinct");
                }
                other => panic!("expected Claimed, got {other:?}"),
            }
        }
    }

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
        let short =
            ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL).mode(ClaimMode::OnReceipt);
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
}
