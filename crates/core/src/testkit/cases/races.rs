//! The race cases: concurrent claims of one key have exactly one winner, whatever the claims'
//! mode, what they find (no record, or an expired one) and their late-duplicate policy; claims
//! of distinct keys all win. Every store runs them.

use super::*;
use crate::claim::{ClaimMode, LateDuplicates};
use std::collections::HashSet;
use std::sync::Arc;

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
        self.mode == ClaimMode::OnReceipt || (self.late() && self.late == LateDuplicates::Reject)
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
