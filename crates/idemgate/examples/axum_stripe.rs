//! A Stripe webhook receiver in your own axum service, each event handled once, on SQLite.
//!
//! `STRIPE_WEBHOOK_SECRET=whsec_... cargo run -p idemgate --example axum_stripe`, then point
//! Stripe (or `idemgate send stripe-live --url http://127.0.0.1:3000`) at /hooks/stripe-live.
use std::time::Duration;

use axum::{Extension, Router, routing::post};
use idemgate::{
    Claimed, Dedup, IdempotencyLayer, Scheme, Secret, SourceName, StoreConfig, Verifier,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secret = std::env::var("STRIPE_WEBHOOK_SECRET")?;
    let verifier = Verifier::new(
        Scheme::Stripe,
        vec![Secret::from(secret)],
        Verifier::DEFAULT_TOLERANCE,
    )?;
    let ttl = Duration::from_secs(7 * 86_400); // Stripe retries for 3 days; see `idemgate ttl`
    let stripe = idemgate::layer::verified(SourceName::new("stripe-live")?, verifier, ttl);
    let dedup = Dedup::open(&StoreConfig::default()).await?; // ./idemgate-data
    let app = Router::new()
        .route("/hooks/stripe-live", post(handle))
        .layer(IdempotencyLayer::new(dedup, stripe));
    let addr = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// Runs once per event: a retry of a processed event never gets here.
async fn handle(Extension(claimed): Extension<Claimed>, body: String) -> &'static str {
    println!(
        "processing {} (attempt {}): {} bytes",
        claimed.token.key,
        claimed.token.attempt,
        body.len()
    );
    "ok"
}
