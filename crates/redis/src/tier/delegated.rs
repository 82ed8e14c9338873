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
