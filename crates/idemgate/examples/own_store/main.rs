//! A store of one's own behind [`Dedup`]: `cargo run -p idemgate --example own_store`.
//!
//! `store.rs` is the store (claims in a `HashMap`, decided by idemgate's claim rules);
//! `tests/own_store.rs` runs the conformance suite every engine runs against it, through
//! [`AnyStore`], as [`Dedup`] holds it.

mod store;

use std::time::Duration;

use idemgate::engines::core::inbox::Inbox;
use idemgate::{AnyStore, ClaimRequest, Dedup, Key, Once, StoreError};

use crate::store::OwnStore;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = AnyStore::new(OwnStore::new());
    let dedup = Dedup::new(store.clone());
    let key = Key::parse("orders", "ord_1")?;
    let claim = || {
        ClaimRequest::new(
            key.clone(),
            Duration::from_secs(30),
            Duration::from_secs(3600),
        )
    };
    let first = dedup
        .process_once(claim(), |_claimed| async { Ok::<_, StoreError>("charged") })
        .await?;
    let again = dedup
        .process_once(claim(), |_claimed| async {
            Ok::<_, StoreError>("charged twice")
        })
        .await?;
    println!("first: {first:?}");
    println!("again: {again:?}");
    assert!(matches!(first, Once::Processed("charged")));
    assert!(matches!(again, Once::Duplicate { .. }));
    // What the store does not have is a typed refusal, not an empty answer.
    let queued = store.queued(&key).await;
    println!("its inbox: {queued:?}");
    assert!(matches!(queued, Err(StoreError::Unsupported { .. })));
    Ok(())
}
