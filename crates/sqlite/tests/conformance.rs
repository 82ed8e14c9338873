//! The conformance suite on the SQLite store (real files, an injected clock).

use std::sync::Arc;

use idemgate_core::testkit::ManualHarness;
use idemgate_core::time::ManualClock;
use idemgate_sqlite::{SqliteOptions, SqliteStore};

/// A store in a fresh temporary directory, removed when the harness is dropped.
struct Harness {
    inner: ManualHarness<SqliteStore>,
    _dir: tempfile::TempDir,
}

impl idemgate_core::testkit::Harness for Harness {
    type Store = SqliteStore;
    fn store(&self) -> SqliteStore {
        self.inner.store.clone()
    }
    async fn advance(&self, d: std::time::Duration) {
        self.inner.clock.advance(d);
    }
}

async fn harness() -> Option<Harness> {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = ManualClock::starting_now();
    let store = SqliteStore::open_with(
        dir.path(),
        SqliteOptions {
            clock: Arc::new(clock.clone()),
            ..SqliteOptions::default()
        },
    )
    .expect("open");
    Some(Harness {
        inner: ManualHarness { store, clock },
        _dir: dir,
    })
}

idemgate_core::conformance_tests!(harness());
idemgate_core::sweep_conformance_tests!(harness());
idemgate_core::history_conformance_tests!(harness());
idemgate_core::timeline_conformance_tests!(harness());
idemgate_core::instances_conformance_tests!(harness());
idemgate_core::inbox_conformance_tests!(harness());
