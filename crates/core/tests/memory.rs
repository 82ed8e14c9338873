//! The conformance suite on the in-memory store.

use std::sync::Arc;

use idemgate_core::MemoryStore;
use idemgate_core::testkit::ManualHarness;
use idemgate_core::time::ManualClock;

async fn harness() -> Option<ManualHarness<MemoryStore>> {
    let clock = ManualClock::starting_now();
    Some(ManualHarness {
        store: MemoryStore::with_clock(Arc::new(clock.clone())),
        clock,
    })
}

idemgate_core::conformance_tests!(harness());
idemgate_core::sweep_conformance_tests!(harness());
idemgate_core::history_conformance_tests!(harness());
idemgate_core::timeline_conformance_tests!(harness());
idemgate_core::instances_conformance_tests!(harness());
idemgate_core::inbox_conformance_tests!(harness());
