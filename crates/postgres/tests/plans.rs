//! The plans PostgreSQL makes for the store's hot path, whatever its statistics say.
//!
//! A pooled session plans each statement once (generic plans) and keeps the plan for as long as
//! it lives. A plan made while a table looked small (a new store never analyzed, or one analyzed
//! while it held a handful of rows) that reads the whole table, or hashes it, reads it again on
//! every call after the table has grown: the store then slows as its tables grow. This test runs
//! every hot operation through the store's own connections, with `auto_explain` reporting each
//! statement's plan (nested statements too) to the session, in three states of the tables:
//!
//! - (a) a new store, never analyzed;
//! - (b) analyzed while it held a handful of rows, the sessions' plans made then, and the tables
//!   grown to 100,000 rows each afterwards;
//! - (c) 100,000 rows each, analyzed.
//!
//! In none of them may a plan read `dedup`, `history` or `inbox` (or a partition of theirs)
//! sequentially, join by hashing or merging, or look a key up through history's reporting
//! index (which would walk all of a source's recent rows).

mod common;

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Mutex;
use std::time::Duration;

use idemgate_core::inbox::{Failure, Inbox, QueuedItem, ReplayFilter};
use idemgate_core::{
    BootRequest, ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, HistoryRetention, Instances,
    Key, LateDuplicates, SourceName, Sweep,
};
use idemgate_postgres::{Expiry, PgStore};

/// The notices the store's connections received (tokio-postgres logs each at `info`).
static NOTICES: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// One test at a time: the notices are the process's.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Notices;

impl log::Log for Notices {
    fn enabled(&self, meta: &log::Metadata<'_>) -> bool {
        meta.target().starts_with("tokio_postgres")
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            NOTICES.lock().unwrap().push(format!("{}", record.args()));
        }
    }
    fn flush(&self) {}
}

fn listen() {
    static LOGGER: Notices = Notices;
    // Both tests call it; the first one installs it.
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}

fn take_plans() -> Vec<String> {
    std::mem::take(&mut *NOTICES.lock().unwrap())
        .into_iter()
        .filter(|n| n.contains("duration:") && n.contains("plan:"))
        .collect()
}

/// A store whose sessions report every plan they run; with `analyze`, with the rows each plan
/// node produced (a node a partition pruned at run time shows as never executed).
async fn explained_store(expiry: Expiry, analyze: bool) -> Option<(PgStore, common::SchemaGuard)> {
    let (mut cfg, guard) = common::config(expiry);
    let mut explain = "-c session_preload_libraries=auto_explain \
                       -c auto_explain.log_min_duration=0 \
                       -c auto_explain.log_nested_statements=on \
                       -c auto_explain.log_level=notice -c client_min_messages=notice"
        .to_owned();
    if analyze {
        explain.push_str(" -c auto_explain.log_analyze=on -c auto_explain.log_timing=off");
    }
    let sep = if cfg.url.contains('?') { '&' } else { '?' };
    cfg.url = format!(
        "{}{sep}options={}",
        cfg.url,
        explain.replace(' ', "%20").replace('=', "%3D")
    );
    cfg.pool_size = NonZeroUsize::new(4).unwrap();
    let store = common::connect(cfg).await?;
    Some((store, guard))
}

fn source(name: &str) -> SourceName {
    SourceName::new(name).unwrap()
}

fn key(source: &str) -> Key {
    Key::parse(
        source,
        &format!("evt_{:016x}", idemgate_core::machine::nonce()),
    )
    .unwrap()
}

fn req(key: &Key, lease: Duration, ttl: Duration) -> ClaimRequest {
    let mut r = ClaimRequest::new(key.clone(), lease, ttl);
    r.late_duplicates = LateDuplicates::Flag;
    r
}

fn token(outcome: ClaimOutcome) -> idemgate_core::ClaimToken {
    match outcome {
        ClaimOutcome::Claimed { token, .. } => token,
        other => panic!("expected a claim, got {other:?}"),
    }
}

/// Every hot operation once or more: lone and batched claims (fresh, duplicate, in flight,
/// taken over, late duplicates), completions, releases, renewals, boots, the inbox's whole
/// round, sweeping and lookups.
async fn exercise(store: &PgStore) {
    let hour = Duration::from_secs(3_600);
    let lease = Duration::from_secs(60);

    // A lone claim (claim_fresh), its completion, its duplicate, its lookup.
    let k = key("plans");
    let t = token(store.claim(req(&k, lease, hour)).await.unwrap());
    store.renew(&t, lease).await.unwrap();
    store.complete(&t).await.unwrap();
    let dup = store.claim(req(&k, lease, hour)).await.unwrap();
    assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");
    assert!(store.lookup(&k).await.unwrap().record.is_some());

    // A completion keeping its result (complete_keeping), and the lookup that reads it back.
    let k = key("plans");
    let t = token(store.claim(req(&k, lease, hour)).await.unwrap());
    let result = idemgate_core::StoredResult::new(201).body(vec![7; 4_096]);
    store
        .complete_with(&t, &result, idemgate_core::RESULT_LIMIT)
        .await
        .unwrap();
    assert_eq!(
        store.lookup(&k).await.unwrap().record.unwrap().result,
        idemgate_core::RecordResult::Stored(result)
    );

    // Batches: many claims at once, half of them of keys already claimed.
    let keys: Vec<Key> = (0..48).map(|_| key("plans")).collect();
    let firsts = at_once(store, keys.clone(), move |s, k| async move {
        s.claim(req(&k, lease, hour)).await
    })
    .await;
    let mut tokens: Vec<_> = firsts.into_iter().map(|o| token(o.unwrap())).collect();
    let again = at_once(store, keys[..24].to_vec(), move |s, k| async move {
        s.claim(req(&k, lease, hour)).await
    })
    .await;
    for outcome in again {
        let outcome = outcome.unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::InFlight { .. }),
            "a held key claimed again: {outcome:?}"
        );
    }
    let releases: Vec<_> = tokens.split_off(24);
    for done in at_once(store, tokens, |s, t| async move { s.complete(&t).await }).await {
        done.unwrap();
    }
    for done in at_once(store, releases, |s, t| async move { s.release(&t).await }).await {
        done.unwrap();
    }

    // A lapsed lease taken over; a late duplicate (processed, expired, claimed again).
    let lapsing = key("plans");
    token(
        store
            .claim(req(&lapsing, Duration::from_millis(1), hour))
            .await
            .unwrap(),
    );
    let late = key("plans");
    let t = token(
        store
            .claim(req(&late, lease, Duration::from_millis(20)))
            .await
            .unwrap(),
    );
    store.complete(&t).await.unwrap();
    tokio::time::sleep(Duration::from_millis(40)).await;
    let taken = store.claim(req(&lapsing, lease, hour)).await.unwrap();
    store.complete(&token(taken)).await.unwrap();
    match store.claim(req(&late, lease, hour)).await.unwrap() {
        ClaimOutcome::Claimed {
            late_duplicate: Some(_),
            token,
            ..
        } => store.complete(&token).await.unwrap(),
        other => panic!("expected a late duplicate, got {other:?}"),
    }

    // Boots: register, heartbeat, end.
    let boot = store
        .register_boot(&BootRequest::new(
            idemgate_core::InstanceName::new("plans-instance").unwrap(),
            Duration::from_secs(15),
            "plans-host",
        ))
        .await
        .unwrap();
    store.heartbeat(&boot.holder, lease).await.unwrap();
    store.end_boot(&boot.holder).await.unwrap();
    let mut held = req(&key("plans"), lease, hour);
    let boot = store
        .register_boot(&BootRequest::new(
            idemgate_core::InstanceName::new("plans-instance").unwrap(),
            Duration::from_secs(15),
            "plans-host",
        ))
        .await
        .unwrap();
    held.holder = Some(boot.holder.clone());
    token(store.claim(held).await.unwrap());
    store.end_boot(&boot.holder).await.unwrap();
    let boot = store
        .register_boot(&BootRequest::new(
            idemgate_core::InstanceName::new("plans-instance").unwrap(),
            Duration::from_secs(15),
            "plans-host",
        ))
        .await
        .unwrap();
    assert_eq!(boot.freed, 1, "the ended boot's claim is freed");
    store.end_boot(&boot.holder).await.unwrap();

    // The inbox: enqueue, a duplicate enqueue, take, each report, dead letters, replay, purge.
    let queue = "plans_queue";
    let item = || QueuedItem {
        body: b"{}".to_vec(),
        content_type: Some("application/json".into()),
        headers: vec![("x-a".into(), "1".into())],
    };
    let mut queued = Vec::new();
    for _ in 0..3 {
        let k = key(queue);
        let mut r = req(&k, lease, hour);
        r.mode = ClaimMode::OnReceipt;
        store.enqueue(r.clone(), item()).await.unwrap();
        store.enqueue(r, item()).await.unwrap();
        queued.push(k);
    }
    let taken = store
        .take(&source(queue), NonZeroU32::new(3).unwrap(), lease, None)
        .await
        .unwrap();
    assert_eq!(taken.len(), 3, "{taken:?}");
    let failure = Failure {
        status: Some(503),
        error: "downstream answered 503".into(),
    };
    store.delivered(taken[0].item.clone()).await.unwrap();
    store
        .retry_later(taken[1].item.clone(), &failure, Duration::ZERO)
        .await
        .unwrap();
    store
        .dead_letter(taken[2].item.clone(), &failure)
        .await
        .unwrap();
    let mut r = req(&queued[0], lease, hour);
    r.mode = ClaimMode::OnReceipt;
    store.requeue(r, item(), "plans").await.unwrap();
    store
        .dead_letters(
            &ReplayFilter::source(Some(&source(queue))),
            NonZeroU32::new(10).unwrap(),
        )
        .await
        .unwrap();
    // One event's dead letter, and one event's items (`lookup`, `replay --event-id`).
    store
        .dead_letters(
            &ReplayFilter {
                source: Some(source(queue)),
                since: Some(Duration::from_secs(3_600)),
                event_id: Some(queued[2].event_id.clone()),
            },
            NonZeroU32::new(10).unwrap(),
        )
        .await
        .unwrap();
    for k in &queued {
        store.queued(k).await.unwrap();
    }
    // The dashboard's latest deliveries of a source.
    idemgate_core::Timeline::recent(store, &source(queue), NonZeroU32::new(10).unwrap())
        .await
        .unwrap();
    store
        .replay_dead_letters(
            &ReplayFilter {
                source: Some(source(queue)),
                since: None,
                event_id: None,
            },
            "plans",
        )
        .await
        .unwrap();
    store
        .purge_dead_letters(Duration::from_secs(86_400), NonZeroU32::new(100).unwrap())
        .await
        .unwrap();

    // Sweeping and history retention.
    store
        .sweep_expired(NonZeroU32::new(1_000).unwrap())
        .await
        .unwrap();
    store
        .purge_history(
            Duration::from_secs(400 * 86_400),
            NonZeroU32::new(1_000).unwrap(),
        )
        .await
        .unwrap();
}

/// Runs `f` on each key at once, each on its own task (so the store batches the claims).
async fn at_once<T, F, Fut>(store: &PgStore, items: Vec<T>, f: F) -> Vec<Fut::Output>
where
    T: Send + 'static,
    F: Fn(PgStore, T) -> Fut,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let tasks: Vec<_> = items
        .into_iter()
        .map(|item| tokio::spawn(f(store.clone(), item)))
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("task"));
    }
    out
}

/// Fills dedup, history and the inbox with `rows` rows each (expired records and dead letters
/// from long ago, as a store that has run for a while holds), straight in SQL.
async fn grow(schema: &str, tag: &str, rows: i64) {
    let client = common::raw(schema).await;
    client
        .execute(
            "INSERT INTO dedup (source, event_id, state, attempt, nonce, fingerprint, first_seen,
                                lease_until, expires_at)
             SELECT 'grown', $2 || i, 'done', 1, i, NULL, now() - interval '1 hour', NULL,
                    now() + interval '1 day' + i * interval '1 ms'
               FROM generate_series(1, $1::bigint) AS i",
            &[&rows, &tag],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO history (source, event_id, outcome, processed, attempt, received_at)
             SELECT 'grown', $2 || i, 'completed', true, 1, now() - i * interval '10 ms'
               FROM generate_series(1, $1::bigint) AS i",
            &[&rows, &tag],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO inbox (source, event_id, body, received_at, due_at, dead_at)
             SELECT CASE WHEN i % 2 = 0 THEN 'plans_queue' ELSE 'grown' END, $2 || i, '\\x00',
                    now() - interval '1 hour', now() + interval '1 day',
                    CASE WHEN i % 2 = 0 THEN now() - interval '1 hour' END
               FROM generate_series(1, $1::bigint) AS i",
            &[&rows, &tag],
        )
        .await
        .unwrap();
}

async fn analyze(schema: &str) {
    common::raw(schema)
        .await
        .batch_execute("ANALYZE")
        .await
        .unwrap();
}

/// Boot recovery's statements (`register_boot` freeing an earlier boot's claims and items):
/// one pass over dedup and the inbox per boot, by design (an index on the holder would cost
/// every completion its HOT update; see docs/design.md).
fn boot_recovery(plan: &str) -> bool {
    plan.contains("holder_boot < v_boot")
}

/// The plans among `plans` that read a hot table whole or join by hashing or merging.
fn bad_plans(plans: &[String]) -> Vec<&String> {
    plans
        .iter()
        .filter(|plan| !boot_recovery(plan))
        .filter(|plan| {
            plan.lines().any(|line| {
                let line = line.trim_start().trim_start_matches("->").trim_start();
                let scan_of_hot = ["Seq Scan on ", "Parallel Seq Scan on "]
                    .iter()
                    .filter_map(|scan| line.strip_prefix(scan))
                    .any(|table| {
                        ["dedup", "history", "inbox"]
                            .iter()
                            .any(|hot| table.starts_with(hot))
                    });
                let hash_or_merge = [
                    "Hash Join",
                    "Hash Anti Join",
                    "Hash Semi Join",
                    "Hash Right",
                    "Hash Left",
                    "Hash Full",
                    "Merge Join",
                    "Merge Anti",
                    "Merge Semi",
                    "Merge Left",
                    "Merge Right",
                    "Merge Full",
                ]
                .iter()
                .any(|j| line.starts_with(j));
                // History's reporting index serves only the statements that state its
                // predicate; a key's probe through it walks all of a source's recent rows.
                let reporting_index = line.contains("source_received_at_outcome_idx")
                    && !plan.contains("outcome <> ''");
                scan_of_hot || hash_or_merge || reporting_index
            }) || key_filtered(plan)
        })
        .collect()
}

/// Whether `plan` looks a key (`event_id`) up in a hot table through an index that does not
/// hold it: an index scan whose `Filter` (not its `Index Cond`) tests `event_id`, such as a
/// probe through dedup's expiry index, which walks every row that expires after now.
fn key_filtered(plan: &str) -> bool {
    let lines: Vec<&str> = plan.lines().map(str::trim_start).collect();
    lines.iter().enumerate().any(|(i, line)| {
        let line = line.trim_start_matches("->").trim_start();
        let scan = [
            "Index Scan using ",
            "Index Scan Backward using ",
            "Index Only Scan using ",
            "Bitmap Index Scan on ",
        ]
        .iter()
        .any(|s| line.starts_with(s));
        let hot = [" on dedup", " on history", " on inbox"]
            .iter()
            .any(|t| line.contains(t));
        if !(scan && hot) {
            return false;
        }
        // The node's own lines: its conditions, up to the next node.
        lines[i + 1..]
            .iter()
            .take_while(|l| !l.starts_with("->"))
            .any(|l| l.starts_with("Filter:") && l.contains("event_id"))
    })
}

fn check(state: &str, plans: &[String]) {
    assert!(
        plans.len() > 20,
        "{state}: auto_explain reported {} plans; is auto_explain installed?",
        plans.len()
    );
    assert!(
        plans.iter().any(|p| boot_recovery(p)),
        "{state}: no plan of boot recovery was reported"
    );
    let bad = bad_plans(plans);
    assert!(
        bad.is_empty(),
        "{state}: {} of {} plans read a hot table whole, hash or merge it, or probe a key through history's reporting index:\n\n{}",
        bad.len(),
        plans.len(),
        bad.iter()
            .take(6)
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
}

async fn every_state(expiry: Expiry) {
    listen();
    let _serial = SERIAL.lock().await;

    // (a) a new store, never analyzed.
    let Some((store, guard)) = explained_store(expiry, false).await else {
        return;
    };
    take_plans();
    exercise(&store).await;
    check("a new store, never analyzed", &take_plans());
    drop(store);
    drop(guard);

    // (b) analyzed with a handful of rows, planned then, grown to 100 k rows.
    let Some((store, guard)) = explained_store(expiry, false).await else {
        return;
    };
    grow(&guard.schema, "few", 5).await;
    analyze(&guard.schema).await;
    exercise(&store).await;
    check("analyzed with a handful of rows", &take_plans());
    grow(&guard.schema, "many", 100_000).await;
    exercise(&store).await;
    check(
        "analyzed with a handful of rows, then grown to 100,000",
        &take_plans(),
    );
    drop(store);
    drop(guard);

    // (c) 100 k rows, analyzed.
    let Some((store, guard)) = explained_store(expiry, false).await else {
        return;
    };
    grow(&guard.schema, "many", 100_000).await;
    analyze(&guard.schema).await;
    exercise(&store).await;
    check("analyzed at 100,000 rows", &take_plans());
    drop(store);
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_path_plans_to_index_lookups_batched() {
    every_state(Expiry::batched()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_path_plans_to_index_lookups_partitioned() {
    every_state(Expiry::partitioned()).await;
}

/// A claim's late-duplicate probe reads only the history partitions within its horizon: with
/// a year of monthly partitions behind the current one, every claim statement executes an
/// index scan of at most three of them (the horizon's default, 30 days, spans two or three
/// months), however many the retention keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_late_duplicate_probe_reads_only_the_partitions_within_its_horizon() {
    listen();
    let _serial = SERIAL.lock().await;
    let Some((store, guard)) = explained_store(Expiry::batched(), true).await else {
        return;
    };
    common::raw(&guard.schema)
        .await
        .batch_execute(
            "DO $$
             DECLARE v_month timestamp := date_trunc('month', now() AT TIME ZONE 'UTC');
             BEGIN
                 FOR i IN 1..12 LOOP
                     v_month := v_month - interval '1 month';
                     EXECUTE format('CREATE TABLE %I PARTITION OF history FOR VALUES FROM (%L) TO (%L)',
                                    'history_' || to_char(v_month, '\"y\"YYYY\"m\"MM'),
                                    v_month AT TIME ZONE 'UTC',
                                    (v_month + interval '1 month') AT TIME ZONE 'UTC');
                 END LOOP;
             END $$",
        )
        .await
        .unwrap();
    let partitions: i64 = common::raw(&guard.schema)
        .await
        .query_one(
            "SELECT count(*) FROM pg_partition_tree('history') WHERE isleaf",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(partitions >= 14, "{partitions} history partitions");
    take_plans();
    exercise(&store).await;
    let plans = take_plans();
    let probes: Vec<_> = plans
        .iter()
        .filter(|p| p.contains("Query Text") && p.contains("FROM history h"))
        .collect();
    assert!(
        probes.len() >= 3,
        "the claim statements' plans were not reported: {}",
        plans.len()
    );
    for plan in probes {
        let read: std::collections::BTreeSet<&str> = plan
            .lines()
            .filter(|l| !l.contains("never executed"))
            .filter_map(|l| l.split(" on history_y").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .collect();
        assert!(
            read.len() <= 3,
            "a claim read {} of {partitions} history partitions ({read:?}):\n{plan}",
            read.len()
        );
    }
    drop(store);
    drop(guard);
}
