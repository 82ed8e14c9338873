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
