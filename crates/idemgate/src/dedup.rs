//! [`Dedup`]: claim, process, complete or release, with everything in between handled.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_core::store::ClaimStore;
use idemgate_core::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimToken, Holder, StoreError, Timestamp,
};

use crate::ErrorChain;
use crate::config::StoreConfig;
use crate::finish::{Finish, Finisher};
use crate::health::WriteHealth;
use crate::store::{AnyStore, OpenError};

/// What [`Dedup::process_once`] did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Once<T> {
    /// This call processed it: the work ran and succeeded, and the claim is (or, if the store
    /// failed just then, is being) completed.
    Processed(T),
    /// Processed before, within its TTL: nothing ran. `first_seen` is the first receipt, `None`
    /// when this process answered by itself (it processed the event a moment ago and the store
    /// has not taken the completion yet).
    Duplicate {
        /// The first receipt.
        first_seen: Option<Timestamp>,
    },
    /// The record had expired, but history shows the event processed before, and the request's
    /// [`LateDuplicates::Reject`](crate::LateDuplicates::Reject) says not to run it again.
    LateDuplicate {
        /// The first receipt, long ago.
        first_seen: Timestamp,
    },
    /// Another caller is processing it under a live lease: ask again after `retry_after`.
    InFlight {
        /// Until the other caller's lease ends.
        retry_after: Duration,
    },
    /// A live record of this id has a different payload fingerprint: nothing ran.
    Conflict {
        /// The first receipt of the other payload.
        first_seen: Timestamp,
    },
}

/// Why [`Dedup::process_once`] did not process an event.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError<E> {
    /// The claim could not be made (the store failed): nothing ran; try again later.
    #[error("the claim could not be made")]
    Store(#[source] StoreError),
    /// The work failed; its claim was released, so the next delivery of the event is processed.
    #[error("the work failed")]
    Failed(E),
}

/// What the work is told of its claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The fencing token: `attempt` is 1 on first receipt, more after a takeover.
    pub token: ClaimToken,
    /// When the record expires, by the store's clock.
    pub expires_at: Timestamp,
    /// Under [`LateDuplicates::Flag`](crate::LateDuplicates::Flag): the first receipt of an event
    /// processed before whose record had expired (a TTL too short, or a replay).
    pub late_duplicate: Option<Timestamp>,
}

/// Hears every claim: what was asked, what the store answered (or why it failed), and how long
/// it took. For metrics and logs.
pub type ClaimObserver =
    dyn Fn(&ClaimRequest, Result<&ClaimOutcome, &StoreError>, Duration) + Send + Sync;

/// Exactly-once processing on a store: [`Dedup::process_once`].
///
/// Cheap to clone; clones share the store and the background retries of completions and
/// releases (await [`Dedup::shutdown`] before the process exits).
#[derive(Clone)]
pub struct Dedup {
    inner: Arc<Inner>,
}

struct Inner {
    store: AnyStore,
    finisher: Finisher,
    holder: Option<Holder>,
    observer: Option<Box<ClaimObserver>>,
    health: Arc<WriteHealth>,
    /// How long a claim waits for the store while its writes succeed.
    claim_wait: Duration,
}

/// How long a claim waits for the store by default ([`DedupBuilder::claim_wait`]).
pub const CLAIM_WAIT: Duration = Duration::from_secs(3);

/// How long a claim waits for a store whose last write failed ([`WriteHealth`]): an outage is
/// answered "unavailable, try again" within a second, not after the caller's own timeout.
pub const FAILING_CLAIM_WAIT: Duration = Duration::from_secs(1);

impl std::fmt::Debug for Dedup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dedup")
            .field("store", &self.inner.store.engine())
            .field("holder", &self.inner.holder)
            .finish_non_exhaustive()
    }
}

impl Dedup {
    /// On an open store.
    pub fn new(store: AnyStore) -> Self {
        Self::build(store, None, None, CLAIM_WAIT)
    }

    /// Opens (creating or migrating if needed) the store `config` describes.
    ///
    /// # Errors
    /// [`OpenError`] naming the store.
    pub async fn open(config: &StoreConfig) -> Result<Self, OpenError> {
        Ok(Self::new(AnyStore::open(config).await?))
    }

    /// A `Dedup` with more than a store: a holder, a claim observer.
    pub fn builder(store: AnyStore) -> DedupBuilder {
        DedupBuilder {
            store,
            holder: None,
            observer: None,
            claim_wait: CLAIM_WAIT,
        }
    }

    fn build(
        store: AnyStore,
        holder: Option<Holder>,
        observer: Option<Box<ClaimObserver>>,
        claim_wait: Duration,
    ) -> Self {
        let health = Arc::new(WriteHealth::default());
        Self {
            inner: Arc::new(Inner {
                store,
                finisher: Finisher::new(health.clone()),
                holder,
                observer,
                health,
                claim_wait,
            }),
        }
    }

    /// What the store's recent writes said: failing since the last failed one, until one
    /// succeeds. Note here the writes made around this `Dedup` (an inbox's enqueue, its
    /// dispatcher's reports), so health checks see them too.
    pub fn health(&self) -> &WriteHealth {
        &self.inner.health
    }

    /// How long a claim waits for the store now: [`DedupBuilder::claim_wait`] while its writes
    /// succeed, [`FAILING_CLAIM_WAIT`] once one failed. Callers bounding their own writes (an
    /// inbox's enqueue) wait as long.
    pub fn store_wait(&self) -> Duration {
        if self.inner.health.is_failing() {
            FAILING_CLAIM_WAIT.min(self.inner.claim_wait)
        } else {
            self.inner.claim_wait
        }
    }

    /// The store beneath.
    pub fn store(&self) -> &AnyStore {
        &self.inner.store
    }

    /// The background retries of completions and releases the store did not take at once.
    pub fn finisher(&self) -> &Finisher {
        &self.inner.finisher
    }

    /// One claim, with this process's holder, heard by the observer. For callers that run the
    /// rest themselves (the HTTP claim API); most want [`Dedup::process_once`].
    ///
    /// Dropped before the store answers (a caller that gave up, a request that timed out while
    /// the store was slow), the claim is still seen through: if the store then answers
    /// `Claimed`, nobody holds the token, so it is released at once rather than left
    /// `processing` for a whole lease.
    ///
    /// # Errors
    /// The store's error; the claim then did not happen.
    pub async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        let req = match &self.inner.holder {
            Some(holder) => req.holder(holder.clone()),
            None => req,
        };
        self.claim_as_asked(req).await
    }

    /// One claim as [`Dedup::claim`] makes it, but without this process's holder: for claims it
    /// hands to someone else to process (the HTTP claim API's workers). Such a claim is not this
    /// process's to free when it starts again; it waits out its lease if its worker dies.
    ///
    /// # Errors
    /// The store's error; the claim then did not happen.
    pub async fn claim_for_another(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        self.claim_as_asked(req).await
    }

    async fn claim_as_asked(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        let started = Instant::now();
        let lease = req.lease;
        let store = self.inner.store.clone();
        let asked = req.clone();
        let mut pending = Unanswered {
            claim: Some(Box::pin(async move { store.claim(asked).await })),
            dedup: self.clone(),
            lease,
        };
        let wait = self.store_wait();
        let result = match tokio::time::timeout(wait, pending.answer()).await {
            Ok(answer) => answer,
            // Given up: `pending` goes on in the background, and releases a claim it wins.
            Err(_) => Err(StoreError::backend(
                format!(
                    "the store did not answer a claim within {}",
                    idemgate_core::Human(wait)
                ),
                crate::health::NoAnswer,
            )),
        };
        self.inner.health.note(&result);
        if let Some(observe) = &self.inner.observer {
            observe(&req, result.as_ref(), started.elapsed());
        }
        result
    }

    /// Processes the event `req` names at most once within its TTL (exactly once, as long as
    /// the process does not die between the work's success and the completion's commit):
    ///
    /// 1. claims it; a duplicate, an event in flight, a conflict or a rejected late duplicate
    ///    comes back as such, and `work` does not run;
    /// 2. runs `work` with the claim, renewing the lease every third of it while the work runs;
    /// 3. `Ok`: completes the claim (a store that fails then is retried in the background, and
    ///    meanwhile this `Dedup` answers the event's deliveries as duplicates itself) and answers
    ///    [`Once::Processed`]; `Err`: releases the claim so the next delivery is processed, and
    ///    answers [`ProcessError::Failed`]. A panic in `work`, or this future dropped while the
    ///    work runs (a client that hung up, a timeout), releases it too.
    ///
    /// In [`ClaimMode::OnReceipt`] the claim itself marks the event processed, so its other
    /// deliveries are duplicates while the work runs: nothing is renewed or completed, but a
    /// failure still releases the claim, so that the sender's retry runs the work again.
    ///
    /// # Errors
    /// [`ProcessError::Store`] when the claim could not be made; [`ProcessError::Failed`] with
    /// the work's error.
    #[tracing::instrument(name = "process_once", level = "debug", skip_all, fields(source = %req.key.source, event_id = %req.key.event_id))]
    pub async fn process_once<T, E, F, Fut>(
        &self,
        req: ClaimRequest,
        work: F,
    ) -> Result<Once<T>, ProcessError<E>>
    where
        F: FnOnce(Claimed) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        if self.inner.finisher.completing(&req.key) {
            return Ok(Once::Duplicate { first_seen: None });
        }
        let (mode, lease) = (req.mode, req.lease);
        let claimed = match self.claim(req).await.map_err(ProcessError::Store)? {
            ClaimOutcome::Claimed {
                token,
                expires_at,
                late_duplicate,
            } => Claimed {
                token,
                expires_at,
                late_duplicate,
            },
            ClaimOutcome::Duplicate { first_seen, .. } => {
                return Ok(Once::Duplicate {
                    first_seen: Some(first_seen),
                });
            }
            ClaimOutcome::LateDuplicate { first_seen, .. } => {
                return Ok(Once::LateDuplicate { first_seen });
            }
            ClaimOutcome::InFlight { retry_after } => return Ok(Once::InFlight { retry_after }),
            ClaimOutcome::Conflict { first_seen } => return Ok(Once::Conflict { first_seen }),
        };
        let token = claimed.token.clone();
        let guard = ReleaseOnDrop::new(self, &token, lease);
        let result = match mode {
            ClaimMode::OnSuccess => self.run_renewing(&token, lease, work(claimed)).await,
            // The record is done already: no lease to keep.
            ClaimMode::OnReceipt => work(claimed).await,
        };
        guard.disarm();
        let (what, outcome) = match result {
            // Marked on receipt: nothing left to complete.
            Ok(value) if mode == ClaimMode::OnReceipt => return Ok(Once::Processed(value)),
            Ok(value) => (Finish::Complete, Ok(Once::Processed(value))),
            Err(e) => (Finish::Release, Err(ProcessError::Failed(e))),
        };
        if let Err(e) = self
            .inner
            .finisher
            .finish(&self.inner.store, &token, what, lease, self.store_wait())
            .await
        {
            // The claim is no longer this token's: its lease lapsed and another delivery took it
            // over, or it expired. Nothing of ours to finish.
            tracing::warn!(
                source = %token.key.source,
                attempt = token.attempt,
                error = %ErrorChain(&e),
                "the claim was lost before it could be finished"
            );
        }
        outcome
    }

    /// Runs `work`, renewing `token`'s lease every third of `lease` until it ends.
    async fn run_renewing<T>(
        &self,
        token: &ClaimToken,
        lease: Duration,
        work: impl Future<Output = T>,
    ) -> T {
        let every = (lease / 3).max(Duration::from_millis(50));
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut renewing = true;
        tokio::pin!(work);
        loop {
            tokio::select! {
                result = &mut work => return result,
                _ = ticks.tick(), if renewing => {
                    let renewed = self.inner.store.renew(token, lease).await;
                    self.inner.health.note(&renewed);
                    match renewed {
                        Ok(_) => {}
                        Err(StoreError::StaleToken { .. }) => {
                            tracing::warn!(
                                source = %token.key.source,
                                attempt = token.attempt,
                                "the claim was taken over while its work ran"
                            );
                            renewing = false;
                        }
                        Err(e) => {
                            tracing::debug!(error = %ErrorChain(&e), "cannot renew a lease; trying again");
                        }
                    }
                }
            }
        }
    }

    /// Waits up to `grace` for completions and releases still being retried (see [`Finisher`]).
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.finisher.drain(grace).await;
    }
}

/// Builds a [`Dedup`] ([`Dedup::builder`]).
pub struct DedupBuilder {
    store: AnyStore,
    holder: Option<Holder>,
    observer: Option<Box<ClaimObserver>>,
    claim_wait: Duration,
}

impl std::fmt::Debug for DedupBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DedupBuilder")
            .field("store", &self.store.engine())
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl DedupBuilder {
    /// Records `holder` (this process's instance and boot, from
    /// [`Instances::register_boot`](crate::Instances::register_boot)) with every claim, so that a
    /// restart of the same instance frees its claims at once.
    #[must_use]
    pub fn holder(mut self, holder: Holder) -> Self {
        self.holder = Some(holder);
        self
    }

    /// Calls `observer` after every claim (metrics, logs).
    #[must_use]
    pub fn on_claim(
        mut self,
        observer: impl Fn(&ClaimRequest, Result<&ClaimOutcome, &StoreError>, Duration)
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.observer = Some(Box::new(observer));
        self
    }

    /// How long a claim waits for the store while its writes succeed (default [`CLAIM_WAIT`]);
    /// once one failed, a claim waits at most [`FAILING_CLAIM_WAIT`]. A claim given up on is
    /// seen through in the background, and released if it was won.
    #[must_use]
    pub fn claim_wait(mut self, wait: Duration) -> Self {
        self.claim_wait = wait;
        self
    }

    /// The `Dedup`.
    pub fn build(self) -> Dedup {
        Dedup::build(self.store, self.holder, self.observer, self.claim_wait)
    }
}

type ClaimFuture = std::pin::Pin<Box<dyn Future<Output = Result<ClaimOutcome, StoreError>> + Send>>;

/// A claim sent to the store and not yet answered. Dropped before its answer, it goes on in the
/// background, and a claim won that way (nobody will ever see its token) is released.
struct Unanswered {
    claim: Option<ClaimFuture>,
    dedup: Dedup,
    lease: Duration,
}

impl Unanswered {
    async fn answer(&mut self) -> Result<ClaimOutcome, StoreError> {
        let Some(claim) = self.claim.as_mut() else {
            return Err(StoreError::Closed);
        };
        let result = claim.await;
        self.claim = None;
        result
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let Some(claim) = self.claim.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let dedup = self.dedup.clone();
        let lease = self.lease;
        runtime.spawn(async move {
            if let Ok(ClaimOutcome::Claimed { token, .. }) = claim.await {
                tracing::info!(
                    source = %token.key.source,
                    attempt = token.attempt,
                    "releasing a claim whose caller left before the store answered"
                );
                dedup.inner.finisher.retry(
                    dedup.inner.store.clone(),
                    token,
                    Finish::Release,
                    lease,
                );
            }
        });
    }
}

/// Releases a claim if dropped before [`ReleaseOnDrop::disarm`]: the work panicked, or the
/// future running it was dropped.
struct ReleaseOnDrop {
    armed: Option<(Dedup, ClaimToken, Duration)>,
}

impl ReleaseOnDrop {
    fn new(dedup: &Dedup, token: &ClaimToken, lease: Duration) -> Self {
        Self {
            armed: Some((dedup.clone(), token.clone(), lease)),
        }
    }

    fn disarm(mut self) {
        self.armed = None;
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some((dedup, token, lease)) = self.armed.take() {
            tracing::info!(source = %token.key.source, attempt = token.attempt, "releasing the claim of work that did not finish");
            dedup
                .inner
                .finisher
                .retry(dedup.inner.store.clone(), token, Finish::Release, lease);
        }
    }
}
