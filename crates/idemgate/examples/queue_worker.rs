//! A queue worker on PostgreSQL: every message is processed once, however often the queue
//! delivers it, with `Dedup::process_once`.
//!
//! From the repository, with PostgreSQL at `DATABASE_URL` (it works in a schema of its own,
//! dropped at the end):
//!
//! <!-- ci: run queue_worker -->
//! ```sh
//! DATABASE_URL=postgres://root@localhost/test cargo run -p idemgate --features postgres --example queue_worker
//! ```
//!
//! It prints `60 deliveries of 20 messages: 20 processed, ...` and fails unless each message
//! was processed exactly once.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use idemgate::{ClaimRequest, Dedup, Key, Once, StoreConfig, StoreKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url =
        std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://root@localhost/test".into());
    let schema = format!("idemgate_example_{}", std::process::id());
    let mut config = StoreConfig {
        kind: StoreKind::Postgres,
        url: Some(url.clone()),
        ..StoreConfig::default()
    };
    config.postgres.schema = schema.clone();
    let dedup = Dedup::open(&config).await?;

    // The queue delivers every message three times (at-least-once), some at the same moment.
    let deliveries: Vec<String> = (0..3)
        .flat_map(|_| (1..=20).map(|n| format!("msg-{n}")))
        .collect();
    let shipped = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for id in deliveries {
        let (dedup, shipped) = (dedup.clone(), shipped.clone());
        workers.push(tokio::spawn(async move {
            let claim = ClaimRequest::new(
                Key::parse("orders-queue", &id)?,
                Duration::from_secs(30),
                Duration::from_secs(86_400),
            );
            let once = dedup
                .process_once(claim, |_| async {
                    tokio::time::sleep(Duration::from_millis(20)).await; // the real work
                    shipped.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(())
                })
                .await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(once)
        }));
    }
    let mut in_flight = 0;
    for w in workers {
        if let Once::InFlight { .. } = w.await?.map_err(|e| e.to_string())? {
            in_flight += 1; // a real worker would let the queue redeliver it later
        }
    }
    dedup.shutdown(Duration::from_secs(5)).await;
    println!(
        "60 deliveries of 20 messages: {} processed, {in_flight} answered in flight",
        shipped.load(Ordering::SeqCst)
    );
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await?;
    assert_eq!(
        shipped.load(Ordering::SeqCst),
        20,
        "each message exactly once"
    );
    Ok(())
}
