//! Finishing a claim: `complete` after the downstream took a delivery, `release` after it did not,
//! retried in the background until the store takes them.
//!
//! A forwarded event must never be forwarded again because its completion was lost. When the
//! store fails between the downstream's 2xx and `complete` (a database restart, a dropped
//! connection), the sender is still told 200 `forwarded` (the downstream has the event; a retry
//! would only be answered `in_flight`), and the completion is retried here, with a backoff, until
//! the store takes it. Between tries the claim's lease is renewed whenever the store answers, so
//! no other delivery can take the claim over and forward the event again while the completion is
//! pending. A release that fails is retried the same way, so that no record is left `processing`
//! once the store is back.
//!
//! While a completion is pending, this gateway answers every further delivery of the event as a
//! duplicate itself, without asking the store: the event was processed, and a store that has
//! just come back must not hand the claim (whose lease may have lapsed during the outage) to one
//! of those deliveries before the retry lands. Another gateway on the same store has no such
//! knowledge: there the lease is what keeps the claim, so keep leases longer than the store
//! outages to be ridden out.
//!
//! The retries run on a [`TaskTracker`] that shutdown waits for (up to a bound): a completion
//! still pending when the process exits is logged, and the claim's lease (or, after a restart of
//! the same instance, the instance recovery) decides what happens to the event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_core::store::ClaimStore;
use idemgate_core::{ClaimToken, Key, StoreError, StoredResult};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ErrorChain;
use crate::health::WriteHealth;
use crate::store::AnyStore;

/// What to do with a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The event was processed: mark the record done.
    Complete,
    /// Processing failed: delete the record so the sender's retry is processed.
    Release,
}

impl Finish {
    fn name(self) -> &'static str {
        match self {
            Self::Complete => "completion",
            Self::Release => "release",
        }
    }
}

/// The first pause between tries, doubled after each failure up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// The background retries of completions and releases.
#[derive(Debug, Default)]
pub struct Finisher {
    /// Where every completion's and release's outcome is noted.
    health: Arc<WriteHealth>,
    tasks: TaskTracker,
    /// Cancelled when shutdown gives up waiting.
    abandon: CancellationToken,
    /// Events whose completion is under way (its first try, or its retries), with how many
    /// guards hold each.
    completing: Arc<Mutex<HashMap<Key, usize>>>,
}

/// Takes a key off the pending completions when its last guard goes, however it ends.
struct Completing {
    set: Arc<Mutex<HashMap<Key, usize>>>,
    key: Key,
}

impl Drop for Completing {
    fn drop(&mut self) {
        let mut set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = set.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                set.remove(&self.key);
            }
        }
    }
}

impl Finisher {
    /// A finisher noting every outcome in `health`.
    pub fn new(health: Arc<WriteHealth>) -> Self {
        Self {
            health,
            ..Self::default()
        }
    }

    /// Completes or releases `token` now, waiting for the store at most `wait`; when the store
    /// fails or does not answer in time, keeps trying in the background (renewing the lease by
    /// `lease` between tries) and returns. `Ok(false)` means a retry is pending.
    ///
    /// A completion counts as pending from its first try: while that try waits on a slow store,
    /// [`Finisher::completing`] already answers the event's other deliveries, so none of them
    /// reaches the store, takes a lease that lapsed meanwhile over, and processes the event
    /// again.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`]: the claim is no longer this token's (taken over, released or
    /// expired); nothing is retried.
    pub async fn finish(
        &self,
        store: &AnyStore,
        token: &ClaimToken,
        what: Finish,
        lease: Duration,
        wait: Duration,
    ) -> Result<bool, StoreError> {
        self.finish_work(store, token, Work { what, result: None }, lease, wait)
            .await
    }

    /// Completes `token`'s claim keeping `result` ([`ClaimStore::complete_with`] under
    /// `limit`), as [`finish`](Self::finish) completes one: now, waiting for the store at most
    /// `wait`, else in the background with the same result, until the store takes it.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] as [`finish`](Self::finish) (nothing kept);
    /// [`StoreError::ResultTooLarge`]: the claim was completed without the result (not retried).
    pub async fn complete_with(
        &self,
        store: &AnyStore,
        token: &ClaimToken,
        result: StoredResult,
        limit: usize,
        lease: Duration,
        wait: Duration,
    ) -> Result<bool, StoreError> {
        let work = Work {
            what: Finish::Complete,
            result: Some((Arc::new(result), limit)),
        };
        self.finish_work(store, token, work, lease, wait).await
    }

    async fn finish_work(
        &self,
        store: &AnyStore,
        token: &ClaimToken,
        work: Work,
        lease: Duration,
        wait: Duration,
    ) -> Result<bool, StoreError> {
        let what = work.what;
        let pending = (what == Finish::Complete).then(|| self.mark_completing(&token.key));
        let tried = tokio::time::timeout(wait, apply(store, token, &work, &self.health))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::backend(
                    format!("no answer within {}", idemgate_core::Human(wait)),
                    crate::health::NoAnswer,
                ))
            });
        match tried {
            Ok(()) => Ok(true),
            Err(e @ (StoreError::StaleToken { .. } | StoreError::ResultTooLarge { .. })) => Err(e),
            Err(e) => {
                tracing::warn!(
                    source = %token.key.source,
                    attempt = token.attempt,
                    error = %ErrorChain(&e),
                    "the store did not take a claim's {}; retrying in the background",
                    what.name()
                );
                // The mark goes with the retry, which takes its own first.
                self.retry_work(store.clone(), token.clone(), work, lease);
                drop(pending);
                Ok(false)
            }
        }
    }

    /// Marks `key`'s completion pending until the guard is dropped. Marks nest: a key stays
    /// marked while any of its guards lives.
    fn mark_completing(&self, key: &Key) -> Completing {
        *self
            .completing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_insert(0) += 1;
        Completing {
            set: self.completing.clone(),
            key: key.clone(),
        }
    }

    /// Starts the background retry of `what` for `token` without trying first (a request was
    /// dropped and its claim must be released).
    pub fn retry(&self, store: AnyStore, token: ClaimToken, what: Finish, lease: Duration) {
        self.retry_work(store, token, Work { what, result: None }, lease);
    }

    fn retry_work(&self, store: AnyStore, token: ClaimToken, work: Work, lease: Duration) {
        let what = work.what;
        let abandon = self.abandon.clone();
        let health = self.health.clone();
        let completing = (what == Finish::Complete).then(|| self.mark_completing(&token.key));
        self.tasks.spawn(async move {
            let _completing = completing;
            let mut pause = FIRST_PAUSE;
            let mut tries = 0u32;
            loop {
                tokio::select! {
                    () = abandon.cancelled() => {
                        tracing::error!(
                            source = %token.key.source,
                            attempt = token.attempt,
                            tries,
                            "shutting down with a claim's {} still not taken by the store",
                            what.name()
                        );
                        return;
                    }
                    () = tokio::time::sleep(pause) => {}
                }
                tries += 1;
                match apply(&store, &token, &work, &health).await {
                    // Completed, without its result (too large): nothing to try again.
                    Ok(()) | Err(StoreError::ResultTooLarge { .. }) => {
                        tracing::info!(
                            source = %token.key.source,
                            attempt = token.attempt,
                            tries,
                            "the store took a claim's {} after retrying",
                            what.name()
                        );
                        return;
                    }
                    Err(StoreError::StaleToken { .. }) => {
                        tracing::warn!(
                            source = %token.key.source,
                            attempt = token.attempt,
                            "gave up a claim's {}: the claim was taken over, released or expired",
                            what.name()
                        );
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %ErrorChain(&e), tries, "retry failed");
                        // Keep the claim ours whenever the store answers at all.
                        if what == Finish::Complete {
                            let _ = store.renew(&token, lease).await;
                        }
                    }
                }
                pause = (pause * 2).min(MAX_PAUSE);
            }
        });
    }

    /// Waits up to `grace` for the pending retries, then abandons the rest (each logged).
    pub async fn drain(&self, grace: Duration) {
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            self.abandon.cancel();
            self.tasks.wait().await;
        }
    }

    /// Whether `key`'s completion is being retried: the event was processed.
    pub fn completing(&self, key: &Key) -> bool {
        self.completing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(key)
    }

    /// Retries not yet taken by the store.
    pub fn pending(&self) -> usize {
        self.tasks.len()
    }
}

/// A completion (with the result to keep, and its limit) or a release, as tried and retried.
#[derive(Debug, Clone)]
struct Work {
    what: Finish,
    result: Option<(Arc<StoredResult>, usize)>,
}

async fn apply(
    store: &AnyStore,
    token: &ClaimToken,
    work: &Work,
    health: &WriteHealth,
) -> Result<(), StoreError> {
    let result = match (work.what, &work.result) {
        (Finish::Complete, Some((result, limit))) => {
            store.complete_with(token, result, *limit).await
        }
        (Finish::Complete, None) => store.complete(token).await,
        (Finish::Release, _) => store.release(token).await,
    };
    health.note(&result);
    result
}
