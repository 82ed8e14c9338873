//! The traits the tier leaves to its inner store whole: identity, boots, sweeping, history and
//! stats. Only claims and releases go through Redis (`mod.rs`).

use std::time::Duration;

use idemgate_core::advise::Observation;
use idemgate_core::store::HistoryQuery;
use idemgate_core::{
    Boot, BootRequest, ClaimStore, HistoryRetention, Holder, Identity, Instances, Stats,
    StoreError, StoreStats, Sweep, Timestamp,
};
use tracing::instrument;

use super::TieredStore;

impl<S: Identity> Identity for TieredStore<S> {
    /// The inner store's: the tier is a cache of it, not a store of its own.
    fn store_id(&self) -> &str {
        self.inner.store_id()
    }
}

impl<S: ClaimStore + Instances> Instances for TieredStore<S> {
    /// The inner store's. Nothing cached changes: only done records are cached, and a boot
    /// frees processing ones.
    #[instrument(level = "info", skip_all, fields(instance = %req.instance))]
    async fn register_boot(&self, req: &BootRequest) -> Result<Boot, StoreError> {
        self.inner.register_boot(req).await
    }

    async fn heartbeat(&self, holder: &Holder, lease: Duration) -> Result<Timestamp, StoreError> {
        self.inner.heartbeat(holder, lease).await
    }

    async fn end_boot(&self, holder: &Holder) -> Result<(), StoreError> {
        self.inner.end_boot(holder).await
    }
}

/// Sweeping is the inner store's, run and all (PostgreSQL maintains partitions in its run).
impl<S: ClaimStore + Sweep> Sweep for TieredStore<S> {
    #[instrument(level = "debug", skip_all)]
    async fn sweep_expired(&self, batch: std::num::NonZeroU32) -> Result<u64, StoreError> {
        self.inner.sweep_expired(batch).await
    }

    #[instrument(level = "debug", skip_all)]
    async fn sweep_run<P, F>(
        &self,
        opts: idemgate_core::sweep::SweepOptions,
        pause: P,
        on_batch: impl FnMut(u64) + Send,
    ) -> Result<idemgate_core::sweep::SweepReport, StoreError>
    where
        P: FnMut(Duration) -> F + Send,
        F: std::future::Future<Output = bool> + Send,
    {
        self.inner.sweep_run(opts, pause, on_batch).await
    }
}

impl<S: ClaimStore + HistoryQuery> HistoryQuery for TieredStore<S> {
    #[instrument(level = "debug", skip_all, fields(source = %source))]
    async fn has_source(&self, source: &idemgate_core::SourceName) -> Result<bool, StoreError> {
        self.inner.has_source(source).await
    }

    #[instrument(level = "debug", skip_all, fields(period = ?period))]
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        self.inner.observe(period).await
    }
}

impl<S: ClaimStore + HistoryRetention> HistoryRetention for TieredStore<S> {
    #[instrument(level = "debug", skip_all, fields(batch = batch.get()))]
    async fn purge_history(
        &self,
        retention: Duration,
        batch: std::num::NonZeroU32,
    ) -> Result<u64, StoreError> {
        self.inner.purge_history(retention, batch).await
    }
}

impl<S: ClaimStore + Stats> Stats for TieredStore<S> {
    #[instrument(level = "debug", skip_all)]
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.inner.stats().await
    }
}

/// Every capability is the inner store's, whole (the tier caches claims, not queues, history or
/// boots); the engine's name says the tier is there.
impl<S: idemgate_core::Capabilities> idemgate_core::Capabilities for TieredStore<S> {
    fn engine(&self) -> &'static str {
        match self.inner.engine() {
            "memory" => "memory+redis",
            "sqlite" => "sqlite+redis",
            "postgres" => "postgres+redis",
            "redis" => "redis+redis",
            _ => "store+redis",
        }
    }
    fn instances(&self) -> Option<&dyn idemgate_core::object::DynInstances> {
        self.inner.instances()
    }
    fn sweep(&self) -> Option<&dyn idemgate_core::object::DynSweep> {
        self.inner.sweep()
    }
    fn history(&self) -> Option<&dyn idemgate_core::object::DynHistory> {
        self.inner.history()
    }
    fn stats(&self) -> Option<&dyn idemgate_core::object::DynStats> {
        self.inner.stats()
    }
    fn counts_cheaply(&self) -> bool {
        self.inner.counts_cheaply()
    }
    fn timeline(&self) -> Option<&dyn idemgate_core::object::DynTimeline> {
        self.inner.timeline()
    }
    fn export(&self) -> Option<&dyn idemgate_core::object::DynHistoryExport> {
        self.inner.export()
    }
    fn inbox(&self) -> Option<&dyn idemgate_core::object::DynInbox> {
        self.inner.inbox()
    }
    fn clock(&self) -> Option<&dyn idemgate_core::Clock> {
        self.inner.clock()
    }
    fn schema_version(
        &self,
    ) -> idemgate_core::BoxFuture<'_, Result<Option<(i64, i64)>, StoreError>> {
        self.inner.schema_version()
    }
}
