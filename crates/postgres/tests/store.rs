//! The PostgreSQL store beyond the shared suite: migrations, group commit, partitions, sweeping,
//! bad input. Each test runs on its own schema, dropped when it ends.

mod common;

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::time::Duration;

use common::{SchemaGuard, TestStore};
use idemgate_core::sweep::SweepOptions;
use idemgate_core::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, HistoryOutcome, Identity, Instances, Key,
    Stats, StoreError, Sweep,
};
use idemgate_postgres::{ConfigError, Expiry, PgConfig, PgError, PgStore, SCHEMA_VERSION};
use tokio_util::sync::CancellationToken;

fn key() -> Key {
    Key::parse(
        "src",
        &format!("evt_{:016x}", idemgate_core::machine::nonce()),
    )
    .unwrap()
}

fn req(key: &Key, ttl: Duration) -> ClaimRequest {
    ClaimRequest::new(key.clone(), Duration::from_secs(60), ttl)
}

/// Whether the test server answers; skips (or fails under CI) when it does not.
async fn server_up() -> bool {
    let result = tokio_postgres::connect(&common::url(), tokio_postgres::NoTls).await;
    idemgate_core::testkit::require_service(result.map(|_| ()), common::WHAT_TO_START).is_some()
}

async fn tables(schema: &str) -> Vec<String> {
    let client = common::raw(schema).await;
    client
        .query(
            "SELECT relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Migrations

#[tokio::test]
async fn migrations_are_idempotent() {
    if !server_up().await {
        return;
    }
    let (cfg, _guard) = common::config(Expiry::batched());
    let first = idemgate_postgres::migrate(&cfg).await.unwrap();
    assert_eq!(first.applied, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
    assert_eq!(first.version, SCHEMA_VERSION);
    let again = idemgate_postgres::migrate(&cfg).await.unwrap();
    assert!(again.applied.is_empty(), "{again:?}");
    // connect migrates too, and finds nothing to do.
    let store = PgStore::connect(cfg.clone()).await.unwrap();
    drop(store);
    assert!(tables(&cfg.schema).await.contains(&"dedup".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_migrators_both_succeed_once() {
    if !server_up().await {
        return;
    }
    let (cfg, _guard) = common::config(Expiry::partitioned());
    let (a, b) = tokio::join!(
        idemgate_postgres::migrate(&cfg),
        idemgate_postgres::migrate(&cfg)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut applied = [a.applied, b.applied];
    applied.sort();
    assert_eq!(
        applied,
        [vec![], (1..=SCHEMA_VERSION).collect::<Vec<_>>()],
        "exactly one migrator applied every version"
    );
}

#[tokio::test]
async fn a_newer_schema_is_refused_and_left_untouched() {
    if !server_up().await {
        return;
    }
    let (cfg, _guard) = common::config(Expiry::batched());
    let client = common::raw(&cfg.schema).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {s}; \
             CREATE TABLE {s}.schema_migrations (version bigint PRIMARY KEY, name text NOT NULL, \
                 applied_at timestamptz NOT NULL DEFAULT now()); \
             INSERT INTO {s}.schema_migrations (version, name) VALUES (999, 'from the future');",
            s = cfg.schema
        ))
        .await
        .unwrap();
    let err = idemgate_postgres::migrate(&cfg).await.unwrap_err();
    assert!(
        matches!(
            err,
            PgError::NewerSchema {
                found: 999,
                known: SCHEMA_VERSION,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("newer idemgate"), "{err}");
    let err = PgStore::connect(cfg.clone()).await.unwrap_err();
    assert!(matches!(
        StoreError::from(err),
        StoreError::NewerSchema { found: 999, .. }
    ));
    // Nothing half-migrated: only the table we made is there.
    assert_eq!(tables(&cfg.schema).await, ["schema_migrations"]);
}

#[tokio::test]
async fn a_schema_of_the_other_expiry_mode_is_refused() {
    if !server_up().await {
        return;
    }
    let (mut cfg, _guard) = common::config(Expiry::batched());
    idemgate_postgres::migrate(&cfg).await.unwrap();
    cfg.expiry = Expiry::partitioned();
    let err = PgStore::connect(cfg).await.unwrap_err();
    assert!(matches!(err, PgError::ModeMismatch { .. }), "{err}");
    assert!(err.to_string().contains("batched mode"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Group commit

/// On a current-thread runtime, `join!` queues every claim before the batcher runs, so they
/// travel in one batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_one_key_in_one_batch_resolve_in_order() {
    if !server_up().await {
        return;
    }
    // One batch slot, held by a claim that waits on an uncommitted insert of its key: the five
    // claims below all queue, and go as one batch once it is free.
    let (mut cfg, guard) = common::config(Expiry::batched());
    cfg.batch_inflight = NonZeroUsize::new(1).unwrap();
    let store = common::connect(cfg).await.unwrap();
    let ttl = Duration::from_secs(3_600);
    let raw = common::raw(&guard.schema).await;
    let blocker = key();
    raw.batch_execute(&format!(
        "BEGIN; INSERT INTO dedup (source, event_id, state, attempt, nonce, first_seen, \
         expires_at) VALUES ('{}', '{}', 'done', 1, 1, now(), now() + interval '1 hour')",
        blocker.source.as_str(),
        blocker.event_id.as_str()
    ))
    .await
    .unwrap();
    let raw_pid: i32 = raw
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let held = tokio::spawn({
        let store = store.clone();
        async move { store.claim(req(&blocker, ttl)).await }
    });
    let watcher = common::raw(&guard.schema).await;
    loop {
        let waiting: i64 = watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))",
                &[&raw_pid],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (a, b) = (key(), key());
    let five = tokio::spawn({
        let store = store.clone();
        let (a, b) = (a.clone(), b.clone());
        async move {
            tokio::join!(
                store.claim(req(&a, ttl)),
                store.claim(req(&a, ttl)),
                store.claim(req(&b, ttl).mode(ClaimMode::OnReceipt)),
                store.claim(req(&a, ttl)),
                store.claim(req(&b, ttl)),
            )
        }
    });
    // Long enough for the five to be queued; they cannot be sent before the rollback.
    tokio::time::sleep(Duration::from_millis(200)).await;
    raw.batch_execute("ROLLBACK").await.unwrap();
    assert!(matches!(
        held.await.unwrap().unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    let (r1, r2, r3, r4, r5) = five.await.unwrap();
    assert!(matches!(r1.unwrap(), ClaimOutcome::Claimed { .. }));
    assert!(matches!(r2.unwrap(), ClaimOutcome::InFlight { .. }));
    assert!(matches!(r3.unwrap(), ClaimOutcome::Claimed { .. }));
    assert!(matches!(r4.unwrap(), ClaimOutcome::InFlight { .. }));
    assert!(matches!(r5.unwrap(), ClaimOutcome::Duplicate { .. }));
    let hist = store.lookup(&a).await.unwrap().history;
    let outcomes: Vec<_> = hist.iter().map(|h| h.outcome).collect();
    assert_eq!(
        outcomes,
        [
            HistoryOutcome::Claimed,
            HistoryOutcome::InFlight,
            HistoryOutcome::InFlight
        ]
    );
    let first_b = store.lookup(&b).await.unwrap().history[0].at;
    assert_eq!(hist[0].at, first_b, "one batch: one fast-path timestamp");
}

/// Completions and releases group-committed together: each answer is its own token's, stale
/// tokens are refused, a token finished twice in one batch is held both times, and each
/// finished claim leaves exactly one history row of its kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_and_releases_in_one_batch_answer_each_token() {
    let Some(store) = TestStore::new(Expiry::batched()).await else {
        return;
    };
    let ttl = Duration::from_secs(3_600);
    let keys: Vec<Key> = (0..48).map(|_| key()).collect();
    let mut tokens = Vec::new();
    for k in &keys {
        match store.claim(req(k, ttl)).await.unwrap() {
            ClaimOutcome::Claimed { token, .. } => tokens.push(token),
            other => panic!("{other:?}"),
        }
    }
    // 0..20 completed, 20..32 released, 32..40 completed with a stale nonce, 40..44 released
    // with a stale attempt, 44..48 completed twice at once.
    let mut calls = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let store = store.clone();
        let mut t = t.clone();
        let what = match i {
            0..20 => "complete",
            20..32 => "release",
            32..40 => {
                t.nonce ^= 1;
                "complete"
            }
            40..44 => {
                t.attempt += 1;
                "release"
            }
            _ => "twice",
        };
        calls.push(tokio::spawn(async move {
            match what {
                "complete" => vec![store.complete(&t).await],
                "release" => vec![store.release(&t).await],
                _ => {
                    let (a, b) = tokio::join!(store.complete(&t), store.complete(&t));
                    vec![a, b]
                }
            }
        }));
    }
    for (i, call) in calls.into_iter().enumerate() {
        let answers = call.await.unwrap();
        for answer in answers {
            match i {
                0..32 | 44..48 => answer.unwrap_or_else(|e| panic!("token {i}: {e}")),
                _ => assert!(
                    matches!(answer, Err(StoreError::StaleToken { .. })),
                    "token {i}: {answer:?}"
                ),
            }
        }
    }
    for (i, k) in keys.iter().enumerate() {
        let view = store.lookup(k).await.unwrap();
        let outcomes: Vec<_> = view.history.iter().map(|h| h.outcome).collect();
        let (state, last) = match i {
            0..20 | 44..48 => (Some("done"), Some(HistoryOutcome::Completed)),
            20..32 => (None, Some(HistoryOutcome::Released)),
            _ => (Some("processing"), None),
        };
        assert_eq!(
            view.record.as_ref().map(|r| r.state.as_str()),
            state,
            "key {i}: {view:?}"
        );
        let expected: Vec<_> = std::iter::once(HistoryOutcome::Claimed)
            .chain(last)
            .collect();
        assert_eq!(outcomes, expected, "key {i}");
    }
}

/// The plan of every statement `finish_batch` runs, as PostgreSQL's `auto_explain` reports it to
/// the session calling it, with the plan a long-lived pooled session keeps (the generic one)
/// made on a store of three records.
#[tokio::test]
async fn finish_batch_finds_records_by_key_whatever_the_table_size_at_planning() {
    let Some(store) = TestStore::new(Expiry::batched()).await else {
        return;
    };
    let keys: Vec<Key> = (0..3).map(|_| key()).collect();
    let mut tokens = Vec::new();
    for k in &keys {
        match store
            .claim(req(k, Duration::from_secs(3_600)))
            .await
            .unwrap()
        {
            ClaimOutcome::Claimed { token, .. } => tokens.push(token),
            other => panic!("{other:?}"),
        }
    }
    let (client, mut conn) = tokio_postgres::connect(&common::url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let (notices, mut plans) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notice(n) = message {
                let _ = notices.send(n.message().to_owned());
            }
        }
    });
    client
        .batch_execute(&format!(
            "SET search_path = \"{}\"; LOAD 'auto_explain';
             SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
             SET auto_explain.log_level = notice; SET client_min_messages = notice;
             SET plan_cache_mode = force_generic_plan",
            store.guard.schema
        ))
        .await
        .unwrap();
    let sources: Vec<&str> = keys.iter().map(|k| k.source.as_str()).collect();
    let event_ids: Vec<&str> = keys.iter().map(|k| k.event_id.as_str()).collect();
    let attempts: Vec<i32> = tokens.iter().map(|t| t.attempt as i32).collect();
    let nonces: Vec<i64> = tokens.iter().map(|t| t.nonce as i64).collect();
    let releases = [false, false, true];
    let held: Vec<bool> = client
        .query(
            "SELECT r_held FROM finish_batch($1, $2, $3, $4, $5) ORDER BY r_idx",
            &[
                &sources,
                &event_ids,
                &attempts,
                &nonces,
                &releases.as_slice(),
            ],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(held, [true, true, true]);
    drop(client);
    let mut explained = Vec::new();
    while let Some(plan) = plans.recv().await {
        explained.push(plan);
    }
    let finishing = explained
        .iter()
        .find(|p| p.contains("Update on dedup"))
        .unwrap_or_else(|| panic!("no plan of the UPDATE in {explained:#?}"));
    assert!(
        finishing.contains("Index Scan using dedup_pkey"),
        "{finishing}"
    );
    for plan in &explained {
        assert!(!plan.contains("Seq Scan on dedup"), "{plan}");
    }
}

async fn row_version(client: &tokio_postgres::Client, k: &Key) -> (String, String) {
    let row = client
        .query_one(
            "SELECT xmin::text, xmax::text FROM dedup WHERE event_id = $1",
            &[&k.event_id.as_str()],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn duplicates_do_not_touch_the_dedup_row() {
    let Some(store) = TestStore::new(Expiry::batched()).await else {
        return;
    };
    let k = key();
    let token = match store
        .claim(req(&k, Duration::from_secs(3_600)))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { token, .. } => token,
        other => panic!("{other:?}"),
    };
    store.complete(&token).await.unwrap();
    let client = common::raw(&store.guard.schema).await;
    let (xmin, xmax) = row_version(&client, &k).await;
    for _ in 0..5 {
        assert!(matches!(
            store
                .claim(req(&k, Duration::from_secs(3_600)))
                .await
                .unwrap(),
            ClaimOutcome::Duplicate { .. }
        ));
    }
    let (xmin_after, xmax_after) = row_version(&client, &k).await;
    assert_eq!(
        (xmin, xmax),
        (xmin_after, xmax_after),
        "no new row version, no row lock"
    );
    assert_eq!(store.lookup(&k).await.unwrap().history.len(), 2 + 5);
}

// ---------------------------------------------------------------------------------------------
// Partitions

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_key_across_a_partition_boundary_is_claimed_once() {
    let Some(store) = TestStore::new(common::partitioned_hourly()).await else {
        return;
    };
    // Ten minutes and three hours from now lie at least two one-hour partitions apart.
    let (near, far) = (Duration::from_secs(600), Duration::from_secs(3 * 3_600));
    let k = key();
    assert!(matches!(
        store.claim(req(&k, near)).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
    assert!(matches!(
        store.claim(req(&k, far)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));

    // And racing: 32 callers, half on each side of the boundary.
    let k = key();
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            let barrier = barrier.clone();
            let r = req(&k, if i % 2 == 0 { near } else { far });
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(r).await.unwrap()
            })
        })
        .collect();
    let mut claimed = 0;
    for t in tasks {
        if matches!(t.await.unwrap(), ClaimOutcome::Claimed { .. }) {
            claimed += 1;
        }
    }
    assert_eq!(claimed, 1);
    let client = common::raw(&store.guard.schema).await;
    let rows: i64 = client
        .query_one(
            "SELECT count(*) FROM dedup WHERE event_id = $1",
            &[&k.event_id.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

/// A partitioned store of one-second partitions holding a record that expires in 200 ms and
/// one that lives 30 s, in different partitions; `None` (skip) without a server.
async fn short_and_long_records() -> Option<(TestStore, Key, Key)> {
    let store = TestStore::new(Expiry::Partitioned {
        width: Duration::from_secs(1),
    })
    .await?;
    let (short, long) = (key(), key());
    store
        .claim(req(&short, Duration::from_millis(200)))
        .await
        .unwrap();
    store
        .claim(req(&long, Duration::from_secs(30)))
        .await
        .unwrap();
    Some((store, short, long))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_dedup_partitions_are_dropped_whole() {
    let Some((store, short, long)) = short_and_long_records().await else {
        return;
    };
    let client = common::raw(&store.guard.schema).await;
    let partition_of = |event_id: String| {
        let client = &client;
        async move {
            client
                .query_one(
                    "SELECT tableoid::regclass::text FROM dedup WHERE event_id = $1",
                    &[&event_id],
                )
                .await
                .unwrap()
                .get::<_, String>(0)
        }
    };
    let short_part = partition_of(short.event_id.to_string()).await;
    let long_part = partition_of(long.event_id.to_string()).await;
    // The short record's partition ends at most 1.2 s from now.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let report = store.store.maintain_partitions().await.unwrap();
    assert!(
        report.dropped.contains(&short_part),
        "{short_part} not in {report:?}"
    );
    assert!(!report.dropped.contains(&long_part));
    let view = store.lookup(&short).await.unwrap();
    assert!(view.record.is_none());
    assert_eq!(
        view.history.len(),
        1,
        "history outlives the dedup partition"
    );
    assert!(store.lookup(&long).await.unwrap().record.is_some());
    // The partitions ahead were created: a claim right now still lands.
    assert!(!report.created.is_empty());
    assert!(matches!(
        store
            .claim(req(&key(), Duration::from_secs(5)))
            .await
            .unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_sweep_batch_deletes_only_expired_rows_of_every_partition() {
    // The first row of each partition sits at the same tuple id: a sweep that deleted by tuple
    // id alone would take the live one with the expired one.
    let Some((store, short, long)) = short_and_long_records().await else {
        return;
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let deleted = idemgate_core::Sweep::sweep_expired(&store, NonZeroU32::new(10).unwrap())
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    assert!(store.lookup(&short).await.unwrap().record.is_none());
    assert!(store.lookup(&long).await.unwrap().record.is_some());
}

#[tokio::test]
async fn a_ttl_beyond_the_partitions_ahead_creates_its_partition() {
    let Some(store) = TestStore::new(common::partitioned_hourly()).await else {
        return;
    };
    // One-hour partitions reach nine hours ahead at start; thirty hours needs new ones.
    let k = key();
    let token = match store
        .claim(req(&k, Duration::from_secs(30 * 3_600)))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { token, .. } => token,
        other => panic!("{other:?}"),
    };
    store.complete(&token).await.unwrap();
    let rec = store.lookup(&k).await.unwrap().record.unwrap();
    assert_eq!(
        rec.expires_at.as_millis() - rec.first_seen.as_millis(),
        30 * 3_600 * 1_000
    );
}

#[tokio::test]
async fn history_partitions_past_the_retention_are_dropped() {
    let Some(store) = TestStore::new(Expiry::batched()).await else {
        return;
    };
    let client = common::raw(&store.guard.schema).await;
    client
        .batch_execute(
            "CREATE TABLE history_y2020m01 PARTITION OF history \
                 FOR VALUES FROM ('2020-01-01 00:00:00+00') TO ('2020-02-01 00:00:00+00'); \
             INSERT INTO history (source, event_id, outcome, attempt, received_at) \
                 VALUES ('src', 'old', 'claimed', 1, '2020-01-15 12:00:00+00');",
        )
        .await
        .unwrap();
    let current = key();
    store
        .claim(req(&current, Duration::from_secs(60)))
        .await
        .unwrap();
    let report = store.store.maintain_partitions().await.unwrap();
    assert_eq!(report.dropped, ["history_y2020m01"]);
    assert!(
        !tables(&store.guard.schema)
            .await
            .contains(&"history_y2020m01".to_owned())
    );
    assert_eq!(store.lookup(&current).await.unwrap().history.len(), 1);
    // Nothing else is past the retention: a second run drops nothing.
    assert!(
        store
            .store
            .maintain_partitions()
            .await
            .unwrap()
            .dropped
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------
// Sweeping

/// Claims `n` new keys that expire 100 ms later.
async fn claim_short_lived(store: &PgStore, n: usize) {
    for _ in 0..n {
        store
            .claim(req(&key(), Duration::from_millis(100)))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_sweep_run_stops_at_a_short_batch() {
    let (mut cfg, guard) = common::config(Expiry::Batched {
        batch: NonZeroU32::new(3).unwrap(),
        pause: Duration::from_millis(5),
    });
    cfg.pool_size = NonZeroUsize::new(4).unwrap();
    let Some(store) = common::connect(cfg).await else {
        return;
    };
    let _guard = guard;
    claim_short_lived(&store, 7).await;
    let live = key();
    store
        .claim(req(&live, Duration::from_secs(60)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.stats().await.unwrap().expired, 7);
    let mut batches = Vec::new();
    let report = store
        .sweep_run(
            SweepOptions {
                batch: NonZeroU32::new(3).unwrap(),
                pause: Duration::from_millis(5),
                pacing: idemgate_core::sweep::Pacing::Fixed,
            },
            idemgate_core::sweep::pause_or_cancel(&CancellationToken::new()),
            |n| batches.push(n),
        )
        .await
        .unwrap();
    // The third batch comes back short: everything expired before the run is gone.
    assert_eq!(batches, [3, 3, 1]);
    assert_eq!(
        (report.rows, report.batches, report.cancelled),
        (7, 3, false)
    );
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.live, stats.expired), (1, 0));
    assert_eq!(stats.history_rows, 8);
}

/// A run's batches go on along the `expires_at` index from where the previous batch ended, never
/// walking again over what the run deleted: a row expired before any of them, put in behind the
/// run between two batches, is left to the next run, which deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_sweep_run_goes_on_from_where_its_last_batch_ended() {
    let (cfg, guard) = common::config(Expiry::batched());
    let Some(store) = common::connect(cfg).await else {
        return;
    };
    let _guard = guard;
    claim_short_lived(&store, 7).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let raw = Arc::new(common::raw(&store.config().schema).await);
    let behind = key();
    let opts = SweepOptions {
        batch: NonZeroU32::new(3).unwrap(),
        pause: Duration::from_millis(1),
        pacing: idemgate_core::sweep::Pacing::Fixed,
    };
    let mut pauses = 0;
    let put_behind = |_| {
        pauses += 1;
        let first = pauses == 1;
        let raw = raw.clone();
        let event_id = behind.event_id.as_str().to_owned();
        async move {
            if first {
                raw.execute(
                    "INSERT INTO dedup (source, event_id, state, attempt, nonce, first_seen, \
                     expires_at) VALUES ('src', $1, 'done', 1, 1, now() - interval '2 hours', \
                     now() - interval '1 hour')",
                    &[&event_id],
                )
                .await
                .unwrap();
            }
            true
        }
    };
    let report = store.sweep_run(opts, put_behind, |_| {}).await.unwrap();
    assert_eq!((report.rows, report.batches), (7, 3));
    assert_eq!(
        store.stats().await.unwrap().expired,
        1,
        "the row behind the run is left"
    );
    let next = store
        .sweep_run(
            opts,
            idemgate_core::sweep::pause_or_cancel(&CancellationToken::new()),
            |_| {},
        )
        .await
        .unwrap();
    assert_eq!(next.rows, 1);
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.live, stats.expired), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_sweeper_sweeps_and_stops_on_cancel() {
    let Some(store) = TestStore::new(Expiry::batched()).await else {
        return;
    };
    store
        .claim(req(&key(), Duration::from_millis(50)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let cancel = CancellationToken::new();
    let handle = idemgate_core::sweep::spawn(
        store.store.clone(),
        Duration::from_millis(20),
        SweepOptions::default(),
        cancel.clone(),
        |run| {
            run.unwrap();
        },
    );
    let mut swept = false;
    for _ in 0..100 {
        if store.store.stats().await.unwrap().expired == 0 {
            swept = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(swept, "the sweeper removed the expired record");
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), handle)
        .await
        .expect("the sweeper stops on cancel")
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Bad input

#[tokio::test]
async fn an_unparsable_url_is_a_config_error() {
    let err = PgStore::connect(PgConfig::new("postgres://root@localhost:notaport/test"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, PgError::Config(ConfigError::Url { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("postgres.url"), "{err}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "the cause is kept"
    );
}

#[tokio::test]
async fn a_refused_connection_names_the_server() {
    let err = PgStore::connect(PgConfig::new("postgres://root@127.0.0.1:1/test"))
        .await
        .unwrap_err();
    assert!(matches!(err, PgError::Connect { .. }), "{err}");
    assert!(err.to_string().contains("127.0.0.1:1/test"), "{err}");
    let store_err = StoreError::from(err);
    assert!(matches!(store_err, StoreError::Backend { .. }));
}

#[tokio::test]
async fn a_partition_width_that_does_not_divide_a_day_is_refused_before_connecting() {
    let (mut cfg, _guard): (PgConfig, SchemaGuard) = common::config(Expiry::Partitioned {
        width: Duration::from_secs(7 * 3_600),
    });
    // Even with a server that does not exist: validation comes first.
    cfg.url = "postgres://root@127.0.0.1:1/test".to_owned();
    let err = PgStore::connect(cfg.clone()).await.unwrap_err();
    assert!(
        matches!(err, PgError::Config(ConfigError::PartitionWidth { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("postgres.expiry.width"), "{err}");
    assert!(matches!(
        idemgate_postgres::migrate(&cfg).await,
        Err(PgError::Config(_))
    ));
}

// ---------------------------------------------------------------------------------------------
// Schema 2: holders, boots, renewal, identity

/// A schema of version 1 (what the previous release created) is migrated in place: its records
/// stay, with no holder; it gets a store id; `abandoned` history rows are accepted; and a build
/// of schema 1 still running keeps claiming through the 8-array `claim_batch`.
#[tokio::test]
async fn a_schema_1_schema_is_upgraded_in_place() {
    if !server_up().await {
        return;
    }
    let (cfg, _guard) = common::config(Expiry::batched());
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
        .batch_execute(
            "INSERT INTO schema_migrations (version, name) VALUES (1, 'init');
             SELECT ensure_partitions(now() + interval '40 days', now());
             SELECT * FROM claim_batch(ARRAY['src'], ARRAY['evt_old'], ARRAY[NULL]::bytea[],
                 ARRAY[60000::bigint], ARRAY[3600000::bigint], ARRAY[false], ARRAY[42::bigint],
                 ARRAY['flag']);",
        )
        .await
        .unwrap();

    let report = idemgate_postgres::migrate(&cfg).await.unwrap();
    assert_eq!(report.applied, (2..=SCHEMA_VERSION).collect::<Vec<_>>());
    let store = PgStore::connect(cfg.clone()).await.unwrap();
    let id = store.store_id().to_owned();
    assert_eq!(id.len(), 32, "{id}");
    let old = Key::parse("src", "evt_old").unwrap();
    let view = store.lookup(&old).await.unwrap();
    let rec = view.record.expect("the record of schema 1");
    assert_eq!((rec.attempt, rec.nonce, rec.holder), (1, 42, None));
    assert_eq!(view.history.len(), 1);

    // A schema-1 build's call, after the upgrade.
    let rows = client
        .query(
            "SELECT r_outcome FROM claim_batch(ARRAY['src', 'src'], ARRAY['evt_old', 'evt_new'], \
                 ARRAY[NULL, NULL]::bytea[], ARRAY[60000, 60000]::bigint[], \
                 ARRAY[3600000, 3600000]::bigint[], ARRAY[false, false], ARRAY[7, 8]::bigint[], \
                 ARRAY['flag', 'flag']) ORDER BY r_idx",
            &[],
        )
        .await
        .unwrap();
    let outcomes: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(outcomes, ["in_flight", "claimed"]);

    // Boots and abandoned rows work on the upgraded schema.
    let name = idemgate_core::InstanceName::new("gw-1").unwrap();
    let first = store.register_boot(&common::boot(&name)).await.unwrap();
    let k = key();
    store
        .claim(req(&k, Duration::from_secs(3_600)).holder(first.holder.clone()))
        .await
        .unwrap();
    store.end_boot(&first.holder).await.unwrap();
    assert_eq!(
        store
            .register_boot(&common::boot(&name))
            .await
            .unwrap()
            .freed,
        1
    );
    let last = store.lookup(&k).await.unwrap().history.pop().unwrap();
    assert_eq!(last.outcome, HistoryOutcome::Abandoned);
    drop(store);
    // Reconnecting reads the same id.
    assert_eq!(PgStore::connect(cfg).await.unwrap().store_id(), id);
}

/// Every schema has its own id, kept across connections; a schema dropped and created again
/// gets a new one.
#[tokio::test]
async fn the_store_id_lives_in_the_schema() {
    if !server_up().await {
        return;
    }
    let (cfg, guard) = common::config(Expiry::batched());
    let first = PgStore::connect(cfg.clone()).await.unwrap();
    let id = first.store_id().to_owned();
    assert!(
        id.bytes().all(|b| b.is_ascii_hexdigit()) && id.len() == 32,
        "{id}"
    );
    assert_eq!(PgStore::connect(cfg.clone()).await.unwrap().store_id(), id);
    let (other, _other_guard) = common::config(common::partitioned_hourly());
    assert_ne!(PgStore::connect(other).await.unwrap().store_id(), id);
    drop(first);

    let client = common::raw(&guard.schema).await;
    client
        .batch_execute(&format!("DROP SCHEMA \"{}\" CASCADE", guard.schema))
        .await
        .unwrap();
    let again = PgStore::connect(cfg).await.unwrap();
    assert_ne!(again.store_id(), id, "a recreated schema is another store");
}

/// Renewal, a boot's abandoning, a takeover (which changes the holder) and a completion touch no
/// indexed column: all four are HOT updates of the dedup row.
#[tokio::test]
async fn renew_abandon_takeover_and_complete_are_hot_updates() {
    let Some(store) = TestStore::new(Expiry::batched()).await else {
        return;
    };
    let name = idemgate_core::InstanceName::new("gw-hot").unwrap();
    let boot = store.register_boot(&common::boot(&name)).await.unwrap();
    let k = key();
    let token = match store
        .claim(req(&k, Duration::from_secs(3_600)).holder(boot.holder.clone()))
        .await
        .unwrap()
    {
        ClaimOutcome::Claimed { token, .. } => token,
        other => panic!("{other:?}"),
    };
    let mut client = common::raw(&store.guard.schema).await;
    let tx = client.transaction().await.unwrap();
    let (s, e) = (k.source.as_str(), k.event_id.as_str());
    let renewed: Option<i64> = tx
        .query_one(
            "SELECT renew_claim($1, $2, 1, $3, 120000)",
            &[&s, &e, &(token.nonce as i64)],
        )
        .await
        .unwrap()
        .get(0);
    assert!(renewed.is_some());
    // The first boot stops (its lease ended), and the next frees its claim.
    tx.execute("SELECT * FROM heartbeat_boot('gw-hot', 1, NULL)", &[])
        .await
        .unwrap();
    let freed: i64 = tx
        .query_one("SELECT r_freed FROM register_boot('gw-hot')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(freed, 1);
    let taken: String = tx
        .query_one(
            "SELECT r_outcome FROM claim_batch(ARRAY[$1], ARRAY[$2], ARRAY[NULL]::bytea[], \
                 ARRAY[60000::bigint], ARRAY[3600000::bigint], ARRAY[false], ARRAY[99::bigint], \
                 ARRAY['flag'], ARRAY['gw-hot'], ARRAY[3::bigint])",
            &[&s, &e],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(taken, "claimed");
    let completed: bool = tx
        .query_one("SELECT complete_claim($1, $2, 2, 99)", &[&s, &e])
        .await
        .unwrap()
        .get(0);
    assert!(completed);
    let row = tx
        .query_one(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables \
             WHERE relid = 'dedup'::regclass",
            &[],
        )
        .await
        .unwrap();
    let (updates, hot): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((updates, hot), (4, 4), "every update was HOT");
    tx.commit().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// A pool of the caller's

/// A pool of `size` connections built here, as a user who brings their own would, from
/// `connection_config` (or from the plain URL when `idemgate_settings` is false).
fn own_pool(cfg: &PgConfig, size: usize, idemgate_settings: bool) -> deadpool_postgres::Pool {
    let pg = if idemgate_settings {
        cfg.connection_config().unwrap()
    } else {
        common::url().parse().unwrap()
    };
    let manager = deadpool_postgres::Manager::from_config(
        pg,
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    deadpool_postgres::Pool::builder(manager)
        .max_size(size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .unwrap()
}

/// A store on a pool built by the caller migrates its schema like `connect` and claims,
/// completes and answers duplicates through that pool.
#[tokio::test]
async fn a_store_on_the_callers_pool_migrates_and_claims() {
    if !server_up().await {
        return;
    }
    let (mut cfg, guard) = common::config(Expiry::batched());
    let pool = own_pool(&cfg, 4, true);
    // The URL only names the server in errors; the pool's own size counts, not pool_size.
    cfg.url = String::new();
    let store = PgStore::from_pool(pool.clone(), cfg).await.unwrap();
    assert!(
        tables(&guard.schema).await.contains(&"dedup".to_owned()),
        "migrated"
    );
    let k = key();
    let ClaimOutcome::Claimed { token, .. } =
        store.claim(req(&k, Duration::from_secs(60))).await.unwrap()
    else {
        panic!("a fresh key is claimed");
    };
    store.complete(&token).await.unwrap();
    assert!(matches!(
        store.claim(req(&k, Duration::from_secs(60))).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    assert_eq!(store.lookup(&k).await.unwrap().history.len(), 3);
    assert_eq!(pool.status().max_size, 4);
    // A second store on the same pool finds the schema migrated and shares the store id.
    let (mut again, _) = common::config(Expiry::batched());
    again.schema = guard.schema.clone();
    let second = PgStore::from_pool(pool, again).await.unwrap();
    assert_eq!(second.store_id(), store.store_id());
}

/// A pool whose connections do not look in the store's schema first is refused before anything
/// is created: the migration would otherwise build the tables in another schema.
#[tokio::test]
async fn a_pool_that_does_not_look_in_the_schema_is_refused_untouched() {
    if !server_up().await {
        return;
    }
    let (cfg, guard) = common::config(Expiry::batched());
    let err = PgStore::from_pool(own_pool(&cfg, 2, false), cfg)
        .await
        .unwrap_err();
    assert!(matches!(err, PgError::SearchPath { .. }), "{err}");
    assert!(err.to_string().contains(&guard.schema), "{err}");
    assert!(tables(&guard.schema).await.is_empty(), "nothing created");
}
