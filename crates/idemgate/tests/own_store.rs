//! A store written outside idemgate (`examples/own_store/store.rs`) passes the conformance suite
//! every engine passes, held as `Dedup` holds any store: an [`AnyStore`] over it.

#[path = "../examples/own_store/store.rs"]
mod store;

use std::sync::Arc;

use idemgate::AnyStore;
use idemgate::engines::core::ManualClock;
use idemgate::engines::core::testkit::ManualHarness;

async fn harness() -> Option<ManualHarness<AnyStore>> {
    let clock = ManualClock::starting_now();
    Some(ManualHarness {
        store: AnyStore::new(store::OwnStore::with_clock(Arc::new(clock.clone()))),
        clock,
    })
}

idemgate::engines::core::conformance_tests!(harness());

/// A store without an inbox holds no queue items: an event's queue is answered empty, while the
/// inbox itself is refused by name.
#[tokio::test]
async fn a_store_without_an_inbox_answers_a_lookup_and_refuses_a_queue() {
    use idemgate::engines::core::inbox::Inbox;
    use idemgate::{Key, StoreError};
    let store = AnyStore::new(store::OwnStore::new());
    let key = Key::parse("orders", "ord_1").unwrap();
    assert!(store.queue_of(&key).await.unwrap().is_empty());
    assert!(matches!(
        store.queued(&key).await,
        Err(StoreError::Unsupported { engine: "own", .. })
    ));
}
