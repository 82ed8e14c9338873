//! Idempotency keys for your own API: a payments endpoint in axum behind
//! `IdempotencyKeyLayer`, on SQLite. A client that retries `POST /payments` with the same
//! `Idempotency-Key` creates one payment and gets the first response back, byte for byte.
//!
//! Start it and call it as a client would: the same key twice, the same key with another body,
//! and no key at all:
//!
//! <!-- ci: run axum_payments -->
//! ```sh
//! cargo run -p idemgate --example axum_payments &
//! curl -si http://127.0.0.1:3001/payments -H 'Idempotency-Key: "pay-7f3a"' -H 'Content-Type: application/json' -d '{"amount":1000}'
//! curl -si http://127.0.0.1:3001/payments -H 'Idempotency-Key: "pay-7f3a"' -H 'Content-Type: application/json' -d '{"amount":1000}'
//! curl -si http://127.0.0.1:3001/payments -H 'Idempotency-Key: "pay-7f3a"' -H 'Content-Type: application/json' -d '{"amount":9999}'
//! curl -si http://127.0.0.1:3001/payments -H 'Content-Type: application/json' -d '{"amount":1000}'
//! ```
//!
//! The first call creates `pay_1` (`201`); its retry is answered with the same `201` and body
//! and `Idempotent-Replayed: true`, without reaching the handler; the same key with another body
//! is `422 idempotency_key_reused`; a call without a key is `400 missing_idempotency_key`.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::{Json, Router, extract::State, http::StatusCode, routing::post};
use idemgate::idempotency_key::{IdempotencyKeyLayer, KeyRules};
use idemgate::{Dedup, SourceName, StoreConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dedup = Dedup::open(&StoreConfig::default()).await?; // SQLite in ./idemgate-data
    // Clients retry for up to a day: each key is kept for a day after its first request.
    let rules = KeyRules::new(
        SourceName::new("payments-api")?,
        Duration::from_secs(86_400),
    )
    .routes(["POST /payments".parse()?]);
    let created = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/payments", post(create))
        .with_state(created)
        .layer(IdempotencyKeyLayer::new(dedup, rules));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3001").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// Runs once per key: a retry never gets here.
async fn create(
    State(created): State<Arc<AtomicU64>>,
    Json(body): Json<serde_json::Value>,
) -> (StatusCode, Json<serde_json::Value>) {
    let n = created.fetch_add(1, Ordering::SeqCst) + 1;
    println!("creating pay_{n}: {body}");
    let payment = serde_json::json!({ "id": format!("pay_{n}"), "amount": body["amount"] });
    (StatusCode::CREATED, Json(payment))
}
