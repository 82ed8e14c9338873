//! A Stripe webhook receiver in your own axum service: each event handled once, on SQLite.
//!
//! From the repository's root, with `idemgate` on your PATH (`cargo install --locked --path
//! crates/cli`), start it and send it a delivery signed as Stripe signs it, twice:
//!
//! <!-- ci: run axum_stripe -->
//! ```sh
//! STRIPE_WEBHOOK_SECRET=whsec_example cargo run -p idemgate --example axum_stripe &
//! idemgate send stripe-live --config crates/idemgate/examples/axum_stripe.toml --path /webhooks/stripe --repeat 2
//! idemgate send stripe-live --config crates/idemgate/examples/axum_stripe.toml --path /webhooks/stripe --secret whsec_wrong
//! ```
//!
//! The first delivery is handled (`200`, the handler's `ok`), its retry is answered `200
//! duplicate` without reaching the handler, and a delivery signed with another secret is refused
//! (`401 bad_signature`) before any claim. `axum_stripe.toml` holds the source's secret and this
//! app's address for `idemgate send`; for real deliveries, give the endpoint's signing secret
//! and point Stripe at `https://<your host>/webhooks/stripe`.
use axum::{Extension, Router, routing::post};
use idemgate::{
    Claimed, Dedup, IdempotencyLayer, Scheme, Secret, SourceName, StoreConfig, Verifier,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The endpoint's signing secret, as Stripe shows it (whsec_...).
    let secret = Secret::from(std::env::var("STRIPE_WEBHOOK_SECRET")?);
    let verifier = Verifier::new(Scheme::Stripe, vec![secret], Verifier::DEFAULT_TOLERANCE)?;
    // Stripe retries for 3 days; its preset adds queue lag, clock skew and a replay margin.
    let ttl = idemgate::preset("stripe")
        .and_then(|p| p.contract)
        .ok_or("no preset")?
        .ttl();
    let stripe = idemgate::layer::verified(SourceName::new("stripe-live")?, verifier, ttl);
    let dedup = Dedup::open(&StoreConfig::default()).await?; // SQLite in ./idemgate-data
    let app = Router::new()
        .route("/webhooks/stripe", post(handle))
        .layer(IdempotencyLayer::new(dedup, stripe));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await?;
    Ok(())
}

/// Runs once per event: a retry of a processed event never gets here.
async fn handle(Extension(claimed): Extension<Claimed>, body: String) -> &'static str {
    let (key, attempt) = (&claimed.token.key, claimed.token.attempt);
    println!("processing {key} (attempt {attempt}): {} bytes", body.len());
    "ok"
}
