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
//! idemgate_core::history_conformance_tests!(harness());
//! idemgate_core::timeline_conformance_tests!(harness());
//! idemgate_core::inbox_conformance_tests!(harness());
//! ```
//!
//! Stores whose clock can be injected use [`ManualHarness`]; stores on a server's clock use
//! [`RealTimeHarness`], which lets time pass by sleeping (the cases keep such sleeps short).

use std::future::Future;
use std::time::Duration;

use crate::claim::{ClaimOutcome, ClaimRequest, ClaimToken, HistoryOutcome, Holder, Record};
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
            a_result_is_kept_for_duplicates_byte_for_byte,
            a_result_over_the_limit_is_refused_and_the_claim_completes,
            a_result_under_a_stale_token_is_refused_and_stores_nothing,
            a_result_expires_with_its_record,
            the_record_alone_reads_as_lookup_does,
            a_released_or_on_receipt_claim_has_no_result,
            completing_again_keeps_the_first_result,
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

/// The cases, one `async fn` each, in a module per group (`testkit/cases/*.rs`); the helpers
/// the groups share are here.
pub mod cases {
    use super::*;

    mod claims;
    mod completion;
    mod expiry;
    mod fingerprints;
    mod history;
    mod inbox;
    mod instances;
    mod late_duplicates;
    mod races;
    mod renewal;
    mod results;
    mod timeline;
    pub use claims::*;
    pub use completion::*;
    pub use expiry::*;
    pub use fingerprints::*;
    pub use history::*;
    pub use inbox::*;
    pub use instances::*;
    pub use late_duplicates::*;
    pub use races::*;
    pub use renewal::*;
    pub use results::*;
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

    fn assert_stale(result: Result<(), StoreError>) {
        assert!(
            matches!(result, Err(StoreError::StaleToken { .. })),
            "expected StaleToken, got {result:?}"
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
}
