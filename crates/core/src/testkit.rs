//! The conformance suite: one set of cases every store runs.
//!
//! A store crate expands it once with [`conformance_tests!`](crate::conformance_tests), giving an
//! async expression that builds a fresh [`Harness`] per case (or `None` to skip with a message,
//! when a live service is unreachable outside CI):
//!
//! ```text
//! idemgate_core::conformance_tests!(harness());
//! idemgate_core::sweep_conformance_tests!(harness());
//! idemgate_core::instances_conformance_tests!(harness());
//! idemgate_core::inbox_conformance_tests!(harness());
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
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimToken, HistoryOutcome, Holder, LateDuplicates,
    Record, RecordState,
};
use crate::key::{Fingerprint, InstanceName, Key};
use crate::store::{Boot, BootRequest, ClaimStore, HistoryQuery, Instances, StoreError, Sweep};
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
            a_completed_claim_cannot_be_released,
            a_claim_marked_on_receipt_may_be_released,
            mark_on_receipt_is_done_at_once,
            expired_record_is_absent,
            expired_processing_record_starts_over,
            fingerprint_mismatch_is_a_conflict,
            missing_fingerprint_never_conflicts,
            sources_scope_event_ids,
            complete_twice_is_harmless,
            concurrent_claims_of_one_key_have_one_winner,
            concurrent_on_receipt_claims_have_one_winner,
            concurrent_claims_of_an_expired_key_have_one_winner,
            concurrent_on_receipt_claims_of_an_expired_key_have_one_winner,
            concurrent_rejected_late_duplicates_have_one_winner,
            concurrent_claims_of_distinct_keys_all_win,
            paired_claims_have_one_winner_each,
            paired_on_receipt_claims_have_one_winner_each,
            paired_claims_of_expired_keys_have_one_winner_each,
            paired_on_receipt_claims_of_expired_keys_have_one_winner_each,
            paired_rejected_late_duplicates_have_one_winner_each,
            history_has_one_row_per_outcome,
            lookup_of_unknown_event_is_empty,
            claimed_answer_carries_its_expiry,
            late_duplicate_is_flagged_after_the_ttl,
            late_duplicate_is_rejected_under_reject,
            late_duplicates_off_claims_afresh,
            a_late_duplicate_is_told_only_within_the_horizon,
            released_attempt_is_not_a_late_duplicate,
            unfinished_attempt_is_not_a_late_duplicate,
            mark_on_receipt_claim_counts_as_processed,
            renew_keeps_a_takeover_out,
            renew_of_a_stale_token_is_refused,
            renew_after_the_lease_lapsed_succeeds_while_nobody_took_over,
            renew_never_reaches_beyond_the_record_expiry,
            renew_of_a_done_claim_answers_its_expiry_and_writes_nothing,
            claims_record_their_holder,
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

/// Expands the instance cases, for stores that implement [`Instances`].
#[macro_export]
macro_rules! instances_conformance_tests {
    ($make:expr) => {
        $crate::instances_conformance_tests!(@cases $make;
            a_new_boot_frees_the_claims_of_earlier_boots,
            boots_are_counted_per_instance,
            a_new_boot_leaves_lapsed_and_expired_claims_alone,
            a_live_boot_refuses_a_second_process_and_frees_nothing,
            a_boot_whose_liveness_lease_lapsed_is_taken_for_dead,
            a_heartbeat_keeps_a_boot_alive,
            a_superseded_boot_hears_so_and_cannot_end_the_new_one,
            a_boot_proved_dead_is_registered_over_at_once,
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

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn a_source_is_known_once_it_has_a_record_or_history() {
            if let Some(harness) = $make.await {
                $crate::testkit::cases::a_source_is_known_once_it_has_a_record_or_history(&harness)
                    .await;
            }
        }
    };
}

/// Expands the timeline cases, for stores that implement [`crate::store::Timeline`].
#[macro_export]
macro_rules! timeline_conformance_tests {
    ($make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn timeline_counts_each_outcome_in_its_bucket() {
            if let Some(harness) = $make.await {
                $crate::testkit::cases::timeline_counts_each_outcome_in_its_bucket(&harness).await;
            }
        }
    };
}

/// Expands the inbox cases, for stores that implement [`crate::inbox::Inbox`] and
/// [`Instances`].
#[macro_export]
macro_rules! inbox_conformance_tests {
    ($make:expr) => {
        $crate::inbox_conformance_tests!(@cases $make;
            enqueue_then_duplicate,
            enqueue_is_atomic,
            take_leases_and_fences,
            a_lapsed_lease_may_report_until_taken_again,
            delivered_removes_and_completes,
            retry_later_delays,
            dead_letter_keeps_body_and_attempts,
            replay_moves_back_with_fresh_budget,
            purge_dead_letters_respects_retention,
            stats_count_pending_in_flight_dead_and_oldest_age,
            takes_are_per_source,
            concurrent_takes_never_share_an_item,
            boot_frees_items_of_earlier_boots,
            requeue_queues_a_done_event_again_with_its_reason,
            queued_items_failures_and_filters_by_event,
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

/// The cases, one `async fn` each.
pub mod cases {
    use super::*;

    mod inbox;
    mod timeline;
    pub use inbox::*;
    pub use timeline::*;

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
    }

    /// `n` tasks send one claim each, released together by a barrier.
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

    /// What the racing claims of a key find.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Start {
        /// No record, no history.
        Fresh,
        /// A record that expired after its event was processed: every claim is a late duplicate,
        /// and the claims race on the expired record and the history read.
        Expired,
    }

    /// One kind of race: the claims' mode, what they find, and their late-duplicate policy.
    #[derive(Debug, Clone, Copy)]
    struct Race {
        mode: ClaimMode,
        start: Start,
        late: LateDuplicates,
    }

    impl Race {
        fn request(self, key: &Key) -> ClaimRequest {
            req(key).mode(self.mode).late_duplicates(self.late)
        }

        /// Whether the winner is a late duplicate.
        fn late(self) -> bool {
            self.start == Start::Expired && self.late != LateDuplicates::Off
        }

        /// Whether the winner leaves a done record (so the others are duplicates, not in flight).
        fn done(self) -> bool {
            self.mode == ClaimMode::OnReceipt
                || (self.late() && self.late == LateDuplicates::Reject)
        }

        /// Gives every key the start the race wants (eight tasks at a time, then the TTL
        /// passes).
        async fn prepare<H: Harness>(self, h: &H, keys: &[Key]) {
            if self.start == Start::Fresh || keys.is_empty() {
                return;
            }
            let tasks: Vec<_> = keys
                .chunks(keys.len().div_ceil(8))
                .map(|chunk| {
                    let store = h.store();
                    let chunk = chunk.to_vec();
                    tokio::spawn(async move {
                        for k in chunk {
                            let short = ClaimRequest::new(k, SHORT_LEASE, SHORT_TTL);
                            let token = claimed(&store, short).await;
                            store.complete(&token).await.expect("complete");
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("preparing a key");
            }
            h.advance(SHORT_TTL).await;
        }

        /// Exactly one claim of `key` won, as the race says it must; every other saw the
        /// winner's record.
        fn check(self, key: &Key, outcomes: &[ClaimOutcome]) {
            let won: Vec<&ClaimOutcome> = outcomes
                .iter()
                .filter(|o| {
                    matches!(
                        o,
                        ClaimOutcome::Claimed { .. } | ClaimOutcome::LateDuplicate { .. }
                    )
                })
                .collect();
            assert_eq!(
                won.len(),
                1,
                "{key} ({self:?}): one winner, got {outcomes:?}"
            );
            let rejected = self.late() && self.late == LateDuplicates::Reject;
            match won[0] {
                ClaimOutcome::Claimed {
                    token,
                    late_duplicate,
                    ..
                } if !rejected => {
                    assert_eq!(token.attempt, 1, "{key}");
                    assert_eq!(
                        late_duplicate.is_some(),
                        self.late(),
                        "{key} ({self:?}): {outcomes:?}"
                    );
                }
                ClaimOutcome::LateDuplicate { .. } if rejected => {}
                other => panic!("{key} ({self:?}): unexpected winner {other:?}"),
            }
            for o in outcomes {
                match o {
                    ClaimOutcome::Claimed { .. } | ClaimOutcome::LateDuplicate { .. } => {}
                    ClaimOutcome::Duplicate { .. } if self.done() => {}
                    ClaimOutcome::InFlight { .. } if !self.done() => {}
                    other => panic!("{key} ({self:?}): beside the winner, got {other:?}"),
                }
            }
        }
    }

    /// 64 tasks claim one key at once (a group-committing store takes most in one batch).
    async fn one_key_race<H: Harness>(h: &H, race: Race) {
        let store = h.store();
        let key = key("src");
        race.prepare(h, std::slice::from_ref(&key)).await;
        let before = store.lookup(&key).await.expect("lookup").history.len();
        let results = self::race(h, 64, |_| race.request(&key)).await;
        race.check(&key, &results);
        let view = store.lookup(&key).await.expect("lookup");
        let new: Vec<HistoryOutcome> = view.history[before..].iter().map(|e| e.outcome).collect();
        let firsts = new
            .iter()
            .filter(|o| matches!(o, HistoryOutcome::Claimed | HistoryOutcome::LateDuplicate))
            .count();
        assert_eq!(firsts, 1, "one winning history row: {new:?}");
        if race.done() {
            // A caching tier answers some duplicates of a done record itself, writing no row.
            assert!(!new.is_empty() && new.len() <= 64, "{new:?}");
        } else {
            assert_eq!(new.len(), 64, "one history row per claim: {new:?}");
        }
    }

    /// 8 pairs of tasks; each pair claims each of its keys from both tasks at once (a barrier
    /// per pair), so the two claims of a key often travel in different, concurrent batches.
    async fn paired_race<H: Harness>(h: &H, race: Race) {
        const PAIRS: usize = 8;
        const KEYS_PER_PAIR: usize = 48;
        let keys: Vec<Vec<Key>> = (0..PAIRS)
            .map(|_| (0..KEYS_PER_PAIR).map(|_| key("src")).collect())
            .collect();
        race.prepare(h, &keys.concat()).await;
        let mut tasks = Vec::new();
        for pair in &keys {
            let barrier = Arc::new(tokio::sync::Barrier::new(2));
            for _ in 0..2 {
                let store = h.store();
                let barrier = barrier.clone();
                let pair = pair.clone();
                tasks.push(tokio::spawn(async move {
                    let mut out = Vec::with_capacity(pair.len());
                    for key in &pair {
                        let req = race.request(key);
                        barrier.wait().await;
                        out.push(store.claim(req).await);
                    }
                    out
                }));
            }
        }
        let mut answers = Vec::with_capacity(tasks.len());
        for t in tasks {
            answers.push(t.await.expect("task"));
        }
        for (p, pair) in keys.iter().enumerate() {
            for (i, key) in pair.iter().enumerate() {
                let both: Vec<ClaimOutcome> = [&answers[2 * p][i], &answers[2 * p + 1][i]]
                    .into_iter()
                    .map(|r| match r {
                        Ok(o) => o.clone(),
                        Err(e) => panic!("{key} ({race:?}): a claim failed: {e:?}"),
                    })
                    .collect();
                race.check(key, &both);
            }
        }
    }

    const FRESH: Race = Race {
        mode: ClaimMode::OnSuccess,
        start: Start::Fresh,
        late: LateDuplicates::Flag,
    };
    const FRESH_ON_RECEIPT: Race = Race {
        mode: ClaimMode::OnReceipt,
        ..FRESH
    };
    const EXPIRED: Race = Race {
        start: Start::Expired,
        ..FRESH
    };
    const EXPIRED_ON_RECEIPT: Race = Race {
        mode: ClaimMode::OnReceipt,
        ..EXPIRED
    };
    const EXPIRED_REJECTED: Race = Race {
        late: LateDuplicates::Reject,
        ..EXPIRED
    };

    pub async fn concurrent_claims_of_one_key_have_one_winner(h: &impl Harness) {
        one_key_race(h, FRESH).await;
    }

    pub async fn concurrent_on_receipt_claims_have_one_winner(h: &impl Harness) {
        one_key_race(h, FRESH_ON_RECEIPT).await;
    }

    pub async fn concurrent_claims_of_an_expired_key_have_one_winner(h: &impl Harness) {
        one_key_race(h, EXPIRED).await;
    }

    pub async fn concurrent_on_receipt_claims_of_an_expired_key_have_one_winner(h: &impl Harness) {
        one_key_race(h, EXPIRED_ON_RECEIPT).await;
    }

    pub async fn concurrent_rejected_late_duplicates_have_one_winner(h: &impl Harness) {
        one_key_race(h, EXPIRED_REJECTED).await;
    }

    pub async fn paired_claims_have_one_winner_each(h: &impl Harness) {
        paired_race(h, FRESH).await;
    }

    pub async fn paired_on_receipt_claims_have_one_winner_each(h: &impl Harness) {
        paired_race(h, FRESH_ON_RECEIPT).await;
    }

    pub async fn paired_claims_of_expired_keys_have_one_winner_each(h: &impl Harness) {
        paired_race(h, EXPIRED).await;
    }

    pub async fn paired_on_receipt_claims_of_expired_keys_have_one_winner_each(h: &impl Harness) {
        paired_race(h, EXPIRED_ON_RECEIPT).await;
    }

    pub async fn paired_rejected_late_duplicates_have_one_winner_each(h: &impl Harness) {
        paired_race(h, EXPIRED_REJECTED).await;
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

    /// The liveness lease of the boots the cases register.
    const BOOT_LEASE: Duration = Duration::from_secs(60);

    pub(super) fn boot_request(name: &InstanceName) -> BootRequest {
        BootRequest {
            instance: name.clone(),
            lease: BOOT_LEASE,
            host: "test-host".into(),
            pid: 4242,
            process: String::new(),
            supersede: None,
        }
    }

    pub(super) async fn booted<S: Instances>(store: &S, name: &InstanceName) -> Boot {
        store
            .register_boot(&boot_request(name))
            .await
            .expect("register")
    }

    /// `prev`'s process stops (its lease ended), and the next boot of its name registers.
    pub(super) async fn restarted<S: Instances>(store: &S, prev: &Boot) -> Boot {
        store.end_boot(&prev.holder).await.expect("end");
        booted(store, &prev.holder.instance).await
    }

    fn holder(instance: &str, boot: u64) -> Holder {
        Holder {
            instance: InstanceName::new(instance).expect("valid instance name"),
            boot,
        }
    }

    async fn record<S: ClaimStore>(store: &S, key: &Key) -> Record {
        let view = store.lookup(key).await.expect("lookup");
        view.record.expect("a live record")
    }

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

    async fn in_flight<S: ClaimStore>(store: &S, key: &Key) {
        match store.claim(req(key)).await.expect("claim") {
            ClaimOutcome::InFlight { .. } => {}
            other => panic!("{key}: expected InFlight, got {other:?}"),
        }
    }

    pub async fn a_new_boot_frees_the_claims_of_earlier_boots<H>(h: &H)
    where
        H: Harness,
        H::Store: Instances,
    {
        let store = h.store();
        let name = InstanceName::new("gw-a").unwrap();
        let first = booted(&store, &name).await;
        assert_eq!((first.holder.clone(), first.freed), (holder("gw-a", 1), 0));
        // Held by the first boot: freed by the next.
        let abandoned = key("src");
        claimed(&store, req(&abandoned).holder(first.holder.clone())).await;
        // Held under the boot about to be registered, by another instance, by nobody.
        let (current, other, anonymous) = (key("src"), key("src"), key("src"));
        claimed(&store, req(&current).holder(holder("gw-a", 2))).await;
        claimed(&store, req(&other).holder(holder("gw-b", 1))).await;
        claimed(&store, req(&anonymous)).await;
        // Done under the first boot: nothing to free.
        let done = key("src");
        let token = claimed(&store, req(&done).holder(first.holder.clone())).await;
        store.complete(&token).await.unwrap();

        let second = restarted(&store, &first).await;
        assert_eq!(second.holder, holder("gw-a", 2));
        assert_eq!(second.freed, 1, "{second:?}");
        assert!(second.started_at >= first.started_at);

        let rec = record(&store, &abandoned).await;
        assert_eq!(rec.state, RecordState::Processing);
        assert_eq!(
            rec.holder,
            Some(first.holder.clone()),
            "still shows who held it"
        );
        let view = store.lookup(&abandoned).await.unwrap();
        let row = view.history.last().unwrap();
        assert_eq!(
            (row.outcome, row.attempt, row.processed),
            (HistoryOutcome::Abandoned, Some(1), false)
        );
        assert!(row.at >= second.started_at, "{row:?} {second:?}");
        // Takeable at once: the next delivery takes it over.
        let taken = claimed(&store, req(&abandoned).holder(second.holder.clone())).await;
        assert_eq!(taken.attempt, 2);
        assert_eq!(
            record(&store, &abandoned).await.holder,
            Some(second.holder.clone())
        );
        assert_eq!(
            outcomes(&store, &abandoned).await,
            [
                HistoryOutcome::Claimed,
                HistoryOutcome::Abandoned,
                HistoryOutcome::Reclaimed
            ]
        );
        for key in [&current, &other, &anonymous] {
            in_flight(&store, key).await;
            assert!(
                !outcomes(&store, key)
                    .await
                    .contains(&HistoryOutcome::Abandoned),
                "{key}"
            );
        }
        assert!(matches!(
            store.claim(req(&done)).await.unwrap(),
            ClaimOutcome::Duplicate { .. }
        ));
        // The third boot frees what the second holds: the claim it took over, and the one
        // claimed under its number before it was registered.
        let third = restarted(&store, &second).await;
        assert_eq!((third.holder.boot, third.freed), (3, 2), "{third:?}");
        in_flight(&store, &other).await;
    }

    pub async fn boots_are_counted_per_instance<H>(h: &H)
    where
        H: Harness,
        H::Store: Instances,
    {
        let store = h.store();
        let (a, b) = (
            InstanceName::new("gw-a").unwrap(),
            InstanceName::new("GW_b.2").unwrap(),
        );
        let mut seen = Vec::new();
        let mut live: Vec<Boot> = Vec::new();
        for name in [&a, &a, &b, &a, &b] {
            // Each process stops before the next of its name starts.
            if let Some(i) = live.iter().position(|b| b.holder.instance == *name) {
                let prev = live.remove(i);
                store.end_boot(&prev.holder).await.expect("end");
            }
            let boot = booted(&store, name).await;
            assert_eq!(boot.holder.instance, *name);
            assert_eq!(boot.freed, 0);
            seen.push(boot.holder.boot);
            live.push(boot);
        }
        assert_eq!(seen, [1, 2, 1, 3, 2]);
    }

    /// A second process started under a live boot's name (an operator's typo, a supervisor
    /// restarting too eagerly, two hosts with one name) is refused, told which process holds the
    /// name, and changes nothing: the live boot's claims stay its own.
    pub async fn a_live_boot_refuses_a_second_process_and_frees_nothing<H>(h: &H)
    where
        H: Harness,
        H::Store: Instances,
    {
        let store = h.store();
        let name = InstanceName::new("gw-live").unwrap();
        let first = booted(&store, &name).await;
        let held = key("src");
        claimed(&store, req(&held).holder(first.holder.clone())).await;
        let second = BootRequest {
            host: "other-host".into(),
            pid: 7,
            ..boot_request(&name)
        };
        match store.register_boot(&second).await {
            Err(StoreError::InstanceLive { live }) => {
                assert_eq!(live.holder, first.holder);
                assert_eq!((live.host.as_str(), live.pid), ("test-host", 4242));
                assert!(
                    live.remaining > Duration::ZERO && live.remaining <= BOOT_LEASE,
                    "{live:?}"
                );
                assert!(live.alive_until > live.started_at, "{live:?}");
            }
            other => panic!("a second process was not refused: {other:?}"),
        }
        // Nothing freed, nothing counted.
        in_flight(&store, &held).await;
        assert_eq!(
            outcomes(&store, &held).await,
            [HistoryOutcome::Claimed, HistoryOutcome::InFlight]
        );
        let next = restarted(&store, &first).await;
        assert_eq!((next.holder.boot, next.freed), (2, 1), "{next:?}");
    }

    /// A boot that stops renewing (killed, cut off from the store, frozen) is taken for dead once
    /// its liveness lease lapses: the next boot registers and frees its claims.
    pub async fn a_boot_whose_liveness_lease_lapsed_is_taken_for_dead<H>(h: &H)
    where
        H: Harness,
        H::Store: Instances,
    {
        let store = h.store();
        let name = InstanceName::new("gw-crashed").unwrap();
        let short = BootRequest {
            lease: SHORT_LEASE,
            ..boot_request(&name)
        };
        let first = store.register_boot(&short).await.expect("register");
        let held = key("src");
        claimed(&store, req(&held).holder(first.holder.clone())).await;
        h.advance(SHORT_LEASE).await;
        let second = store
            .register_boot(&short)
            .await
            .expect("the lapsed boot is dead");
        assert_eq!((second.holder.boot, second.freed), (2, 1), "{second:?}");
        assert_eq!(claimed(&store, req(&held)).await.attempt, 2);
    }

    pub async fn a_heartbeat_keeps_a_boot_alive<H>(h: &H)
    where
        H: Harness,
        H::Store: Instances,
    {
        let store = h.store();
        let name = InstanceName::new("gw-beat").unwrap();
        let lease = SHORT_LEASE * 2;
        let short = BootRequest {
            lease,
            ..boot_request(&name)
        };
        let first = store.register_boot(&short).await.expect("register");
        h.advance(SHORT_LEASE).await;
        let until = store
            .heartbeat(&first.holder, lease)
            .await
            .expect("heartbeat");
        assert!(until > first.started_at.plus(lease), "renewed: {until:?}");
        // Past the first lease, within the renewed one: still alive.
        h.advance(SHORT_LEASE + SHORT_LEASE / 2).await;
        assert!(matches!(
            store.register_boot(&short).await,
            Err(StoreError::InstanceLive { .. })
        ));
        // Stopped: the next boot starts at once.
        store.end_boot(&first.holder).await.expect("end");
        assert_eq!(
            store
                .register_boot(&short)
                .await
                .expect("register")
                .holder
                .boot,
            2
        );
    }

    /// A boot whose lease lapsed and whose name another process then took must stop: its
    /// heartbeat says so, and neither it nor its end touches the new boot.
    pub async fn a_superseded_boot_hears_so_and_cannot_end_the_new_one<H>(h: &H)
    where
        H: Harness,
        H::Store: Instances,
    {
        let store = h.store();
        let name = InstanceName::new("gw-cut-off").unwrap();
        let short = BootRequest {
            lease: SHORT_LEASE,
            ..boot_request(&name)
        };
        let first = store.register_boot(&short).await.expect("register");
        h.advance(SHORT_LEASE).await;
        let second = booted(&store, &name).await;
        match store.heartbeat(&first.holder, SHORT_LEASE).await {
            Err(StoreError::Superseded { holder, by }) => {
                assert_eq!((holder, by), (first.holder.clone(), 2));
            }
            other => panic!("the superseded boot was not told: {other:?}"),
        }
        store
            .end_boot(&first.holder)
            .await
            .expect("end of a superseded boot");
        match store.register_boot(&boot_request(&name)).await {
            Err(StoreError::InstanceLive { live }) => assert_eq!(live.holder, second.holder),
            other => panic!("the new boot's lease was ended by the old one: {other:?}"),
        }
    }

    /// A process that proved the latest boot's process gone (on the same machine: the gateway
    /// looks its pid up) registers over it at once, without waiting for its lease; the proof
    /// names that boot, so it cannot pass over a newer one.
    pub async fn a_boot_proved_dead_is_registered_over_at_once<H>(h: &H)
    where
        H: Harness,
        H::Store: Instances,
    {
        let store = h.store();
        let name = InstanceName::new("gw-proved").unwrap();
        let first = store
            .register_boot(&BootRequest {
                process: "kernel-1/pidns-1/77/123".into(),
                ..boot_request(&name)
            })
            .await
            .expect("register");
        let held = key("src");
        claimed(&store, req(&held).holder(first.holder.clone())).await;
        let live = match store.register_boot(&boot_request(&name)).await {
            Err(StoreError::InstanceLive { live }) => live,
            other => panic!("{other:?}"),
        };
        assert_eq!(live.process, "kernel-1/pidns-1/77/123");
        let second = store
            .register_boot(&BootRequest {
                supersede: Some(live.holder.boot),
                ..boot_request(&name)
            })
            .await
            .expect("registered over the boot proved dead");
        assert_eq!((second.holder.boot, second.freed), (2, 1), "{second:?}");
        // A proof about boot 1 says nothing of boot 2.
        match store
            .register_boot(&BootRequest {
                supersede: Some(first.holder.boot),
                ..boot_request(&name)
            })
            .await
        {
            Err(StoreError::InstanceLive { live }) => assert_eq!(live.holder, second.holder),
            other => panic!("a stale proof passed over a live boot: {other:?}"),
        }
    }

    pub async fn a_new_boot_leaves_lapsed_and_expired_claims_alone<H>(h: &H)
    where
        H: Harness,
        H::Store: Instances,
    {
        let store = h.store();
        let name = InstanceName::new("gw-a").unwrap();
        let first = booted(&store, &name).await;
        let lapsed = key("src");
        claimed(
            &store,
            ClaimRequest::new(lapsed.clone(), SHORT_LEASE, LONG_TTL).holder(first.holder.clone()),
        )
        .await;
        let expired = key("src");
        claimed(
            &store,
            ClaimRequest::new(expired.clone(), SHORT_TTL, SHORT_TTL).holder(first.holder.clone()),
        )
        .await;
        h.advance(SHORT_TTL).await;
        let second = restarted(&store, &first).await;
        assert_eq!(second.freed, 0, "already takeable: {second:?}");
        assert_eq!(outcomes(&store, &lapsed).await, [HistoryOutcome::Claimed]);
        assert_eq!(outcomes(&store, &expired).await, [HistoryOutcome::Claimed]);
        assert_eq!(claimed(&store, req(&lapsed)).await.attempt, 2);
        assert_eq!(claimed(&store, req(&expired)).await.attempt, 1);
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
