//! Claims inside the caller's own transaction: committed, the claim, its completion and the
//! caller's rows are there together; rolled back, none are, and the next delivery claims afresh;
//! a second claim of the same event waits for the first transaction and then hears it was done.

mod common;

use std::time::Duration;

use idemgate_core::{
    ClaimOutcome, ClaimRequest, ClaimStore, Key, RESULT_LIMIT, RecordResult, RecordState,
    StoreError, StoredResult,
};
use idemgate_postgres::Expiry;

/// The caller's own connection, from the store's settings (its schema first on the
/// `search_path`), with a table of the caller's in that schema.
async fn own_connection(cfg: &idemgate_postgres::PgConfig) -> tokio_postgres::Client {
    let (client, conn) = cfg
        .connection_config()
        .unwrap()
        .connect(tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("CREATE TABLE IF NOT EXISTS payments (event_id text PRIMARY KEY)")
        .await
        .unwrap();
    client
}

fn claim(id: &str) -> ClaimRequest {
    ClaimRequest::new(
        Key::parse("shop", id).unwrap(),
        Duration::from_secs(30),
        Duration::from_secs(3600),
    )
}

async fn payments(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM payments", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_commits_and_rolls_back_with_the_callers_rows() {
    let (cfg, _guard) = common::config(Expiry::batched());
    let Some(store) = common::connect(cfg.clone()).await else {
        return;
    };
    let mut client = own_connection(&cfg).await;

    // Rolled back: no claim, no row; the next delivery claims afresh.
    let tx = client.transaction().await.unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim_in(&tx, claim("evt_1")).await.unwrap()
    else {
        panic!("not claimed");
    };
    tx.execute("INSERT INTO payments VALUES ('evt_1')", &[])
        .await
        .unwrap();
    store.complete_in(&tx, &token).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(payments(&client).await, 0);
    assert!(
        store
            .lookup(&claim("evt_1").key)
            .await
            .unwrap()
            .record
            .is_none()
    );

    // Committed: the record is done with the caller's row beside it; a retry is a duplicate.
    let tx = client.transaction().await.unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim_in(&tx, claim("evt_1")).await.unwrap()
    else {
        panic!("not claimed after the rollback");
    };
    assert_eq!(token.attempt, 1, "the rolled-back attempt left nothing");
    tx.execute("INSERT INTO payments VALUES ('evt_1')", &[])
        .await
        .unwrap();
    store.complete_in(&tx, &token).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(payments(&client).await, 1);
    let record = store.lookup(&claim("evt_1").key).await.unwrap().record;
    assert_eq!(record.map(|r| r.state), Some(RecordState::Done));
    assert!(matches!(
        store.claim(claim("evt_1")).await.unwrap(),
        ClaimOutcome::Duplicate { .. }
    ));
    // A completion with a token that is not the claim's is refused, and changes nothing.
    let tx = client.transaction().await.unwrap();
    let mut other = token.clone();
    other.nonce ^= 1;
    assert!(matches!(
        store.complete_in(&tx, &other).await,
        Err(StoreError::StaleToken { .. })
    ));
    tx.rollback().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_claim_waits_for_the_first_transaction_and_hears_it_done() {
    let (cfg, _guard) = common::config(Expiry::batched());
    let Some(store) = common::connect(cfg.clone()).await else {
        return;
    };
    let mut client = own_connection(&cfg).await;
    let tx = client.transaction().await.unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim_in(&tx, claim("evt_2")).await.unwrap()
    else {
        panic!("not claimed");
    };
    // Another delivery of the same event, through the store's own pool, meanwhile.
    let racer = tokio::spawn({
        let store = store.clone();
        async move { store.claim(claim("evt_2")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!racer.is_finished(), "the second claim did not wait");
    tx.execute("INSERT INTO payments VALUES ('evt_2')", &[])
        .await
        .unwrap();
    store.complete_in(&tx, &token).await.unwrap();
    tx.commit().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), racer)
        .await
        .expect("the second claim still waits after the commit")
        .unwrap()
        .unwrap();
    assert!(
        matches!(second, ClaimOutcome::Duplicate { .. }),
        "{second:?}"
    );
    assert_eq!(payments(&client).await, 1);
}

#[tokio::test]
async fn a_transaction_on_another_schema_is_refused_before_anything_is_written() {
    let (cfg, _guard) = common::config(Expiry::batched());
    let Some(store) = common::connect(cfg.clone()).await else {
        return;
    };
    // The plain URL: the connection looks in the database's default schema first.
    let (mut client, conn) = tokio_postgres::connect(&common::url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let tx = client.transaction().await.unwrap();
    let err = store.claim_in(&tx, claim("evt_3")).await.unwrap_err();
    assert!(
        err.to_string().contains("search_path") || format!("{err:?}").contains("SearchPath"),
        "{err}"
    );
    tx.rollback().await.unwrap();
    assert!(
        store
            .lookup(&claim("evt_3").key)
            .await
            .unwrap()
            .record
            .is_none()
    );
}

/// A completion with its result inside the caller's transaction: rolled back, neither the
/// completion nor the result is there; committed, both are, with the caller's rows. A result
/// over the limit is refused, and committing completes the claim without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_commits_and_rolls_back_with_its_completion() {
    let (cfg, _guard) = common::config(Expiry::batched());
    let Some(store) = common::connect(cfg.clone()).await else {
        return;
    };
    let mut client = own_connection(&cfg).await;
    let result = StoredResult::new(201)
        .header("content-type", "application/json")
        .body(br#"{"payment":"pay_1"}"#.to_vec());

    let tx = client.transaction().await.unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim_in(&tx, claim("res_1")).await.unwrap()
    else {
        panic!("not claimed");
    };
    store
        .complete_with_in(&tx, &token, &result, RESULT_LIMIT)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(store.lookup(&token.key).await.unwrap().record.is_none());

    let tx = client.transaction().await.unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim_in(&tx, claim("res_1")).await.unwrap()
    else {
        panic!("not claimed after the rollback");
    };
    tx.execute("INSERT INTO payments VALUES ('res_1')", &[])
        .await
        .unwrap();
    store
        .complete_with_in(&tx, &token, &result, RESULT_LIMIT)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let rec = store.lookup(&token.key).await.unwrap().record.unwrap();
    assert_eq!(
        (rec.state, rec.completed, rec.result),
        (
            RecordState::Done,
            true,
            RecordResult::Stored(result.clone())
        )
    );

    // Too large: refused, and the commit completes the claim without it.
    let tx = client.transaction().await.unwrap();
    let ClaimOutcome::Claimed { token, .. } = store.claim_in(&tx, claim("res_2")).await.unwrap()
    else {
        panic!("not claimed");
    };
    let refused = store
        .complete_with_in(&tx, &token, &result, result.size() - 1)
        .await;
    assert!(
        matches!(refused, Err(StoreError::ResultTooLarge { size, .. }) if size == result.size()),
        "{refused:?}"
    );
    tx.commit().await.unwrap();
    let rec = store.lookup(&token.key).await.unwrap().record.unwrap();
    assert_eq!(
        (rec.completed, rec.result),
        (
            true,
            RecordResult::Withheld {
                size: result.size()
            }
        )
    );
    // A stale token stores nothing.
    let tx = client.transaction().await.unwrap();
    let stale = idemgate_core::ClaimToken {
        nonce: token.nonce ^ 1,
        ..token
    };
    assert!(matches!(
        store
            .complete_with_in(&tx, &stale, &result, RESULT_LIMIT)
            .await,
        Err(StoreError::StaleToken { .. })
    ));
    tx.rollback().await.unwrap();
}
