//! Shared by the live PostgreSQL tests: the server's URL, a uniquely named schema per test that
//! is dropped when the test ends (pass or fail), and the conformance harness.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use idemgate_core::inbox;
use idemgate_core::testkit::{RealTimeHarness, require_service};
use idemgate_core::{
    ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, EventView, Key, StoreError, Sweep,
};
use idemgate_postgres::{Expiry, PgConfig, PgError, PgStore};

pub const WHAT_TO_START: &str = "start PostgreSQL on 127.0.0.1:5432 (user root, database test, trust auth) or set IDEMGATE_TEST_POSTGRES to a server's URL";

/// The test server's URL, read at run time.
pub fn url() -> String {
    std::env::var("IDEMGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@localhost/test".to_owned())
}

/// A schema name no other test uses.
pub fn unique_schema() -> String {
    format!(
        "idemgate_test_{}_{:016x}",
        std::process::id(),
        idemgate_core::machine::nonce()
    )
}

/// Drops its schema when dropped: at the end of the test, and while a failing test unwinds.
#[derive(Debug)]
pub struct SchemaGuard {
    pub schema: String,
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        // Its own thread and runtime: a Drop cannot await, and the test's runtime may be busy.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let Ok((client, conn)) =
                    tokio_postgres::connect(&url(), tokio_postgres::NoTls).await
                else {
                    return;
                };
                tokio::spawn(conn);
                // Never hang a test run on a lock: give up (and say so) after 30 s.
                if let Err(e) = client
                    .batch_execute(&format!(
                        "SET lock_timeout = '30s'; DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
                    ))
                    .await
                {
                    eprintln!("could not drop test schema {schema}: {e}");
                }
            });
        })
        .join();
        if done.is_err() {
            eprintln!("could not drop test schema {}", self.schema);
        }
    }
}

/// A test's configuration: the test server, a fresh schema, `expiry`.
pub fn config(expiry: Expiry) -> (PgConfig, SchemaGuard) {
    let schema = unique_schema();
    let mut cfg = PgConfig::new(url());
    cfg.schema = schema.clone();
    cfg.pool_size = std::num::NonZeroUsize::new(6).unwrap();
    cfg.expiry = expiry;
    (cfg, SchemaGuard { schema })
}

/// Connects, or skips (fails under CI) when the server is unreachable.
pub async fn connect(cfg: PgConfig) -> Option<PgStore> {
    let result = PgStore::connect(cfg).await;
    // Only an unreachable server is a reason to skip; any other error is a failure.
    match result {
        Err(e @ PgError::Connect { .. }) => require_service(Err::<PgStore, _>(e), WHAT_TO_START),
        other => Some(other.expect("connect")),
    }
}

/// A store on a fresh schema that is dropped when the last clone goes.
#[derive(Debug, Clone)]
pub struct TestStore {
    pub store: PgStore,
    pub guard: Arc<SchemaGuard>,
}

impl TestStore {
    pub async fn new(expiry: Expiry) -> Option<Self> {
        let (cfg, guard) = config(expiry);
        let store = connect(cfg).await?;
        Some(Self {
            store,
            guard: Arc::new(guard),
        })
    }
}

impl ClaimStore for TestStore {
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        self.store.claim(req).await
    }
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.store.complete(token).await
    }
    async fn complete_keeping(
        &self,
        token: &ClaimToken,
        result: idemgate_core::RecordResult,
    ) -> Result<(), StoreError> {
        self.store.complete_keeping(token, result).await
    }
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.store.release(token).await
    }
    async fn renew(
        &self,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<idemgate_core::Timestamp, StoreError> {
        self.store.renew(token, lease).await
    }
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        self.store.lookup(key).await
    }
    async fn record(&self, key: &Key) -> Result<Option<idemgate_core::Record>, StoreError> {
        self.store.record(key).await
    }
}

impl idemgate_core::Instances for TestStore {
    async fn register_boot(
        &self,
        req: &idemgate_core::BootRequest,
    ) -> Result<idemgate_core::Boot, StoreError> {
        self.store.register_boot(req).await
    }
    async fn heartbeat(
        &self,
        holder: &idemgate_core::Holder,
        lease: Duration,
    ) -> Result<idemgate_core::Timestamp, StoreError> {
        self.store.heartbeat(holder, lease).await
    }
    async fn end_boot(&self, holder: &idemgate_core::Holder) -> Result<(), StoreError> {
        self.store.end_boot(holder).await
    }
}

impl Sweep for TestStore {
    async fn sweep_expired(&self, batch: std::num::NonZeroU32) -> Result<u64, StoreError> {
        self.store.sweep_expired(batch).await
    }
    async fn sweep_run<P, F>(
        &self,
        opts: idemgate_core::sweep::SweepOptions,
        pause: P,
        on_batch: impl FnMut(u64) + Send,
    ) -> Result<idemgate_core::sweep::SweepReport, StoreError>
    where
        P: FnMut(std::time::Duration) -> F + Send,
        F: std::future::Future<Output = bool> + Send,
    {
        self.store.sweep_run(opts, pause, on_batch).await
    }
}

impl idemgate_core::HistoryQuery for TestStore {
    async fn has_source(&self, source: &idemgate_core::SourceName) -> Result<bool, StoreError> {
        self.store.has_source(source).await
    }
    async fn observe(
        &self,
        period: std::time::Duration,
    ) -> Result<Vec<idemgate_core::advise::Observation>, StoreError> {
        self.store.observe(period).await
    }
}

impl idemgate_core::Timeline for TestStore {
    async fn recent(
        &self,
        source: &idemgate_core::SourceName,
        limit: std::num::NonZeroU32,
    ) -> Result<Vec<idemgate_core::Recent>, StoreError> {
        self.store.recent(source, limit).await
    }
    async fn timeline(
        &self,
        source: &idemgate_core::SourceName,
        bucket_secs: std::num::NonZeroU32,
        buckets: std::num::NonZeroU32,
    ) -> Result<idemgate_core::TimelineCounts, StoreError> {
        self.store.timeline(source, bucket_secs, buckets).await
    }
}

impl idemgate_core::HistoryRetention for TestStore {
    async fn purge_history(
        &self,
        retention: std::time::Duration,
        batch: std::num::NonZeroU32,
    ) -> Result<u64, StoreError> {
        self.store.purge_history(retention, batch).await
    }
}

impl idemgate_core::inbox::Inbox for TestStore {
    async fn enqueue(
        &self,
        req: ClaimRequest,
        item: inbox::QueuedItem,
    ) -> Result<ClaimOutcome, StoreError> {
        self.store.enqueue(req, item).await
    }
    async fn requeue(
        &self,
        req: ClaimRequest,
        item: inbox::QueuedItem,
        reason: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        self.store.requeue(req, item, reason).await
    }
    async fn take(
        &self,
        source: &idemgate_core::SourceName,
        limit: std::num::NonZeroU32,
        lease: Duration,
        holder: Option<&idemgate_core::Holder>,
    ) -> Result<Vec<inbox::Taken>, StoreError> {
        self.store.take(source, limit, lease, holder).await
    }
    async fn delivered(&self, item: inbox::ItemRef) -> Result<(), StoreError> {
        self.store.delivered(item).await
    }
    async fn retry_later(
        &self,
        item: inbox::ItemRef,
        failure: &inbox::Failure,
        delay: Duration,
    ) -> Result<(), StoreError> {
        self.store.retry_later(item, failure, delay).await
    }
    async fn dead_letter(
        &self,
        item: inbox::ItemRef,
        failure: &inbox::Failure,
    ) -> Result<(), StoreError> {
        self.store.dead_letter(item, failure).await
    }
    async fn dead_letters(
        &self,
        filter: &inbox::ReplayFilter,
        limit: std::num::NonZeroU32,
    ) -> Result<Vec<inbox::DeadLetter>, StoreError> {
        self.store.dead_letters(filter, limit).await
    }
    async fn queued(&self, key: &idemgate_core::Key) -> Result<Vec<inbox::QueueEntry>, StoreError> {
        self.store.queued(key).await
    }
    async fn replay_dead_letters(
        &self,
        filter: &inbox::ReplayFilter,
        reason: &str,
    ) -> Result<u64, StoreError> {
        self.store.replay_dead_letters(filter, reason).await
    }
    async fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: std::num::NonZeroU32,
    ) -> Result<u64, StoreError> {
        self.store.purge_dead_letters(retention, batch).await
    }
    async fn inbox_stats(&self) -> Result<Vec<inbox::InboxStats>, StoreError> {
        self.store.inbox_stats().await
    }
}

/// The conformance harness on a fresh schema.
pub async fn harness(expiry: Expiry) -> Option<RealTimeHarness<TestStore>> {
    Some(RealTimeHarness {
        store: TestStore::new(expiry).await?,
    })
}

/// Partitioned mode with one-hour partitions: the suite's one-hour TTLs stay a few partitions
/// ahead.
pub fn partitioned_hourly() -> Expiry {
    Expiry::Partitioned {
        width: Duration::from_secs(3_600),
    }
}

/// A raw connection to the test server with `schema` on the search path.
pub async fn raw(schema: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&url(), tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
        .batch_execute(&format!("SET search_path = \"{schema}\""))
        .await
        .unwrap();
    client
}

/// A boot request for `name` from this test (a 60 s liveness lease).
pub fn boot(name: &idemgate_core::InstanceName) -> idemgate_core::BootRequest {
    idemgate_core::BootRequest::new(name.clone(), Duration::from_secs(60), "test-host")
}
