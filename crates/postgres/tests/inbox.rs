//! The inbox on a real PostgreSQL: enqueue's atomicity and races, takes shared by two stores
//! (two gateways) on one schema, leases, retries, dead letters, replay, purge, stats and boots.
//! Each test runs on its own schema, dropped when it ends; under CI an unreachable server fails.

mod common;

use std::collections::HashSet;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use common::SchemaGuard;
use idemgate_core::inbox::{Failure, Inbox, QueuedItem, ReplayFilter, Taken};
use idemgate_core::{
    ClaimOutcome, ClaimRequest, ClaimStore, Fingerprint, HistoryOutcome, InstanceName, Instances,
    Key, SourceName, StoreError,
};
use idemgate_postgres::{Expiry, PgConfig, PgError, PgStore, SCHEMA_VERSION};

const LONG: Duration = Duration::from_secs(3_600);

fn key(source: &str) -> Key {
    Key::parse(
        source,
        &format!("evt_{:016x}", idemgate_core::machine::nonce()),
    )
    .unwrap()
}

fn req(key: &Key) -> ClaimRequest {
    ClaimRequest::new(key.clone(), Duration::from_secs(60), LONG)
}

fn item(body: &str) -> QueuedItem {
    QueuedItem {
        body: body.as_bytes().to_vec(),
        content_type: Some("application/json".to_owned()),
        headers: vec![
            ("x-signature".to_owned(), "v1=abc".to_owned()),
            ("x-attempt".to_owned(), "1".to_owned()),
        ],
    }
}

fn source(name: &str) -> SourceName {
    SourceName::new(name).unwrap()
}

fn n(v: u32) -> NonZeroU32 {
    NonZeroU32::new(v).unwrap()
}

fn failure(status: Option<u16>, error: &str) -> Failure {
    Failure {
        status,
        error: error.to_owned(),
    }
}

/// Whether the test server answers; skips (or fails under CI) when it does not.
async fn server_up() -> bool {
    let result = tokio_postgres::connect(&common::url(), tokio_postgres::NoTls).await;
    idemgate_core::testkit::require_service(result.map(|_| ()), common::WHAT_TO_START).is_some()
}

/// A store on a fresh schema (and its guard), or `None` to skip.
async fn store(expiry: Expiry) -> Option<(PgStore, SchemaGuard)> {
    let (cfg, guard) = common::config(expiry);
    Some((common::connect(cfg).await?, guard))
}

async fn enqueue_one(store: &PgStore, key: &Key, body: &str) {
    let outcome = store.enqueue(req(key), item(body)).await.unwrap();
    assert!(
        matches!(outcome, ClaimOutcome::Claimed { .. }),
        "{outcome:?}"
    );
}

async fn take_one(store: &PgStore, source: &SourceName, lease: Duration) -> Taken {
    let mut taken = store.take(source, n(10), lease, None).await.unwrap();
    assert_eq!(taken.len(), 1, "{taken:?}");
    taken.pop().unwrap()
}

async fn scalar(schema: &str, sql: &str) -> i64 {
    common::raw(schema)
        .await
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0)
}

fn outcomes(view: &idemgate_core::EventView) -> Vec<HistoryOutcome> {
    view.history.iter().map(|h| h.outcome).collect()
}

fn assert_stale(result: Result<(), StoreError>, key: &Key, attempt: u32) {
    match result {
        Err(StoreError::StaleToken { key: k, attempt: a }) => {
            assert_eq!((&k, a), (key, attempt));
        }
        other => panic!("expected a stale report for {key} attempt {attempt}, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Enqueue

async fn enqueue_take_deliver(expiry: Expiry) {
    let Some((store, _guard)) = store(expiry).await else {
        return;
    };
    let k = key("hooks");
    let src = k.source.clone();
    enqueue_one(&store, &k, "{\"n\":1}").await;
    let again = store.enqueue(req(&k), item("{\"n\":2}")).await.unwrap();
    assert!(matches!(again, ClaimOutcome::Duplicate { .. }), "{again:?}");
    // The claim is an ordinary done record: a plain claim is a duplicate too.
    let plain = store.claim(req(&k)).await.unwrap();
    assert!(matches!(plain, ClaimOutcome::Duplicate { .. }), "{plain:?}");

    let taken = take_one(&store, &src, Duration::from_secs(60)).await;
    assert_eq!(taken.key, k);
    assert_eq!(taken.queued, item("{\"n\":1}"));
    assert_eq!((taken.item.attempt, taken.tries), (1, 1));
    assert!(taken.lease_until > taken.received_at);
    assert!(
        store
            .take(&src, n(10), Duration::from_secs(60), None)
            .await
            .unwrap()
            .is_empty(),
        "a taken item is not taken again while its lease runs"
    );
    store.delivered(taken.item.clone()).await.unwrap();
    // Reported already (the item is gone): stale.
    assert_stale(store.delivered(taken.item.clone()).await, &k, 1);

    let view = store.lookup(&k).await.unwrap();
    assert_eq!(
        outcomes(&view),
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::Duplicate,
            HistoryOutcome::Duplicate,
            HistoryOutcome::Completed
        ]
    );
    assert!(view.history[0].processed && view.history[3].processed);
    assert_eq!(view.history[3].attempt, Some(1));
    assert!(view.history.iter().all(|h| h.note.is_none()));
    assert!(store.inbox_stats().await.unwrap().is_empty());
}

#[tokio::test]
async fn enqueue_take_deliver_batched() {
    enqueue_take_deliver(Expiry::batched()).await;
}

#[tokio::test]
async fn enqueue_take_deliver_partitioned() {
    enqueue_take_deliver(common::partitioned_hourly()).await;
}

#[tokio::test]
async fn a_conflict_or_a_duplicate_queues_nothing() {
    let Some((store, guard)) = store(Expiry::batched()).await else {
        return;
    };
    let k = key("hooks");
    let a = Fingerprint::from_slice(&[1; 32]).unwrap();
    let b = Fingerprint::from_slice(&[2; 32]).unwrap();
    let first = store
        .enqueue(req(&k).fingerprint(a), item("a"))
        .await
        .unwrap();
    assert!(matches!(first, ClaimOutcome::Claimed { .. }), "{first:?}");
    let conflict = store
        .enqueue(req(&k).fingerprint(b), item("b"))
        .await
        .unwrap();
    assert!(
        matches!(conflict, ClaimOutcome::Conflict { .. }),
        "{conflict:?}"
    );
    let dup = store
        .enqueue(req(&k).fingerprint(a), item("a"))
        .await
        .unwrap();
    assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");
    assert_eq!(scalar(&guard.schema, "SELECT count(*) FROM inbox").await, 1);
    let taken = take_one(&store, &k.source, LONG).await;
    assert_eq!(taken.queued.body, b"a");
}

/// The item insert fails (a trigger in the test's schema refuses it): the claim is rolled back
/// with it, and the event is claimed and queued once the insert works again.
#[tokio::test]
async fn a_failed_item_insert_writes_no_claim() {
    let Some((store, guard)) = store(Expiry::batched()).await else {
        return;
    };
    let client = common::raw(&guard.schema).await;
    client
        .batch_execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'no room in the inbox'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON inbox FOR EACH ROW EXECUTE FUNCTION refuse();",
        )
        .await
        .unwrap();
    let k = key("hooks");
    let err = store.enqueue(req(&k), item("x")).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err:?}");
    let view = store.lookup(&k).await.unwrap();
    assert!(view.record.is_none(), "{view:?}");
    assert!(view.history.is_empty(), "{view:?}");
    assert_eq!(scalar(&guard.schema, "SELECT count(*) FROM dedup").await, 0);

    client
        .batch_execute("DROP TRIGGER refuse ON inbox")
        .await
        .unwrap();
    enqueue_one(&store, &k, "x").await;
    assert_eq!(scalar(&guard.schema, "SELECT count(*) FROM inbox").await, 1);
}

async fn sixteen_concurrent_enqueues(expiry: Expiry) {
    let (mut cfg, guard) = common::config(expiry);
    cfg.pool_size = NonZeroUsize::new(17).unwrap();
    let Some(store) = common::connect(cfg).await else {
        return;
    };
    for round in 0..5 {
        let k = key("race");
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let (store, k, barrier) = (store.clone(), k.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.enqueue(req(&k), item(&format!("{i}"))).await
                })
            })
            .collect();
        let mut claimed = 0;
        for t in tasks {
            match t.await.unwrap().unwrap() {
                ClaimOutcome::Claimed { .. } => claimed += 1,
                ClaimOutcome::Duplicate { .. } => {}
                other => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(claimed, 1, "round {round}");
    }
    assert_eq!(scalar(&guard.schema, "SELECT count(*) FROM inbox").await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_enqueues_of_one_key_queue_one_batched() {
    sixteen_concurrent_enqueues(Expiry::batched()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_enqueues_of_one_key_queue_one_partitioned() {
    sixteen_concurrent_enqueues(common::partitioned_hourly()).await;
}

// ---------------------------------------------------------------------------------------------
// Taking and reporting

/// Two stores on one schema, as two gateways, take from 500 items at once: every item goes to
/// exactly one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_consumers_take_each_item_exactly_once() {
    let (cfg, guard) = common::config(Expiry::batched());
    let Some(first) = common::connect(cfg.clone()).await else {
        return;
    };
    let second = PgStore::connect(cfg).await.unwrap();
    let src = source("shared");
    let ks: Vec<Key> = (0..500)
        .map(|i| Key::parse("shared", &format!("evt_{i:04}")).unwrap())
        .collect();
    // Enqueued by 5 tasks at once.
    let feeders: Vec<_> = ks
        .chunks(100)
        .map(|chunk| {
            let (store, chunk) = (first.clone(), chunk.to_vec());
            tokio::spawn(async move {
                for k in chunk {
                    enqueue_one(&store, &k, k.event_id.as_str()).await;
                }
            })
        })
        .collect();
    for f in feeders {
        f.await.unwrap();
    }

    let consumers: Vec<_> = [first, second]
        .into_iter()
        .flat_map(|store| [store.clone(), store])
        .map(|store| {
            let src = src.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let taken = store.take(&src, n(7), LONG, None).await.unwrap();
                    if taken.is_empty() {
                        return mine;
                    }
                    for t in taken {
                        assert_eq!(t.queued.body, t.key.event_id.as_str().as_bytes());
                        store.delivered(t.item.clone()).await.unwrap();
                        mine.push(t.item.id);
                    }
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut per_consumer = Vec::new();
    for c in consumers {
        let mine = c.await.unwrap();
        per_consumer.push(mine.len());
        all.extend(mine);
    }
    let distinct: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), 500, "taken per consumer: {per_consumer:?}");
    assert_eq!(distinct.len(), 500);
    assert_eq!(scalar(&guard.schema, "SELECT count(*) FROM inbox").await, 0);
    assert_eq!(
        scalar(
            &guard.schema,
            "SELECT count(*) FROM history WHERE outcome = 'completed'"
        )
        .await,
        500
    );
}

#[tokio::test]
async fn a_lapsed_lease_is_taken_again_and_fences_the_first_taker() {
    let Some((store, _guard)) = store(Expiry::batched()).await else {
        return;
    };
    let k = key("hooks");
    enqueue_one(&store, &k, "x").await;
    let first = take_one(&store, &k.source, Duration::from_millis(200)).await;
    assert_eq!(first.item.attempt, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = take_one(&store, &k.source, LONG).await;
    assert_eq!(second.item.id, first.item.id);
    assert_eq!((second.item.attempt, second.tries), (2, 2));
    assert_stale(store.delivered(first.item.clone()).await, &k, 1);
    assert_stale(
        store
            .retry_later(
                first.item.clone(),
                &failure(Some(500), "late"),
                Duration::ZERO,
            )
            .await,
        &k,
        1,
    );
    assert_stale(
        store
            .dead_letter(first.item.clone(), &failure(None, "late"))
            .await,
        &k,
        1,
    );
    store.delivered(second.item.clone()).await.unwrap();
    // Gone: the report still names the event.
    assert_stale(store.delivered(second.item.clone()).await, &k, 2);
}

/// A holder whose lease lapsed may still report while nobody took the item again.
#[tokio::test]
async fn a_lapsed_lease_not_taken_again_may_still_report() {
    let Some((store, _guard)) = store(Expiry::batched()).await else {
        return;
    };
    let k = key("hooks");
    enqueue_one(&store, &k, "x").await;
    let taken = take_one(&store, &k.source, Duration::from_millis(50)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.delivered(taken.item.clone()).await.unwrap();
    assert!(store.inbox_stats().await.unwrap().is_empty());
}

#[tokio::test]
async fn retry_later_delays_by_the_database_clock() {
    let Some((store, guard)) = store(Expiry::batched()).await else {
        return;
    };
    let k = key("hooks");
    enqueue_one(&store, &k, "x").await;
    let first = take_one(&store, &k.source, LONG).await;
    store
        .retry_later(
            first.item.clone(),
            &failure(Some(503), "downstream answered 503"),
            Duration::from_millis(400),
        )
        .await
        .unwrap();
    // Reported once: a second report of the attempt is stale.
    assert_stale(
        store
            .retry_later(first.item.clone(), &failure(None, "again"), Duration::ZERO)
            .await,
        &k,
        1,
    );
    let due_in = scalar(
        &guard.schema,
        "SELECT epoch_ms(due_at) - epoch_ms(now()) FROM inbox",
    )
    .await;
    assert!((100..=400).contains(&due_in), "due in {due_in} ms");
    assert!(
        store
            .take(&k.source, n(10), LONG, None)
            .await
            .unwrap()
            .is_empty()
    );
    let stats = store.inbox_stats().await.unwrap();
    assert_eq!((stats[0].pending, stats[0].in_flight), (1, 0));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let second = take_one(&store, &k.source, LONG).await;
    assert_eq!((second.item.attempt, second.tries), (2, 2));
    store.delivered(second.item.clone()).await.unwrap();
}

#[tokio::test]
async fn a_dead_letter_keeps_its_body_and_every_attempt() {
    let Some((store, _guard)) = store(Expiry::batched()).await else {
        return;
    };
    let k = key("hooks");
    enqueue_one(&store, &k, "{\"id\":7}").await;
    let first = take_one(&store, &k.source, LONG).await;
    store
        .retry_later(
            first.item.clone(),
            &failure(Some(503), "downstream answered 503"),
            Duration::ZERO,
        )
        .await
        .unwrap();
    let second = take_one(&store, &k.source, LONG).await;
    store
        .dead_letter(second.item.clone(), &failure(None, "timed out after 10s"))
        .await
        .unwrap();
    assert_stale(store.delivered(second.item.clone()).await, &k, 2);
    assert!(
        store
            .take(&k.source, n(10), LONG, None)
            .await
            .unwrap()
            .is_empty(),
        "a dead letter is never taken"
    );

    let dead = store
        .dead_letters(&ReplayFilter::source(Some(&k.source)), n(10))
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!((d.id, &d.key), (first.item.id, &k));
    assert_eq!(d.queued, item("{\"id\":7}"));
    assert_eq!(d.received_at, first.received_at);
    assert!(d.dead_at >= d.received_at);
    let logged: Vec<_> = d
        .attempts
        .iter()
        .map(|a| (a.attempt, a.status, a.error.as_str()))
        .collect();
    assert_eq!(
        logged,
        [
            (1, Some(503), "downstream answered 503"),
            (2, None, "timed out after 10s")
        ]
    );
    assert!(d.attempts[0].at <= d.attempts[1].at);
    assert!(
        store
            .dead_letters(&ReplayFilter::source(Some(&source("other"))), n(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .dead_letters(&ReplayFilter::default(), n(10))
            .await
            .unwrap(),
        dead
    );

    let history = store.lookup(&k).await.unwrap().history;
    let last = history.last().unwrap();
    assert_eq!(
        (last.outcome, last.attempt, last.processed),
        (HistoryOutcome::DeadLettered, Some(2), false)
    );
    let stats = store.inbox_stats().await.unwrap();
    assert_eq!(
        (
            stats[0].pending,
            stats[0].in_flight,
            stats[0].dead,
            stats[0].oldest_pending
        ),
        (0, 0, 1, None)
    );
}

/// Dead-letters `k`'s item at its first attempt; it must be its source's oldest due item.
async fn kill(store: &PgStore, k: &Key) -> Taken {
    let taken = store
        .take(&k.source, n(1), LONG, None)
        .await
        .unwrap()
        .pop()
        .expect("an item");
    assert_eq!(&taken.key, k);
    store
        .dead_letter(taken.item.clone(), &failure(Some(400), "refused"))
        .await
        .unwrap();
    taken
}

#[tokio::test]
async fn a_replay_gives_a_fresh_budget_and_records_its_reason() {
    let Some((store, _guard)) = store(Expiry::batched()).await else {
        return;
    };
    let k = key("hooks");
    let other = key("elsewhere");
    enqueue_one(&store, &k, "x").await;
    enqueue_one(&store, &other, "y").await;
    let dead = kill(&store, &k).await;
    kill(&store, &other).await;

    let all_hooks = ReplayFilter {
        source: Some(k.source.clone()),
        since: None,
        event_id: None,
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let too_recent = ReplayFilter {
        source: None,
        since: Some(Duration::from_millis(10)),
        event_id: None,
    };
    assert_eq!(
        store.replay_dead_letters(&too_recent, "no").await.unwrap(),
        0
    );
    assert_eq!(
        store
            .replay_dead_letters(&all_hooks, "downstream fixed")
            .await
            .unwrap(),
        1
    );
    // Only the other source's dead letter is left.
    let left = store
        .dead_letters(&ReplayFilter::default(), n(10))
        .await
        .unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].key, other);

    let again = take_one(&store, &k.source, LONG).await;
    assert_eq!(again.item.id, dead.item.id);
    assert_eq!((again.item.attempt, again.tries), (2, 1));
    // The replay fenced the dead attempt.
    assert_stale(store.delivered(dead.item.clone()).await, &k, 1);
    let history = store.lookup(&k).await.unwrap().history;
    let replayed = history
        .iter()
        .find(|h| h.outcome == HistoryOutcome::Replayed)
        .expect("a replayed row");
    assert_eq!(replayed.note.as_deref(), Some("downstream fixed"));
    assert_eq!((replayed.attempt, replayed.processed), (Some(1), false));
    store.delivered(again.item.clone()).await.unwrap();
    assert_eq!(
        outcomes(&store.lookup(&k).await.unwrap()),
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::DeadLettered,
            HistoryOutcome::Replayed,
            HistoryOutcome::Completed
        ]
    );

    // Everything, every source.
    let everything = ReplayFilter::default();
    assert_eq!(
        store.replay_dead_letters(&everything, "all").await.unwrap(),
        1
    );
    assert!(
        store
            .dead_letters(&ReplayFilter::default(), n(10))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn purge_removes_old_dead_letters_in_bounded_batches() {
    let Some((store, guard)) = store(Expiry::batched()).await else {
        return;
    };
    let ks = [key("hooks"), key("hooks"), key("hooks")];
    for k in &ks {
        enqueue_one(&store, k, "x").await;
    }
    kill(&store, &ks[0]).await;
    kill(&store, &ks[1]).await;
    // One item stays live: purge never touches it.
    assert_eq!(store.purge_dead_letters(LONG, n(10)).await.unwrap(), 0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let recent = Duration::from_millis(5);
    assert_eq!(store.purge_dead_letters(recent, n(1)).await.unwrap(), 1);
    assert_eq!(store.purge_dead_letters(recent, n(1)).await.unwrap(), 1);
    assert_eq!(store.purge_dead_letters(recent, n(1)).await.unwrap(), 0);
    assert!(
        store
            .dead_letters(&ReplayFilter::default(), n(10))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        scalar(&guard.schema, "SELECT count(*) FROM inbox_attempts").await,
        0,
        "the attempts went with their items"
    );
    assert_eq!(scalar(&guard.schema, "SELECT count(*) FROM inbox").await, 1);
}

#[tokio::test]
async fn stats_count_each_source_by_the_database_clock() {
    let Some((store, _guard)) = store(Expiry::batched()).await else {
        return;
    };
    for _ in 0..3 {
        enqueue_one(&store, &key("alpha"), "a").await;
    }
    let beta = key("beta");
    enqueue_one(&store, &beta, "b").await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    store
        .take(&source("alpha"), n(1), LONG, None)
        .await
        .unwrap();
    let stats = store.inbox_stats().await.unwrap();
    let names: Vec<_> = stats.iter().map(|s| s.source.as_str()).collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!(
        (stats[0].pending, stats[0].in_flight, stats[0].dead),
        (2, 1, 0)
    );
    assert_eq!(
        (stats[1].pending, stats[1].in_flight, stats[1].dead),
        (1, 0, 0)
    );
    for s in &stats {
        let lag = s.oldest_pending.expect("a lag");
        assert!(
            lag >= Duration::from_millis(25) && lag < Duration::from_secs(60),
            "{s:?}"
        );
    }
    kill(&store, &beta).await;
    let stats = store.inbox_stats().await.unwrap();
    assert_eq!(
        (stats[1].pending, stats[1].dead, stats[1].oldest_pending),
        (0, 1, None)
    );
}

#[tokio::test]
async fn a_new_boot_frees_the_items_of_its_earlier_boots_only() {
    let Some((store, _guard)) = store(Expiry::batched()).await else {
        return;
    };
    let gw1 = InstanceName::new("gw-1").unwrap();
    let gw2 = InstanceName::new("gw-2").unwrap();
    let boot1 = store.register_boot(&common::boot(&gw1)).await.unwrap();
    let other = store.register_boot(&common::boot(&gw2)).await.unwrap();
    let (mine, theirs) = (key("hooks"), key("hooks"));
    enqueue_one(&store, &mine, "mine").await;
    enqueue_one(&store, &theirs, "theirs").await;
    let src = mine.source.clone();
    let first = store
        .take(&src, n(1), LONG, Some(&boot1.holder))
        .await
        .unwrap()
        .pop()
        .unwrap();
    let kept = store
        .take(&src, n(1), LONG, Some(&other.holder))
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert!(
        store
            .take(&src, n(10), LONG, None)
            .await
            .unwrap()
            .is_empty()
    );

    store.end_boot(&boot1.holder).await.unwrap();
    let boot2 = store.register_boot(&common::boot(&gw1)).await.unwrap();
    assert_eq!(boot2.holder.boot, 2);
    // Items are not claims: `freed` counts claims only.
    assert_eq!(boot2.freed, 0);
    // Freed: the gone boot's report is stale at once, before anyone takes the item again.
    assert_stale(store.delivered(first.item.clone()).await, &first.key, 1);
    let again = store
        .take(&src, n(10), LONG, Some(&boot2.holder))
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "only gw-1's item is freed: {again:?}");
    assert_eq!(again[0].item.id, first.item.id);
    assert_eq!(again[0].item.attempt, 2);
    assert_stale(store.delivered(first.item.clone()).await, &first.key, 1);
    // A third boot of gw-1 frees what the second took, and still nothing of gw-2's.
    store.end_boot(&boot2.holder).await.unwrap();
    store.register_boot(&common::boot(&gw1)).await.unwrap();
    store.delivered(kept.item.clone()).await.unwrap();
    assert_stale(store.delivered(again[0].item.clone()).await, &first.key, 2);
    let last = take_one(&store, &src, LONG).await;
    assert_eq!((last.item.id, last.item.attempt), (first.item.id, 3));
    store.delivered(last.item).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Schema 4 on older schemas

/// Applies migrations 1 and 2 by hand (what a build of schema 2 created), with `extra` version
/// rows, and a history row in this month's partition.
async fn schema_2(cfg: &PgConfig, extra: &[i64]) {
    let client = common::raw(&cfg.schema).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{s}\"; SET search_path = \"{s}\"; {migrations}; \
             SELECT set_config('idemgate.dedup_mode', 'batched', false), \
                    set_config('idemgate.partition_width_s', '', false);",
            s = cfg.schema,
            migrations = include_str!("../sql/schema_migrations.sql"),
        ))
        .await
        .unwrap();
    client
        .batch_execute(include_str!("../sql/migrations/0001_init.sql"))
        .await
        .unwrap();
    client
        .batch_execute(include_str!("../sql/migrations/0002_holders.sql"))
        .await
        .unwrap();
    client
        .batch_execute(
            "INSERT INTO schema_migrations (version, name) VALUES (1, 'init'), (2, 'holders');
             SELECT ensure_partitions(now() + interval '40 days', now());
             SELECT * FROM claim_batch(ARRAY['src'], ARRAY['evt_old'], ARRAY[NULL]::bytea[],
                 ARRAY[60000::bigint], ARRAY[3600000::bigint], ARRAY[true], ARRAY[42::bigint],
                 ARRAY['flag'], ARRAY[]::text[], ARRAY[]::bigint[]);",
        )
        .await
        .unwrap();
    for v in extra {
        client
            .execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, 'other')",
                &[v],
            )
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_schema_2_schema_is_refused_by_readers_and_upgraded_in_place() {
    let (cfg, guard) = common::config(Expiry::batched());
    if !server_up().await {
        return;
    }
    schema_2(&cfg, &[]).await;
    let err = PgStore::open_existing(cfg.clone()).await.unwrap_err();
    assert!(
        matches!(
            err,
            PgError::OlderSchema {
                found: 2,
                known: SCHEMA_VERSION,
                ..
            }
        ),
        "{err}"
    );
    let report = idemgate_postgres::migrate(&cfg).await.unwrap();
    assert_eq!(report.applied, (3..=SCHEMA_VERSION).collect::<Vec<_>>());
    // The partition created before the migration has the new column too.
    assert_eq!(
        scalar(
            &guard.schema,
            "SELECT count(*) FROM pg_attribute a JOIN pg_inherits i ON i.inhrelid = a.attrelid \
              WHERE i.inhparent = 'history'::regclass AND a.attname = 'note' \
                AND NOT a.attisdropped"
        )
        .await,
        scalar(
            &guard.schema,
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'history'::regclass"
        )
        .await
    );
    let store = PgStore::open_existing(cfg.clone()).await.unwrap();
    let old = Key::parse("src", "evt_old").unwrap();
    let view = store.lookup(&old).await.unwrap();
    assert_eq!(view.history.len(), 1);
    assert_eq!(view.history[0].note, None);
    let dup = store.enqueue(req(&old), item("x")).await.unwrap();
    assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");
    let k = key("src");
    enqueue_one(&store, &k, "x").await;
    kill(&store, &k).await;
    assert_eq!(
        store
            .replay_dead_letters(&ReplayFilter::default(), "after the upgrade")
            .await
            .unwrap(),
        1
    );
}
