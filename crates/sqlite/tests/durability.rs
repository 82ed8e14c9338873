//! What the SQLite store keeps across reopening, and what it refuses.

use std::time::Duration;

use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key, StoreError};
use idemgate_sqlite::{DB_FILE, SqliteStore};

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
