//! What the SQLite store keeps across reopening, and what it refuses.

use std::num::NonZeroU32;
use std::time::Duration;

use idemgate_core::inbox::{Failure, Inbox, QueuedItem, ReplayFilter};
use idemgate_core::{
    BootRequest, ClaimOutcome, ClaimRequest, ClaimStore, Identity, InstanceName, Instances, Key,
    SourceName, StoreError,
};
use idemgate_sqlite::{DB_FILE, SCHEMA_VERSION, SqliteStore};

fn req(id: &str) -> ClaimRequest {
    ClaimRequest::new(
        Key::parse("src", id).unwrap(),
        Duration::from_secs(60),
        Duration::from_secs(3_600),
    )
}

#[tokio::test]
async fn an_answered_claim_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::open(dir.path()).unwrap();
        let ClaimOutcome::Claimed { token, .. } = store.claim(req("evt_1")).await.unwrap() else {
            panic!("not claimed")
        };
        store.complete(&token).await.unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    assert!(matches!(
        store.claim(req("evt_1")).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
}

#[tokio::test]
async fn a_database_from_a_newer_version_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::open(dir.path()).unwrap());
    let path = dir.path().join(DB_FILE);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
    }
    let err = SqliteStore::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("newer idemgate"), "{err}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, 99);
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(DB_FILE),
        b"this is not SQLite, just some text long enough",
    )
    .unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err();
    let chain = format!(
        "{err}: {}",
        std::error::Error::source(&err)
            .map(|e| e.to_string())
            .unwrap_or_default()
    );
    assert!(
        chain.contains(DB_FILE) && chain.contains("not a database"),
        "{chain}"
    );
}

/// Two stores on one file (a CLI sweep beside a running gateway, or two processes) still give
/// one winner: the writers serialize on SQLite's write lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_give_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let a = SqliteStore::open(dir.path()).unwrap();
    let b = SqliteStore::open(dir.path()).unwrap();
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(req("evt_shared")).await.unwrap()
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        if matches!(t.await.unwrap(), ClaimOutcome::Claimed { .. }) {
            won += 1;
        }
    }
    assert_eq!(won, 1);
    let view = a
        .lookup(&Key::parse("src", "evt_shared").unwrap())
        .await
        .unwrap();
    assert_eq!(view.history.len(), 64, "one history row per answer");
}

/// Concurrent claims share transactions: fewer commits (fsyncs) than claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_are_group_committed() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let before = store.writer_stats();
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let store = store.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                for j in 0..8 {
                    let outcome = store.claim(req(&format!("evt_{i}_{j}"))).await.unwrap();
                    assert!(matches!(outcome, ClaimOutcome::Claimed { .. }));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let after = store.writer_stats();
    let (commits, commands) = (
        after.commits - before.commits,
        after.commands - before.commands,
    );
    assert_eq!(commands, 512);
    assert!(
        commits < commands / 4,
        "{commits} commits for {commands} claims"
    );
    assert!(after.largest_batch > 1);
}

/// The store's id is created with the schema: the same after reopening, another for another
/// directory, and another once the database was deleted and created again.
#[tokio::test]
async fn the_store_id_lives_in_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let first = SqliteStore::open(dir.path()).unwrap();
    let id = first.store_id().to_owned();
    assert_eq!(id.len(), 32, "{id}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert_eq!(first.clone().store_id(), id);
    drop(first);
    assert_eq!(SqliteStore::open(dir.path()).unwrap().store_id(), id);

    let other = tempfile::tempdir().unwrap();
    assert_ne!(SqliteStore::open(other.path()).unwrap().store_id(), id);

    for file in ["", "-wal", "-shm"] {
        let path = dir.path().join(format!("{DB_FILE}{file}"));
        if path.exists() {
            std::fs::remove_file(path).unwrap();
        }
    }
    assert_ne!(SqliteStore::open(dir.path()).unwrap().store_id(), id);
}

/// A database of schema 1 (what the previous release wrote) is migrated in place: its records
/// stay readable, gain no holder, and the store gets an id and boots.
#[tokio::test]
async fn a_schema_1_database_is_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("../sql/0001_init.sql"))
            .unwrap();
        conn.execute_batch(
            "INSERT INTO dedup VALUES ('src', 'evt_old', 'processing', 1, 42, NULL, 1000, \
                 9000000000000, 9000000000000);
             INSERT INTO history (source, event_id, outcome, processed, attempt, received_at) \
                 VALUES ('src', 'evt_old', 'claimed', 0, 1, 1000);
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(store.store_id().len(), 32);
    let key = Key::parse("src", "evt_old").unwrap();
    let view = store.lookup(&key).await.unwrap();
    let rec = view.record.expect("the old record");
    assert_eq!((rec.attempt, rec.nonce, rec.holder), (1, 42, None));
    assert_eq!(view.history.len(), 1);
    let boot = store
        .register_boot(&BootRequest::new(
            InstanceName::new("gw-1").unwrap(),
            Duration::from_secs(10),
            "test-host",
        ))
        .await
        .unwrap();
    assert_eq!((boot.holder.boot, boot.freed), (1, 0));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
}

/// A record state or history outcome this build does not know is an error naming it, never
/// read as something else.
#[tokio::test]
async fn unknown_states_and_outcomes_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let key = Key::parse("src", "evt_1").unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim(req("evt_1")).await.unwrap() else {
        panic!("not claimed")
    };
    {
        // Written behind the store's back; the CHECK constraint has to go first.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(
            "PRAGMA ignore_check_constraints = ON;
             UPDATE dedup SET state = 'paused';
             INSERT INTO history (source, event_id, outcome, received_at)
                 VALUES ('src', 'evt_2', 'teleported', 1);",
        )
        .unwrap();
    }
    let err = store.lookup(&key).await.unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("record state: paused"), "{chain}");
    let err = store.complete(&token).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err}");
    let err = store
        .lookup(&Key::parse("src", "evt_2").unwrap())
        .await
        .unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("history outcome: teleported"), "{chain}");
}

fn item() -> QueuedItem {
    QueuedItem {
        body: b"{\"id\":\"evt_q\"}".to_vec(),
        content_type: Some("application/json".into()),
        headers: vec![("x-signature".into(), "v1=abc".into())],
    }
}

fn count(dir: &std::path::Path, table: &str) -> i64 {
    rusqlite::Connection::open(dir.join(DB_FILE))
        .unwrap()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

/// An acknowledged enqueue is on disk: after reopening, the event is a duplicate and its item
/// is there to take, body and headers whole; a dead letter and a replay's note survive too.
#[tokio::test]
async fn an_answered_enqueue_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let source = SourceName::new("src").unwrap();
    let one = NonZeroU32::new(1).unwrap();
    {
        let store = SqliteStore::open(dir.path()).unwrap();
        let outcome = store.enqueue(req("evt_q"), item()).await.unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Claimed { .. }),
            "{outcome:?}"
        );
        store.enqueue(req("evt_dead"), item()).await.unwrap();
        let taken = store
            .take(
                &source,
                NonZeroU32::new(2).unwrap(),
                Duration::from_secs(60),
                None,
            )
            .await
            .unwrap();
        let failure = Failure {
            status: Some(503),
            error: "downstream answered 503".into(),
        };
        store
            .dead_letter(taken[1].item.clone(), &failure)
            .await
            .unwrap();
    }
    let store = SqliteStore::open(dir.path()).unwrap();
    assert!(matches!(
        store.enqueue(req("evt_q"), item()).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    let dead = store
        .dead_letters(&ReplayFilter::default(), one)
        .await
        .unwrap();
    assert_eq!((dead.len(), dead[0].attempts.len()), (1, 1), "{dead:?}");
    assert_eq!(dead[0].queued, item());
    // The first take's lease outlived the store: the item is due once the lease lapses (or the
    // holder's next boot), not before.
    assert!(
        store
            .take(&source, one, Duration::from_secs(60), None)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .replay_dead_letters(&ReplayFilter::default(), "after the outage")
            .await
            .unwrap(),
        1
    );
    drop(store);
    let store = SqliteStore::open(dir.path()).unwrap();
    let view = store
        .lookup(&Key::parse("src", "evt_dead").unwrap())
        .await
        .unwrap();
    assert_eq!(
        view.history.last().unwrap().note.as_deref(),
        Some("after the outage")
    );
    let taken = store
        .take(&source, one, Duration::from_secs(60), None)
        .await
        .unwrap();
    assert_eq!((taken[0].queued.clone(), taken[0].tries), (item(), 1));
}

/// The claim and the item are one transaction: when queueing the item fails, the claim is not
/// kept either, and the sender's retry is a first receipt.
#[tokio::test]
async fn an_enqueue_that_cannot_queue_keeps_no_claim() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON inbox_items
             BEGIN SELECT RAISE(ABORT, 'the disk is full'); END;",
        )
        .unwrap();
    }
    let err = store.enqueue(req("evt_1"), item()).await.unwrap_err();
    assert!(matches!(err, StoreError::Backend { .. }), "{err}");
    let view = store
        .lookup(&Key::parse("src", "evt_1").unwrap())
        .await
        .unwrap();
    assert_eq!((view.record, view.history.len()), (None, 0), "nothing kept");
    {
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch("DROP TRIGGER refuse").unwrap();
    }
    assert!(matches!(
        store.enqueue(req("evt_1"), item()).await.unwrap(),
        ClaimOutcome::Claimed { .. }
    ));
}

/// A delivered or purged item takes its headers and attempts with it.
#[tokio::test]
async fn gone_items_leave_no_headers_or_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path()).unwrap();
    let source = SourceName::new("src").unwrap();
    let lease = Duration::from_secs(60);
    let failure = Failure {
        status: None,
        error: "timed out".into(),
    };
    for id in ["evt_1", "evt_2"] {
        store.enqueue(req(id), item()).await.unwrap();
    }
    let taken = store
        .take(&source, NonZeroU32::new(2).unwrap(), lease, None)
        .await
        .unwrap();
    store
        .retry_later(taken[0].item.clone(), &failure, Duration::ZERO)
        .await
        .unwrap();
    store
        .dead_letter(taken[1].item.clone(), &failure)
        .await
        .unwrap();
    assert_eq!(count(dir.path(), "inbox_attempts"), 2);
    let again = store
        .take(&source, NonZeroU32::new(1).unwrap(), lease, None)
        .await
        .unwrap();
    store.delivered(again[0].item.clone()).await.unwrap();
    // Dead letters die by the store's clock, and the cutoff is strict: wait past it.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let purged = store
        .purge_dead_letters(Duration::ZERO, NonZeroU32::new(10).unwrap())
        .await
        .unwrap();
    assert_eq!(purged, 1);
    for table in ["inbox_items", "inbox_headers", "inbox_attempts"] {
        assert_eq!(count(dir.path(), table), 0, "{table}");
    }
}

/// A database at schema 2 (the previous release) is an older schema for tools that only read,
/// and is migrated in place by `open`: its history reads back with no notes.
#[tokio::test]
async fn a_schema_2_database_is_older_and_upgraded_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("../sql/0001_init.sql"))
            .unwrap();
        conn.execute_batch(include_str!("../sql/0002_holders.sql"))
            .unwrap();
        conn.execute_batch(
            "INSERT INTO history (source, event_id, outcome, processed, attempt, received_at) \
                 VALUES ('src', 'evt_old', 'claimed', 1, 1, 1000);
             PRAGMA user_version = 2;",
        )
        .unwrap();
    }
    let err = SqliteStore::open_existing(dir.path(), Default::default()).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::OlderSchema {
                found: 2,
                known: SCHEMA_VERSION
            }
        ),
        "{err}"
    );
    let store = SqliteStore::open(dir.path()).unwrap();
    let view = store
        .lookup(&Key::parse("src", "evt_old").unwrap())
        .await
        .unwrap();
    assert_eq!(view.history.len(), 1);
    assert_eq!(view.history[0].note, None);
    assert!(store.inbox_stats().await.unwrap().is_empty());
    drop(store);
    assert!(SqliteStore::open_existing(dir.path(), Default::default()).is_ok());
}
