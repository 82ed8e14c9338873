//! The stored-result cases: a completion keeps the work's result beside the record, byte for
//! byte, in the same step; one over the limit is refused but the claim still completes, and its
//! duplicates hear its size; a stale token stores nothing; the result expires with its record and
//! never comes back to a later record of the key; a released or marked-on-receipt claim has none;
//! the first completion's result stands. Every store runs them.

use super::*;
use crate::claim::{ClaimMode, RecordState};
use crate::result::{RESULT_LIMIT, RecordResult, StoredResult};

/// A result with everything a store could get wrong: repeated headers, a header value that is
/// not text, and a body holding every byte value.
fn sample() -> StoredResult {
    StoredResult::new(201)
        .header("content-type", "application/json")
        .header("set-cookie", "a=1")
        .header("set-cookie", "b=2")
        .header("x-raw", vec![0u8, 0xff, b'\r', b'\n', 0x80])
        .body((0..=255u8).cycle().take(1_000).collect::<Vec<u8>>())
}

/// Another result, to tell two completions apart.
fn other() -> StoredResult {
    StoredResult::new(409).body(b"second".to_vec())
}

async fn result_of<S: ClaimStore>(store: &S, key: &Key) -> RecordResult {
    record(store, key).await.result
}

fn assert_too_large(result: Result<(), StoreError>, key: &Key, size: usize, limit: usize) {
    assert!(
        matches!(&result, Err(StoreError::ResultTooLarge { key: k, size: s, limit: l })
            if k == key && *s == size && *l == limit),
        "expected ResultTooLarge of {size} over {limit}, got {result:?}"
    );
}

pub async fn a_result_is_kept_for_duplicates_byte_for_byte(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    assert_eq!(result_of(&store, &key).await, RecordResult::None);
    store
        .complete_with(&token, &sample(), RESULT_LIMIT)
        .await
        .unwrap();
    assert!(matches!(
        store.claim(req(&key)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    let rec = record(&store, &key).await;
    assert_eq!((rec.state, rec.completed), (RecordState::Done, true));
    assert_eq!(rec.result, RecordResult::Stored(sample()));
    assert_eq!(
        outcomes(&store, &key).await,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::Completed,
            HistoryOutcome::Duplicate
        ]
    );
    // A result of exactly the default limit is stored whole.
    let key = super::key("src");
    let token = claimed(&store, req(&key)).await;
    let mut full = StoredResult::new(200).header("content-type", "application/octet-stream");
    full.body = vec![0xa5; RESULT_LIMIT - full.size()];
    assert_eq!(full.size(), RESULT_LIMIT);
    store
        .complete_with(&token, &full, RESULT_LIMIT)
        .await
        .unwrap();
    assert_eq!(result_of(&store, &key).await, RecordResult::Stored(full));
}

/// A result over the limit: refused with its size and the limit, the claim completed all the
/// same (the event was processed), and the record keeps the size for its duplicates.
pub async fn a_result_over_the_limit_is_refused_and_the_claim_completes(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    let big = StoredResult::new(200).body(vec![7; RESULT_LIMIT]);
    let size = big.size();
    assert!(size > RESULT_LIMIT);
    assert_too_large(
        store.complete_with(&token, &big, RESULT_LIMIT).await,
        &key,
        size,
        RESULT_LIMIT,
    );
    let rec = record(&store, &key).await;
    assert_eq!((rec.state, rec.completed), (RecordState::Done, true));
    assert_eq!(rec.result, RecordResult::Withheld { size });
    assert!(matches!(
        store.claim(req(&key)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    assert!(matches!(
        store.release(&token).await,
        Err(StoreError::Completed { .. })
    ));
    assert_eq!(
        outcomes(&store, &key).await,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::Completed,
            HistoryOutcome::Duplicate
        ]
    );
    // A limit of the caller's own, one byte short.
    let key = super::key("src");
    let token = claimed(&store, req(&key)).await;
    let limit = sample().size() - 1;
    assert_too_large(
        store.complete_with(&token, &sample(), limit).await,
        &key,
        sample().size(),
        limit,
    );
    assert_eq!(
        result_of(&store, &key).await,
        RecordResult::Withheld {
            size: sample().size()
        }
    );
}

/// A token that no longer holds the claim (taken over, released, expired) stores nothing, and
/// hears that it is stale, not that its result is too large.
pub async fn a_result_under_a_stale_token_is_refused_and_stores_nothing(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let old = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, LONG_TTL),
    )
    .await;
    h.advance(SHORT_LEASE).await;
    let new = claimed(&store, req(&key)).await;
    assert_eq!(new.attempt, 2);
    assert_stale(store.complete_with(&old, &sample(), RESULT_LIMIT).await);
    let big = StoredResult::new(200).body(vec![0; RESULT_LIMIT + 1]);
    assert_stale(store.complete_with(&old, &big, RESULT_LIMIT).await);
    let rec = record(&store, &key).await;
    assert_eq!(
        (rec.state, rec.attempt, rec.result),
        (RecordState::Processing, 2, RecordResult::None)
    );
    store
        .complete_with(&new, &other(), RESULT_LIMIT)
        .await
        .unwrap();
    assert_eq!(result_of(&store, &key).await, RecordResult::Stored(other()));

    // Released: the token is stale, and there is no record to keep a result.
    let key = super::key("src");
    let token = claimed(&store, req(&key)).await;
    store.release(&token).await.unwrap();
    assert_stale(store.complete_with(&token, &sample(), RESULT_LIMIT).await);
    assert!(store.lookup(&key).await.unwrap().record.is_none());
    assert_eq!(
        outcomes(&store, &key).await,
        [HistoryOutcome::Claimed, HistoryOutcome::Released]
    );
}

/// The result lives as long as its record: gone when the record expires, and never read into a
/// later record of the same key, completed with a result or without.
pub async fn a_result_expires_with_its_record(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL),
    )
    .await;
    store
        .complete_with(&token, &sample(), RESULT_LIMIT)
        .await
        .unwrap();
    assert_eq!(
        result_of(&store, &key).await,
        RecordResult::Stored(sample())
    );
    h.advance(SHORT_TTL).await;
    assert!(store.lookup(&key).await.unwrap().record.is_none());
    assert_stale(store.complete_with(&token, &other(), RESULT_LIMIT).await);
    // The key claimed afresh: its new record starts without a result, and a plain completion
    // leaves it without one.
    let again = claimed(&store, req(&key)).await;
    assert_eq!(again.attempt, 1);
    assert_eq!(result_of(&store, &key).await, RecordResult::None);
    store.complete(&again).await.unwrap();
    let rec = record(&store, &key).await;
    assert_eq!((rec.completed, rec.result), (true, RecordResult::None));

    // A withheld result expires as well.
    let key = super::key("src");
    let token = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL),
    )
    .await;
    let limit = sample().size() - 1;
    assert!(store.complete_with(&token, &sample(), limit).await.is_err());
    h.advance(SHORT_TTL).await;
    let again = claimed(&store, req(&key)).await;
    store
        .complete_with(&again, &other(), RESULT_LIMIT)
        .await
        .unwrap();
    assert_eq!(result_of(&store, &key).await, RecordResult::Stored(other()));
}

/// `record` (what a duplicate's result is read from) gives what `lookup` gives as the record, in
/// every state: absent, processing, done with a result, and expired (absent again).
pub async fn the_record_alone_reads_as_lookup_does(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    assert_eq!(store.record(&key).await.unwrap(), None);
    let token = claimed(
        &store,
        ClaimRequest::new(key.clone(), SHORT_LEASE, SHORT_TTL),
    )
    .await;
    let processing = store.record(&key).await.unwrap();
    assert_eq!(processing, store.lookup(&key).await.unwrap().record);
    assert_eq!(processing.map(|r| r.state), Some(RecordState::Processing));
    store
        .complete_with(&token, &sample(), RESULT_LIMIT)
        .await
        .unwrap();
    let done = store.record(&key).await.unwrap();
    assert_eq!(done, store.lookup(&key).await.unwrap().record);
    assert_eq!(done.map(|r| r.result), Some(RecordResult::Stored(sample())));
    h.advance(SHORT_TTL).await;
    assert_eq!(store.record(&key).await.unwrap(), None);
}

/// No result without a completion: not while processing, not after a release (the next record
/// starts without one), not for a claim marked done on receipt (no completion follows it, and a
/// completion of it keeps nothing).
pub async fn a_released_or_on_receipt_claim_has_no_result(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    store.release(&token).await.unwrap();
    let again = claimed(&store, req(&key)).await;
    assert_eq!(result_of(&store, &key).await, RecordResult::None);
    store.complete(&again).await.unwrap();
    assert_eq!(result_of(&store, &key).await, RecordResult::None);

    let key = super::key("src");
    let token = claimed(&store, req(&key).mode(ClaimMode::OnReceipt)).await;
    assert_eq!(result_of(&store, &key).await, RecordResult::None);
    store
        .complete_with(&token, &sample(), RESULT_LIMIT)
        .await
        .unwrap();
    let rec = record(&store, &key).await;
    assert_eq!(
        (rec.state, rec.completed, rec.result),
        (RecordState::Done, false, RecordResult::None)
    );
    // Its release (the undo of mark-on-receipt) still deletes it.
    store.release(&token).await.unwrap();
    assert!(store.lookup(&key).await.unwrap().record.is_none());
}

/// The first completion decides: completing again, with another result, without one, or with one
/// over the limit, changes nothing and writes no history row.
pub async fn completing_again_keeps_the_first_result(h: &impl Harness) {
    let store = h.store();
    let key = key("src");
    let token = claimed(&store, req(&key)).await;
    store
        .complete_with(&token, &sample(), RESULT_LIMIT)
        .await
        .unwrap();
    store
        .complete_with(&token, &other(), RESULT_LIMIT)
        .await
        .unwrap();
    store.complete(&token).await.unwrap();
    let limit = other().size() - 1;
    assert_too_large(
        store.complete_with(&token, &other(), limit).await,
        &key,
        other().size(),
        limit,
    );
    assert_eq!(
        result_of(&store, &key).await,
        RecordResult::Stored(sample())
    );
    assert_eq!(
        outcomes(&store, &key).await,
        [HistoryOutcome::Claimed, HistoryOutcome::Completed]
    );

    // Completed without a result first: none is added later.
    let key = super::key("src");
    let token = claimed(&store, req(&key)).await;
    store.complete(&token).await.unwrap();
    store
        .complete_with(&token, &sample(), RESULT_LIMIT)
        .await
        .unwrap();
    assert_eq!(result_of(&store, &key).await, RecordResult::None);
}
