//! A RabbitMQ consumer that processes each event once, deduplicating by `message_id` with
//! `Dedup::process_once`.
//!
//! RabbitMQ keeps no dedup window of its own: a gateway stopped between the broker's confirm
//! and its claim's completion publishes the event again on the sender's retry, and a consumer
//! that stops before its `ack` gets the message again. idemgate's gateway gives every message
//! `message_id` = `{source}:{event_id}` (the same value as its `Idempotency-Key` header), so the
//! consumer claims that id before acting and acknowledges the message either way.
//!
//! From the repository, with RabbitMQ at `AMQP_URL` (a queue of its own, deleted at the end;
//! the claims go to an SQLite store in a temporary directory):
//!
//! <!-- ci: run rabbitmq_consumer -->
//! ```sh
//! AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f cargo run -p idemgate --example rabbitmq_consumer
//! ```
//!
//! The example publishes 20 events as idemgate does, each twice (a re-publish after a crash),
//! and its first consumer stops without acknowledging half of what it took (a crash before the
//! `ack`, so RabbitMQ redelivers those). It prints `40 messages of 20 events, ... 20 processed`
//! and fails unless each event was processed exactly once.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use idemgate::{ClaimRequest, Dedup, Key, Once, StoreConfig};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// How long a message id is remembered: longer than idemgate may publish an event again (the
/// sender's retry window; `idemgate check` prints it for each source as its "window").
const TTL: Duration = Duration::from_secs(7 * 86_400);
/// How long one message's processing may take before another consumer may take it over.
const LEASE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let queue = format!("idemgate-example-{}", std::process::id());
    let data = tempfile::tempdir()?;
    let dedup = Dedup::open(&StoreConfig {
        path: data.path().to_path_buf(),
        ..StoreConfig::default()
    })
    .await?;

    let connection = Connection::connect(&url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    // What idemgate publishes for a source `orders` with an amqp:// forward_url, each event
    // twice, as after a gateway crash between the confirm and the claim's completion.
    for _ in 0..2 {
        for n in 1..=20 {
            let message_id = format!("orders:evt_{n}");
            channel
                .basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions::default(),
                    format!("{{\"id\":\"evt_{n}\"}}").as_bytes(),
                    BasicProperties::default()
                        .with_message_id(message_id.as_str().into())
                        .with_delivery_mode(2)
                        .with_content_type("application/json".into()),
                )
                .await?
                .await?;
        }
    }

    let processed = Arc::new(AtomicUsize::new(0));
    let duplicates = Arc::new(AtomicUsize::new(0));
    // The first consumer takes 10 messages and stops before acknowledging any: RabbitMQ hands
    // them to the next consumer.
    let crashed = connection.create_channel().await?;
    let mut taken = crashed
        .basic_consume(
            queue.as_str().into(),
            "crashes".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    for _ in 0..10 {
        taken.next().await.ok_or("the queue ended")??;
    }
    crashed.close(200, "gone before its acks".into()).await?;

    // The consumer: claim the message id, do the work once, acknowledge.
    let channel = connection.create_channel().await?;
    let mut consumer = channel
        .basic_consume(
            queue.as_str().into(),
            "worker".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let mut messages = 0;
    while messages < 40 {
        let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await?
            .ok_or("the queue ended")??;
        messages += 1;
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .ok_or("a message without a message_id")?
            .to_string();
        let claim = ClaimRequest::new(Key::parse("rabbitmq-orders", &id)?, LEASE, TTL);
        let once = dedup
            .process_once(claim, |_| async {
                processed.fetch_add(1, Ordering::SeqCst); // the real work
                Ok::<_, std::io::Error>(())
            })
            .await
            .map_err(|e| e.to_string())?;
        match once {
            Once::Processed(()) => {}
            Once::Duplicate { .. } => {
                duplicates.fetch_add(1, Ordering::SeqCst);
            }
            // Another consumer holds it right now: leave it to that one (requeue it instead if
            // its work could fail), and the rest are not to be run again.
            Once::InFlight { .. } | Once::LateDuplicate { .. } | Once::Conflict { .. } => {}
        }
        // Acknowledged either way: processed now, or before.
        delivery.ack(BasicAckOptions::default()).await?;
    }
    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await?;
    dedup.shutdown(Duration::from_secs(5)).await;
    println!(
        "40 messages of 20 events, 10 of them redelivered after a consumer stopped: {} processed, {} duplicates skipped",
        processed.load(Ordering::SeqCst),
        duplicates.load(Ordering::SeqCst)
    );
    assert_eq!(
        processed.load(Ordering::SeqCst),
        20,
        "each event exactly once"
    );
    Ok(())
}
