//! Claims of one key racing each other across concurrent batches, on a real PostgreSQL.
//!
//! The shared suite races keys too (`concurrent_*` cases); these cases push far more claims
//! through, so a window of a few microseconds between two statements of the claim function is
//! hit, not just possible.

mod common;

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::{ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, Key, LateDuplicates};
use idemgate_postgres::Expiry;

/// 16 tasks in 8 pairs; each pair claims each of its keys from both tasks at the same moment
/// (a barrier per pair), in mark-on-receipt mode with late duplicates flagged and no
/// fingerprint. Every key must end with one `Claimed` and one `Duplicate`, and no claim may
/// fail.
///
/// Before schema 2, `claim_one` read a key's prior history with two statements: a concurrent
/// claim committing between them gave "first receipt unknown, but processed", and the claim
/// then built a record with no `first_seen` (a NOT NULL violation).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paired_on_receipt_claims_of_fresh_keys_never_fail() {
    // One claim per batch and many batches in flight: every claim runs the function's
    // one-key path while its pair's claim runs on another connection.
    let (mut cfg, guard) = common::config(Expiry::batched());
    cfg.batch_max = NonZeroUsize::new(1).unwrap();
    cfg.batch_inflight = NonZeroUsize::new(8).unwrap();
    cfg.pool_size = NonZeroUsize::new(10).unwrap();
    let Some(store) = common::connect(cfg).await else {
        return;
    };
    let _guard = guard;
    const PAIRS: usize = 8;
    const KEYS_PER_PAIR: usize = 500;
    let run = format!("{:016x}", idemgate_core::machine::nonce());
    let mut tasks = Vec::new();
    for pair in 0..PAIRS {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        for _side in 0..2 {
            let store = store.clone();
            let barrier = barrier.clone();
            let run = run.clone();
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::with_capacity(KEYS_PER_PAIR);
                for i in 0..KEYS_PER_PAIR {
                    let key = Key::parse("race", &format!("{run}-{pair}-{i}")).unwrap();
                    let req = ClaimRequest::new(
                        key.clone(),
                        Duration::from_secs(60),
                        Duration::from_secs(3_600),
                    )
                    .mode(ClaimMode::OnReceipt)
                    .late_duplicates(LateDuplicates::Flag);
                    barrier.wait().await;
                    out.push((key, store.claim(req).await));
                }
                out
            }));
        }
    }
    let mut per_key = std::collections::HashMap::<Key, Vec<ClaimOutcome>>::new();
    let mut failures = Vec::new();
    for t in tasks {
        for (key, result) in t.await.expect("task") {
            match result {
                Ok(outcome) => per_key.entry(key).or_default().push(outcome),
                Err(e) => failures.push(format!("{key}: {e:?}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} claims failed, the first: {}",
        failures.len(),
        PAIRS * KEYS_PER_PAIR * 2,
        failures[0]
    );
    assert_eq!(per_key.len(), PAIRS * KEYS_PER_PAIR);
    for (key, outcomes) in &per_key {
        let won = outcomes
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::Claimed { .. }))
            .count();
        let dup = outcomes
            .iter()
            .filter(|o| matches!(o, ClaimOutcome::Duplicate { .. }))
            .count();
        assert_eq!((won, dup), (1, 1), "{key}: {outcomes:?}");
    }
}
