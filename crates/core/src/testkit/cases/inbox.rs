//! The inbox cases, for stores that implement [`Inbox`]. Each case queues under sources of its
//! own, so a store shared by cases running at once never mixes their items.

use super::*;
use crate::claim::RecordState;
use crate::inbox::{Failure, Inbox, InboxStats, ItemRef, QueuedItem, ReplayFilter, Taken};
use crate::key::EventId;
use crate::key::SourceName;
use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

fn source() -> SourceName {
    SourceName::new(format!("inbox-{:016x}", crate::machine::nonce())).expect("valid name")
}

fn key_in(source: &SourceName) -> Key {
    Key::parse(
        source.as_str(),
        &format!("evt_{:016x}", crate::machine::nonce()),
    )
    .expect("valid key")
}

fn n(limit: u32) -> NonZeroU32 {
    NonZeroU32::new(limit).expect("not zero")
}

/// A body that is not UTF-8, a content type and headers in an order that is not sorted.
fn queued(tag: u8) -> QueuedItem {
    QueuedItem {
        body: vec![tag, 0xff, 0x00, b'{', b'}'],
        content_type: Some("application/json".into()),
        headers: vec![
            ("x-signature".into(), format!("sig-{tag}")),
            ("x-attempt".into(), "1".into()),
        ],
    }
}

fn failure(status: Option<u16>, error: &str) -> Failure {
    Failure {
        status,
        error: error.into(),
    }
}

async fn enqueued<S: Inbox>(store: &S, key: &Key, tag: u8) {
    match store.enqueue(req(key), queued(tag)).await.expect("enqueue") {
        ClaimOutcome::Claimed { token, .. } => assert_eq!(token.key, *key),
        other => panic!("{key}: expected Claimed, got {other:?}"),
    }
}

async fn take<S: Inbox>(store: &S, source: &SourceName, limit: u32, lease: Duration) -> Vec<Taken> {
    let taken = store
        .take(source, n(limit), lease, None)
        .await
        .expect("take");
    assert!(taken.len() <= limit as usize, "{taken:?}");
    taken
}

/// Takes exactly one item of `source`.
async fn take_one<S: Inbox>(store: &S, source: &SourceName, lease: Duration) -> Taken {
    let mut taken = take(store, source, 1, lease).await;
    assert_eq!(taken.len(), 1, "expected one due item of {source}");
    taken.pop().unwrap()
}

async fn stats_of<S: Inbox>(store: &S, source: &SourceName) -> Option<InboxStats> {
    let all = store.inbox_stats().await.expect("stats");
    let mut sources: Vec<_> = all.iter().map(|s| s.source.clone()).collect();
    sources.dedup();
    assert_eq!(sources.len(), all.len(), "one row per source: {all:?}");
    all.into_iter().find(|s| s.source == *source)
}

fn counts(stats: &Option<InboxStats>) -> (u64, u64, u64) {
    stats
        .as_ref()
        .map_or((0, 0, 0), |s| (s.pending, s.in_flight, s.dead))
}

pub async fn enqueue_then_duplicate<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let key = key_in(&src);
    enqueued(&store, &key, 1).await;
    match store.enqueue(req(&key), queued(2)).await.unwrap() {
        ClaimOutcome::Duplicate { state, .. } => assert_eq!(state, RecordState::Done),
        other => panic!("expected Duplicate, got {other:?}"),
    }
    match store.claim(req(&key)).await.unwrap() {
        ClaimOutcome::Duplicate { state, .. } => assert_eq!(state, RecordState::Done),
        other => panic!("a plain claim of a queued event: expected Duplicate, got {other:?}"),
    }
    let record = record(&store, &key).await;
    assert_eq!(
        (record.state, record.lease_until, record.holder),
        (RecordState::Done, None, None),
        "an inbox claim is done at once"
    );
    let taken = take(&store, &src, 10, LONG_LEASE).await;
    assert_eq!(taken.len(), 1, "one item: {taken:?}");
    let t = &taken[0];
    assert_eq!(t.key, key);
    assert_eq!(t.item.key, key);
    assert_eq!(
        t.queued,
        queued(1),
        "the first delivery's body, byte for byte"
    );
    assert_eq!((t.item.attempt, t.tries), (1, 1));
    assert!(t.lease_until > t.received_at, "{t:?}");
    let view = store.lookup(&key).await.unwrap();
    let rows: Vec<_> = view
        .history
        .iter()
        .map(|r| (r.outcome, r.processed))
        .collect();
    assert_eq!(
        rows,
        [
            (HistoryOutcome::Claimed, true),
            (HistoryOutcome::Duplicate, false),
            (HistoryOutcome::Duplicate, false)
        ]
    );
    assert!(view.history.iter().all(|r| r.note.is_none()));
}

pub async fn enqueue_is_atomic<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    // Conflict and duplicate answers queue nothing.
    let key = key_in(&src);
    let first = store.enqueue(req(&key).fingerprint(fp(1)), queued(1));
    assert!(matches!(first.await.unwrap(), ClaimOutcome::Claimed { .. }));
    let conflict = store.enqueue(req(&key).fingerprint(fp(2)), queued(2));
    assert!(matches!(
        conflict.await.unwrap(),
        ClaimOutcome::Conflict { .. }
    ));
    let duplicate = store.enqueue(req(&key).fingerprint(fp(1)), queued(3));
    assert!(matches!(
        duplicate.await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    // An event claimed on success and still in flight: the enqueue answers InFlight and queues
    // nothing.
    let held = key_in(&src);
    claimed(&store, req(&held)).await;
    assert!(matches!(
        store.enqueue(req(&held), queued(4)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    let taken = take(&store, &src, 10, LONG_LEASE).await;
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!((&taken[0].key, &taken[0].queued), (&key, &queued(1)));
    assert_eq!(counts(&stats_of(&store, &src).await), (0, 1, 0));
}

pub async fn take_leases_and_fences<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let key = key_in(&src);
    enqueued(&store, &key, 1).await;
    let first = take_one(&store, &src, SHORT_LEASE).await;
    assert_eq!((first.item.attempt, first.tries), (1, 1));
    assert!(
        take(&store, &src, 10, LONG_LEASE).await.is_empty(),
        "taken under a live lease"
    );
    h.advance(SHORT_LEASE).await;
    let second = take_one(&store, &src, LONG_LEASE).await;
    assert_eq!(second.item.id, first.item.id);
    assert_eq!((second.item.attempt, second.tries), (2, 2));
    assert_eq!(second.received_at, first.received_at);
    let oops = failure(Some(500), "downstream answered 500");
    assert_stale(store.delivered(first.item.clone()).await);
    assert_stale(
        store
            .retry_later(first.item.clone(), &oops, LONG_LEASE)
            .await,
    );
    assert_stale(store.dead_letter(first.item.clone(), &oops).await);
    // The stale reports changed nothing: the second taker still holds it.
    assert!(take(&store, &src, 10, LONG_LEASE).await.is_empty());
    assert_eq!(counts(&stats_of(&store, &src).await), (0, 1, 0));
    store
        .delivered(second.item.clone())
        .await
        .expect("delivered");
    // Reported once: every later report is stale.
    assert_stale(store.delivered(second.item.clone()).await);
    assert_stale(
        store
            .retry_later(second.item.clone(), &oops, LONG_LEASE)
            .await,
    );
    assert_eq!(
        outcomes(&store, &key).await,
        [HistoryOutcome::Claimed, HistoryOutcome::Completed]
    );
}

pub async fn a_lapsed_lease_may_report_until_taken_again<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let (a, b) = (key_in(&src), key_in(&src));
    enqueued(&store, &a, 1).await;
    enqueued(&store, &b, 2).await;
    let taken = take(&store, &src, 2, SHORT_LEASE).await;
    assert_eq!(taken.len(), 2, "{taken:?}");
    h.advance(SHORT_LEASE).await;
    assert_eq!(
        counts(&stats_of(&store, &src).await),
        (2, 0, 0),
        "a lapsed lease is pending again"
    );
    store
        .delivered(taken[0].item.clone())
        .await
        .expect("delivered late");
    let oops = failure(None, "timed out after 10s");
    store
        .retry_later(taken[1].item.clone(), &oops, Duration::ZERO)
        .await
        .expect("retry_later late");
    let again = take_one(&store, &src, LONG_LEASE).await;
    assert_eq!(again.key, b);
    assert_eq!(again.item.attempt, 2);
    assert!(take(&store, &src, 10, LONG_LEASE).await.is_empty());
}

pub async fn delivered_removes_and_completes<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let key = key_in(&src);
    enqueued(&store, &key, 1).await;
    assert_eq!(counts(&stats_of(&store, &src).await), (1, 0, 0));
    let t = take_one(&store, &src, LONG_LEASE).await;
    store.delivered(t.item.clone()).await.expect("delivered");
    let view = store.lookup(&key).await.unwrap();
    let rows: Vec<_> = view
        .history
        .iter()
        .map(|r| (r.outcome, r.processed, r.attempt))
        .collect();
    assert_eq!(
        rows,
        [
            (HistoryOutcome::Claimed, true, Some(1)),
            (HistoryOutcome::Completed, true, Some(1))
        ]
    );
    // The completion carries the queue lag (receipt to delivery) as its gap, for the advisor.
    let lag = view.history[1]
        .gap
        .expect("the completion's gap is its queue lag");
    assert!(lag < Duration::from_secs(60), "{lag:?}");
    assert_eq!(stats_of(&store, &src).await, None, "nothing left to count");
    assert!(take(&store, &src, 10, LONG_LEASE).await.is_empty());
    assert!(
        store
            .dead_letters(&ReplayFilter::source(Some(&src)), n(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store.enqueue(req(&key), queued(2)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
}

pub async fn retry_later_delays<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let key = key_in(&src);
    let delay = Duration::from_millis(600);
    enqueued(&store, &key, 1).await;
    let first = take_one(&store, &src, LONG_LEASE).await;
    let oops = failure(Some(503), "downstream answered 503");
    store
        .retry_later(first.item.clone(), &oops, delay)
        .await
        .expect("retry_later");
    assert_eq!(
        counts(&stats_of(&store, &src).await),
        (1, 0, 0),
        "waiting, not taken"
    );
    assert!(
        take(&store, &src, 10, LONG_LEASE).await.is_empty(),
        "not due yet"
    );
    h.advance(delay / 2).await;
    assert!(
        take(&store, &src, 10, LONG_LEASE).await.is_empty(),
        "not due yet"
    );
    h.advance(delay / 2).await;
    let second = take_one(&store, &src, LONG_LEASE).await;
    assert_eq!(second.item.id, first.item.id);
    assert_eq!((second.item.attempt, second.tries), (2, 2));
    assert_eq!(second.queued, queued(1));
    // Each failed try is in history, with its error, so the event's story outlives its item.
    assert_eq!(
        outcomes(&store, &key).await,
        [HistoryOutcome::Claimed, HistoryOutcome::AttemptFailed]
    );
    let view = store.lookup(&key).await.unwrap();
    let row = view.history.last().unwrap();
    assert_eq!(
        (row.processed, row.attempt, row.note.as_deref()),
        (false, Some(1), Some("downstream answered 503"))
    );
}

pub async fn dead_letter_keeps_body_and_attempts<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let key = key_in(&src);
    enqueued(&store, &key, 7).await;
    let first = take_one(&store, &src, LONG_LEASE).await;
    let (a, b) = (
        failure(Some(503), "downstream answered 503"),
        failure(None, "timed out after 10s"),
    );
    store
        .retry_later(first.item.clone(), &a, Duration::ZERO)
        .await
        .unwrap();
    let second = take_one(&store, &src, LONG_LEASE).await;
    store
        .dead_letter(second.item.clone(), &b)
        .await
        .expect("dead_letter");
    assert!(
        take(&store, &src, 10, LONG_LEASE).await.is_empty(),
        "a dead letter is not taken"
    );
    assert_stale(store.delivered(second.item.clone()).await);
    assert_stale(store.dead_letter(second.item.clone(), &b).await);
    let dead = store
        .dead_letters(&ReplayFilter::source(Some(&src)), n(10))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!((d.id, &d.key), (first.item.id, &key));
    assert_eq!(d.queued, queued(7));
    assert_eq!(d.received_at, first.received_at);
    assert!(d.dead_at >= d.received_at, "{d:?}");
    let logged: Vec<_> = d
        .attempts
        .iter()
        .map(|l| (l.attempt, l.status, l.error.as_str()))
        .collect();
    assert_eq!(
        logged,
        [
            (1, Some(503), "downstream answered 503"),
            (2, None, "timed out after 10s")
        ]
    );
    assert!(d.attempts[0].at <= d.attempts[1].at);
    assert_eq!(d.attempts[1].at, d.dead_at);
    // Listed with every source too; not with another one.
    let all = store
        .dead_letters(&ReplayFilter::default(), n(100))
        .await
        .unwrap();
    assert!(all.iter().any(|x| x.id == d.id), "{all:?}");
    assert!(
        store
            .dead_letters(&ReplayFilter::source(Some(&source())), n(10))
            .await
            .unwrap()
            .is_empty()
    );
    // Never delivered, so the row is not processed; the record is still done, so the sender's
    // retries are duplicates.
    let view = store.lookup(&key).await.unwrap();
    let rows: Vec<_> = view
        .history
        .iter()
        .map(|r| (r.outcome, r.processed, r.attempt, r.note.as_deref()))
        .collect();
    assert_eq!(
        rows[1..],
        [
            (
                HistoryOutcome::AttemptFailed,
                false,
                Some(1),
                Some("downstream answered 503")
            ),
            (
                HistoryOutcome::DeadLettered,
                false,
                Some(2),
                Some("timed out after 10s")
            )
        ]
    );
    assert!(matches!(
        store.enqueue(req(&key), queued(8)).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    assert_eq!(counts(&stats_of(&store, &src).await), (0, 0, 1));
}

/// Enqueues an event, takes it and dead-letters it; returns its item.
async fn killed<S: Inbox>(store: &S, src: &SourceName, tag: u8) -> ItemRef {
    let key = key_in(src);
    enqueued(store, &key, tag).await;
    let t = take_one(store, src, LONG_LEASE).await;
    assert_eq!(t.key, key);
    store
        .dead_letter(
            t.item.clone(),
            &failure(Some(500), "downstream answered 500"),
        )
        .await
        .expect("dead_letter");
    t.item
}

pub async fn replay_moves_back_with_fresh_budget<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let (src, other) = (source(), source());
    let old = killed(&store, &src, 1).await;
    h.advance(Duration::from_millis(1_000)).await;
    let recent = killed(&store, &src, 2).await;
    let elsewhere = killed(&store, &other, 3).await;

    let recent_only = ReplayFilter {
        source: Some(src.clone()),
        since: Some(Duration::from_millis(500)),
        event_id: None,
    };
    let moved = store
        .replay_dead_letters(&recent_only, "downstream fixed")
        .await
        .expect("replay");
    assert_eq!(moved, 1);
    assert_eq!(counts(&stats_of(&store, &src).await), (1, 0, 1));
    let again = take_one(&store, &src, LONG_LEASE).await;
    assert_eq!(again.item.id, recent.id);
    assert_eq!(
        (again.item.attempt, again.tries),
        (2, 1),
        "the attempt goes on, the budget starts afresh"
    );
    assert_eq!(again.queued, queued(2));
    assert_stale(store.delivered(recent.clone()).await);
    let view = store.lookup(&recent.key).await.unwrap();
    let rows: Vec<_> = view
        .history
        .iter()
        .map(|r| (r.outcome, r.note.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            (HistoryOutcome::Claimed, None),
            (
                HistoryOutcome::DeadLettered,
                Some("downstream answered 500")
            ),
            (HistoryOutcome::Replayed, Some("downstream fixed"))
        ]
    );
    let replayed = view.history.last().unwrap();
    assert_eq!((replayed.processed, replayed.attempt), (false, Some(1)));

    // Dead again: the attempts of both budgets are kept.
    store
        .dead_letter(again.item.clone(), &failure(Some(502), "bad gateway"))
        .await
        .unwrap();
    let dead = store
        .dead_letters(&ReplayFilter::source(Some(&src)), n(10))
        .await
        .unwrap();
    let d = dead.iter().find(|d| d.id == recent.id).expect("dead again");
    let attempts: Vec<_> = d.attempts.iter().map(|l| l.attempt).collect();
    assert_eq!(attempts, [1, 2]);

    // No filter: every dead letter, of every source.
    let moved = store
        .replay_dead_letters(&ReplayFilter::default(), "all of them")
        .await
        .unwrap();
    assert_eq!(moved, 3);
    let ids: Vec<i64> = take(&store, &src, 10, LONG_LEASE)
        .await
        .iter()
        .map(|t| t.item.id)
        .collect();
    assert_eq!(ids, [old.id, recent.id], "oldest first");
    assert_eq!(
        take_one(&store, &other, LONG_LEASE).await.item.id,
        elsewhere.id
    );
    assert!(
        store
            .dead_letters(&ReplayFilter::default(), n(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .replay_dead_letters(&ReplayFilter::default(), "nothing left")
            .await
            .unwrap(),
        0
    );
}

pub async fn purge_dead_letters_respects_retention<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let retention = Duration::from_millis(500);
    let first = killed(&store, &src, 1).await;
    h.advance(Duration::from_millis(1_000)).await;
    let (second, third) = (killed(&store, &src, 2).await, killed(&store, &src, 3).await);
    // Queued, never dead: never purged.
    let live = key_in(&src);
    enqueued(&store, &live, 4).await;
    assert_eq!(store.purge_dead_letters(retention, n(10)).await.unwrap(), 1);
    let left: Vec<i64> = store
        .dead_letters(&ReplayFilter::source(Some(&src)), n(10))
        .await
        .unwrap()
        .iter()
        .map(|d| d.id)
        .collect();
    assert_eq!(left, [second.id, third.id]);
    assert_ne!(left[0], first.id);
    h.advance(Duration::from_millis(1_000)).await;
    let mut batches = Vec::new();
    loop {
        let purged = store.purge_dead_letters(retention, n(1)).await.unwrap();
        assert!(purged <= 1, "a batch deletes at most its size");
        if purged == 0 {
            break;
        }
        batches.push(purged);
    }
    assert_eq!(batches, [1, 1]);
    assert!(
        store
            .dead_letters(&ReplayFilter::default(), n(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(take_one(&store, &src, LONG_LEASE).await.key, live);
}

pub async fn stats_count_pending_in_flight_dead_and_oldest_age<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let (src, dead_only) = (source(), source());
    let step = Duration::from_millis(1_000);
    assert_eq!(stats_of(&store, &src).await, None);
    enqueued(&store, &key_in(&src), 0).await;
    h.advance(step).await;
    for tag in 1..4 {
        enqueued(&store, &key_in(&src), tag).await;
    }
    // The oldest and the next are taken; the next dies.
    let taken = take(&store, &src, 2, LONG_LEASE).await;
    assert_eq!(taken.len(), 2);
    store
        .dead_letter(taken[1].item.clone(), &failure(Some(410), "gone"))
        .await
        .unwrap();
    // One more under a short lease.
    take_one(&store, &src, SHORT_LEASE).await;
    let s = stats_of(&store, &src).await.expect("stats");
    assert_eq!((s.pending, s.in_flight, s.dead), (1, 2, 1), "{s:?}");
    let age = s.oldest_pending.expect("an age");
    assert!(
        age >= step && age < step * 30,
        "the oldest (in flight) counts: {age:?}"
    );
    h.advance(SHORT_LEASE).await;
    let s = stats_of(&store, &src).await.expect("stats");
    assert_eq!(
        (s.pending, s.in_flight, s.dead),
        (2, 1, 1),
        "a lapsed lease is pending: {s:?}"
    );
    assert!(s.oldest_pending.unwrap() >= step + SHORT_LEASE, "{s:?}");
    // Delivered: the age is the next oldest's.
    store.delivered(taken[0].item.clone()).await.unwrap();
    let s = stats_of(&store, &src).await.expect("stats");
    assert_eq!((s.pending, s.in_flight, s.dead), (2, 0, 1), "{s:?}");
    let age = s.oldest_pending.unwrap();
    assert!(age >= SHORT_LEASE && age < step, "{age:?}");
    // Dead letters only: no queue lag.
    killed(&store, &dead_only, 9).await;
    let s = stats_of(&store, &dead_only).await.expect("stats");
    assert_eq!(
        (s.pending, s.in_flight, s.dead, s.oldest_pending),
        (0, 0, 1, None)
    );
}

pub async fn takes_are_per_source<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let (a, b) = (source(), source());
    let a_keys = [key_in(&a), key_in(&a)];
    let b_keys = [key_in(&b), key_in(&b), key_in(&b)];
    for (i, k) in a_keys.iter().chain(&b_keys).enumerate() {
        enqueued(&store, k, i as u8).await;
    }
    let from_a: Vec<Key> = take(&store, &a, 10, LONG_LEASE)
        .await
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(from_a, a_keys, "oldest first, only a's");
    assert_eq!(counts(&stats_of(&store, &a).await), (0, 2, 0));
    assert_eq!(counts(&stats_of(&store, &b).await), (3, 0, 0));
    let from_b: Vec<Key> = take(&store, &b, 2, LONG_LEASE)
        .await
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(from_b, b_keys[..2]);
    assert!(take(&store, &a, 10, LONG_LEASE).await.is_empty());
    assert!(take(&store, &source(), 10, LONG_LEASE).await.is_empty());
}

pub async fn concurrent_takes_never_share_an_item<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let items = 48;
    for i in 0..items {
        enqueued(&store, &key_in(&src), i as u8).await;
    }
    let takers = 8;
    let barrier = Arc::new(tokio::sync::Barrier::new(takers));
    let tasks: Vec<_> = (0..takers)
        .map(|_| {
            let store = h.store();
            let barrier = barrier.clone();
            let src = src.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let mut mine = Vec::new();
                loop {
                    let taken = store
                        .take(&src, n(3), LONG_LEASE, None)
                        .await
                        .expect("take");
                    if taken.is_empty() {
                        return mine;
                    }
                    mine.extend(taken.into_iter().map(|t| (t.item.id, t.item.attempt)));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let ids: HashSet<i64> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(all.len(), items, "every item taken exactly once: {all:?}");
    assert_eq!(ids.len(), items, "no item taken twice: {all:?}");
    assert!(all.iter().all(|(_, attempt)| *attempt == 1), "{all:?}");
    assert_eq!(counts(&stats_of(&store, &src).await), (0, items as u64, 0));
}

pub async fn boot_frees_items_of_earlier_boots<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox + Instances,
{
    let store = h.store();
    let src = source();
    let name = InstanceName::new("gw-inbox").unwrap();
    let first = super::booted(&store, &name).await;
    let keys: Vec<Key> = (0..4).map(|_| key_in(&src)).collect();
    for (i, k) in keys.iter().enumerate() {
        enqueued(&store, k, i as u8).await;
    }
    let take_as = |holder: Option<Holder>| {
        let store = store.clone();
        let src = src.clone();
        async move {
            let mut t = store
                .take(&src, n(1), LONG_LEASE, holder.as_ref())
                .await
                .expect("take");
            assert_eq!(t.len(), 1);
            t.pop().unwrap()
        }
    };
    // Held by the first boot, by another instance, by nobody; the fourth waits.
    let mine = take_as(Some(first.holder.clone())).await;
    let theirs = take_as(Some(holder("gw-other", 1))).await;
    let anonymous = take_as(None).await;
    assert_eq!(
        [&mine.key, &theirs.key, &anonymous.key],
        [&keys[0], &keys[1], &keys[2]]
    );

    let second = super::restarted(&store, &first).await;
    assert_eq!(second.holder.boot, first.holder.boot + 1);
    let s = stats_of(&store, &src).await.expect("stats");
    assert_eq!((s.pending, s.in_flight), (2, 2), "{s:?}");
    let again = store
        .take(&src, n(10), LONG_LEASE, Some(&second.holder))
        .await
        .unwrap();
    let got: Vec<(&Key, u32)> = again.iter().map(|t| (&t.key, t.item.attempt)).collect();
    assert_eq!(
        got,
        [(&keys[0], 2), (&keys[3], 1)],
        "the first boot's item is due at once; the others' are still leased"
    );
    assert_stale(store.delivered(mine.item.clone()).await);
    store.delivered(theirs.item.clone()).await.unwrap();
    store.delivered(anonymous.item.clone()).await.unwrap();
    // The next boot frees what the second took.
    super::restarted(&store, &second).await;
    assert_eq!(take(&store, &src, 10, LONG_LEASE).await.len(), 2);
}

pub async fn requeue_queues_a_done_event_again_with_its_reason<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let key = key_in(&src);
    enqueued(&store, &key, 1).await;
    let t = take_one(&store, &src, LONG_LEASE).await;
    store.delivered(t.item.clone()).await.expect("delivered");
    // Done within its TTL: a plain enqueue is a duplicate and queues nothing...
    let dup = store.enqueue(req(&key), queued(2)).await.unwrap();
    assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");
    assert_eq!(counts(&stats_of(&store, &src).await), (0, 0, 0));
    // ...a forced one queues it anyway, and history says why.
    let forced = store
        .requeue(req(&key), queued(3), "finance asked for a re-run")
        .await
        .unwrap();
    assert!(
        matches!(forced, ClaimOutcome::Duplicate { .. }),
        "{forced:?}"
    );
    let again = take_one(&store, &src, LONG_LEASE).await;
    assert_eq!(again.key, key);
    assert_eq!(again.queued, queued(3));
    let view = store.lookup(&key).await.unwrap();
    let replayed = view
        .history
        .iter()
        .find(|r| r.outcome == HistoryOutcome::Replayed)
        .expect("a replayed row");
    assert_eq!(replayed.note.as_deref(), Some("finance asked for a re-run"));
    assert!(!replayed.processed);
    assert!(
        view.record.is_some(),
        "the record stays: retries are still duplicates"
    );
    // An event never seen is claimed and queued, as an enqueue would.
    let fresh = key_in(&src);
    let first = store
        .requeue(req(&fresh), queued(4), "captured at the edge")
        .await
        .unwrap();
    assert!(matches!(first, ClaimOutcome::Claimed { .. }), "{first:?}");
    let dup = store.enqueue(req(&fresh), queued(4)).await.unwrap();
    assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");
}

/// An event's queue items by key ([`Inbox::queued`]), what the stats say the downstream did
/// lately ([`InboxStats::failing`], [`InboxStats::last_failure`]), and dead letters chosen by
/// event id and age, listed and replayed by the same filter.
pub async fn queued_items_failures_and_filters_by_event<H>(h: &H)
where
    H: Harness,
    H::Store: Inbox,
{
    let store = h.store();
    let src = source();
    let (a, b, c) = (key_in(&src), key_in(&src), key_in(&src));
    assert!(store.queued(&a).await.unwrap().is_empty(), "never queued");
    for (k, tag) in [(&a, 1), (&b, 2), (&c, 3)] {
        enqueued(&store, k, tag).await;
    }
    let queued_a = store.queued(&a).await.unwrap();
    assert_eq!(queued_a.len(), 1, "{queued_a:?}");
    let q = &queued_a[0];
    assert_eq!(
        (q.attempt, q.in_flight_until, q.dead_at, q.attempts.len()),
        (0, None, None, 0)
    );
    assert_eq!(q.due_at, q.received_at);
    let stats = stats_of(&store, &src).await.unwrap();
    assert_eq!((stats.failing, stats.last_failure.as_ref()), (0, None));

    // Take all three: in flight while the lease runs.
    let taken = take(&store, &src, 10, LONG_LEASE).await;
    assert_eq!(taken.len(), 3);
    let of = |k: &Key| taken.iter().find(|t| t.key == *k).unwrap().item.clone();
    let q = store.queued(&b).await.unwrap().remove(0);
    assert_eq!(q.attempt, 1);
    assert!(q.in_flight_until.is_some(), "{q:?}");
    // a fails and waits; b dies; c is delivered (and leaves the queue).
    store
        .retry_later(
            of(&a),
            &failure(Some(502), "downstream answered 502"),
            LONG_LEASE,
        )
        .await
        .unwrap();
    h.advance(Duration::from_millis(5)).await;
    store
        .dead_letter(of(&b), &failure(None, "timed out after 10s"))
        .await
        .unwrap();
    store.delivered(of(&c)).await.unwrap();
    assert!(
        store.queued(&c).await.unwrap().is_empty(),
        "delivered: gone"
    );
    let q = store.queued(&a).await.unwrap().remove(0);
    assert_eq!((q.in_flight_until, q.dead_at), (None, None));
    assert!(q.due_at > q.received_at, "due after its delay: {q:?}");
    let logged: Vec<_> = q.attempts.iter().map(|l| (l.attempt, l.status)).collect();
    assert_eq!(logged, [(1, Some(502))]);
    let q = store.queued(&b).await.unwrap().remove(0);
    assert!(q.dead_at.is_some(), "{q:?}");
    assert_eq!(q.attempts[0].error, "timed out after 10s");

    // One failing item waits (a); the latest failure is b's death.
    let stats = stats_of(&store, &src).await.unwrap();
    assert_eq!((stats.pending, stats.dead, stats.failing), (1, 1, 1));
    let last = stats.last_failure.expect("a failure");
    assert_eq!(last.event_id, b.event_id);
    assert_eq!(
        (
            last.attempt.attempt,
            last.attempt.status,
            last.attempt.error.as_str()
        ),
        (1, None, "timed out after 10s")
    );

    // Dead letters by event id, and by age, listed as a replay would choose them.
    let filter = |event_id: &Key, since: Option<Duration>| ReplayFilter {
        source: Some(src.clone()),
        since,
        event_id: Some(event_id.event_id.clone()),
    };
    let listed = store.dead_letters(&filter(&b, None), n(10)).await.unwrap();
    assert_eq!(listed.iter().map(|d| &d.key).collect::<Vec<_>>(), [&b]);
    assert!(
        store
            .dead_letters(&filter(&a, None), n(10))
            .await
            .unwrap()
            .is_empty(),
        "a is no dead letter"
    );
    let no_such = ReplayFilter {
        event_id: Some(EventId::new("evt_nobody").unwrap()),
        ..ReplayFilter::default()
    };
    assert!(
        store
            .dead_letters(&no_such, n(10))
            .await
            .unwrap()
            .is_empty()
    );
    // An event id is one source's: without its source, it selects nothing.
    let sourceless = ReplayFilter {
        event_id: Some(b.event_id.clone()),
        ..ReplayFilter::default()
    };
    assert!(
        store
            .dead_letters(&sourceless, n(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .replay_dead_letters(&sourceless, "no source")
            .await
            .unwrap(),
        0
    );
    h.advance(Duration::from_millis(200)).await;
    let young = filter(&b, Some(Duration::from_millis(100)));
    assert!(
        store.dead_letters(&young, n(10)).await.unwrap().is_empty(),
        "died more than 100 ms ago"
    );
    assert_eq!(
        store
            .replay_dead_letters(&young, "too young")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store.replay_dead_letters(&no_such, "nobody").await.unwrap(),
        0
    );
    assert_eq!(
        store
            .replay_dead_letters(&filter(&b, None), "b alone")
            .await
            .unwrap(),
        1
    );
    let q = store.queued(&b).await.unwrap().remove(0);
    assert_eq!(q.dead_at, None, "back in the queue");
    assert_eq!(counts(&stats_of(&store, &src).await), (2, 0, 0));
}
