//! [`Dedup`]: claim, process, complete or release, with everything in between handled.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_core::store::ClaimStore;
use idemgate_core::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimToken, Holder, Key, RESULT_LIMIT, RecordResult,
    RecordState, StoreError, StoredResult, Timestamp,
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
        /// What the first processing kept of its result, read by
        /// [`Dedup::process_once_storing`] from the very record the store answered about:
        /// `Some(`[`RecordResult::Stored`]`)`, byte for byte; `Some(`[`RecordResult::Withheld`]`)`
        /// when it was over the limit (the event was processed, its result not kept);
        /// `Some(`[`RecordResult::None`]`)` when it was completed without one (by
        /// [`Dedup::process_once`], or marked done on receipt). `None` when not read:
        /// [`Dedup::process_once`] reads none; nor does an answer this process gives by itself
        /// (`first_seen` `None`), or one whose record expired before it could be read.
        result: Option<RecordResult>,
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

impl<T> Once<T> {
    /// The same answer with `f` applied to what the work returned.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Once<U> {
        match self {
            Self::Processed(t) => Once::Processed(f(t)),
            Self::Duplicate { first_seen, result } => Once::Duplicate { first_seen, result },
            Self::LateDuplicate { first_seen } => Once::LateDuplicate { first_seen },
            Self::InFlight { retry_after } => Once::InFlight { retry_after },
            Self::Conflict { first_seen } => Once::Conflict { first_seen },
        }
    }
}

/// Why [`Dedup::process_once`] did not process an event.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError<E> {
    /// The claim could not be made (the store failed): nothing ran; try again later. Or, for
    /// [`Dedup::process_once_storing`], a duplicate's result could not be read.
    #[error("the claim could not be made, or a duplicate's result read")]
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

/// Whether a duplicate's result is read ([`Dedup::process_once_storing`]) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Results {
    Ignored,
    Kept,
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
    /// The largest result [`Dedup::process_once_storing`] keeps.
    result_limit: usize,
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
        Self::build(store, None, None, CLAIM_WAIT, RESULT_LIMIT)
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
            result_limit: RESULT_LIMIT,
        }
    }

    fn build(
        store: AnyStore,
        holder: Option<Holder>,
        observer: Option<Box<ClaimObserver>>,
        claim_wait: Duration,
        result_limit: usize,
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
                result_limit,
            }),
        }
    }

    /// The largest result [`Dedup::process_once_storing`] keeps, in
    /// [`StoredResult::size`] bytes ([`DedupBuilder::result_limit`]; [`RESULT_LIMIT`], 64 KiB,
    /// by default).
    pub fn result_limit(&self) -> usize {
        self.inner.result_limit
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
    /// It keeps no result, and reads none for a duplicate (its `result` is `None`):
    /// [`Dedup::process_once_storing`] does both.
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
        let once = self
            .once(req, Results::Ignored, |claimed| async move {
                work(claimed).await.map(|t| (t, None))
            })
            .await?;
        Ok(once.map(|(t, _)| t))
    }

    /// [`Dedup::process_once`], keeping the work's result for the event's duplicates: `work`
    /// returns its value and a [`StoredResult`] (a status, the headers to replay, a body), and
    /// the result is kept beside the record by the completion itself, in the same atomic step
    /// ([`ClaimStore::complete_with`]), for as long as the record lives. A duplicate reads it
    /// back, byte for byte, in [`Once::Duplicate::result`], from the very record the store
    /// answered about (a completed record never changes until it expires, and a later record of
    /// the event has another expiry, so a result is never another record's).
    ///
    /// A result over [`Dedup::result_limit`] is not kept: the claim is completed all the same
    /// (the work was done), the answer is still [`Once::Processed`] (the refusal is logged at
    /// warn), and its duplicates get [`RecordResult::Withheld`] with its size. Check
    /// [`StoredResult::size`] in `work` to choose another answer for it. In
    /// [`ClaimMode::OnReceipt`] there is no completion, so no result is kept: its duplicates get
    /// [`RecordResult::None`].
    ///
    /// # Errors
    /// As [`Dedup::process_once`], and [`ProcessError::Store`] when a duplicate's result cannot
    /// be read.
    #[tracing::instrument(name = "process_once", level = "debug", skip_all, fields(source = %req.key.source, event_id = %req.key.event_id))]
    pub async fn process_once_storing<T, E, F, Fut>(
        &self,
        req: ClaimRequest,
        work: F,
    ) -> Result<Once<T>, ProcessError<E>>
    where
        F: FnOnce(Claimed) -> Fut,
        Fut: Future<Output = Result<(T, StoredResult), E>>,
    {
        let once = self
            .once(req, Results::Kept, |claimed| async move {
                work(claimed).await.map(|(t, r)| (t, Some(r)))
            })
            .await?;
        Ok(once.map(|(t, _)| t))
    }

    /// What both `process_once`s do: `results` says whether a duplicate's result is read.
    async fn once<T, E, F, Fut>(
        &self,
        req: ClaimRequest,
        results: Results,
        work: F,
    ) -> Result<Once<(T, Option<StoredResult>)>, ProcessError<E>>
    where
        F: FnOnce(Claimed) -> Fut,
        Fut: Future<Output = Result<(T, Option<StoredResult>), E>>,
    {
        if self.inner.finisher.completing(&req.key) {
            return Ok(Once::Duplicate {
                first_seen: None,
                result: None,
            });
        }
        let (mode, lease, key) = (req.mode, req.lease, req.key.clone());
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
            ClaimOutcome::Duplicate {
                first_seen,
                expires_at,
                ..
            } => {
                let result = match results {
                    Results::Ignored => None,
                    Results::Kept => self
                        .result_of(&key, expires_at)
                        .await
                        .map_err(ProcessError::Store)?,
                };
                return Ok(Once::Duplicate {
                    first_seen: Some(first_seen),
                    result,
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
        let (kept, finished) = match result {
            // Marked on receipt: nothing left to complete (and no completion to keep a result).
            Ok(value) if mode == ClaimMode::OnReceipt => return Ok(Once::Processed(value)),
            Ok((value, kept)) => {
                let finished = match &kept {
                    Some(r) => {
                        self.inner
                            .finisher
                            .complete_with(
                                &self.inner.store,
                                &token,
                                r.clone(),
                                self.inner.result_limit,
                                lease,
                                self.store_wait(),
                            )
                            .await
                    }
                    None => self.finish(&token, Finish::Complete, lease).await,
                };
                (Ok(Once::Processed((value, kept))), finished)
            }
            Err(e) => (
                Err(ProcessError::Failed(e)),
                self.finish(&token, Finish::Release, lease).await,
            ),
        };
        match finished {
            Ok(_) => {}
            Err(StoreError::ResultTooLarge { size, limit, .. }) => tracing::warn!(
                source = %token.key.source,
                attempt = token.attempt,
                size,
                limit,
                "the work's result is over the limit: the claim was completed without it, and its duplicates hear only its size"
            ),
            // The claim is no longer this token's: its lease lapsed and another delivery took it
            // over, or it expired. Nothing of ours to finish.
            Err(e) => tracing::warn!(
                source = %token.key.source,
                attempt = token.attempt,
                error = %ErrorChain(&e),
                "the claim was lost before it could be finished"
            ),
        }
        kept
    }

    async fn finish(
        &self,
        token: &ClaimToken,
        what: Finish,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        self.inner
            .finisher
            .finish(&self.inner.store, token, what, lease, self.store_wait())
            .await
    }

    /// The result the live record of `key` that expires at `expires_at` keeps: that is the
    /// record a duplicate was answered about (a later record of the key expires later). `None`
    /// when it is gone (it expired, or was released after being marked on receipt) or replaced.
    async fn result_of(
        &self,
        key: &Key,
        expires_at: Timestamp,
    ) -> Result<Option<RecordResult>, StoreError> {
        let wait = self.store_wait();
        let record = tokio::time::timeout(wait, self.inner.store.record(key))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::backend(
                    format!(
                        "the store did not answer a result's read within {}",
                        idemgate_core::Human(wait)
                    ),
                    crate::health::NoAnswer,
                ))
            })?;
        Ok(record
            .filter(|r| r.expires_at == expires_at && r.state == RecordState::Done)
            .map(|r| r.result))
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
    result_limit: usize,
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

    /// The largest result [`Dedup::process_once_storing`] keeps, in [`StoredResult::size`]
    /// bytes (default [`RESULT_LIMIT`], 64 KiB). A larger one is not kept: the claim is
    /// completed without it, and its duplicates hear [`RecordResult::Withheld`] with its size.
    #[must_use]
    pub fn result_limit(mut self, bytes: usize) -> Self {
        self.result_limit = bytes;
        self
    }

    /// The `Dedup`.
    pub fn build(self) -> Dedup {
        Dedup::build(
            self.store,
            self.holder,
            self.observer,
            self.claim_wait,
            self.result_limit,
        )
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
