//! [`StoreError`]: why a store operation failed, shared by the store traits and the sweeper.

use crate::key::Key;
use crate::result::RecordResult;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `complete`, `release` or `renew` with a token that no longer holds the claim: the lease
    /// was taken over, the claim was released, or the record expired.
    #[error(
        "stale claim token for {key} (attempt {attempt}): the claim was taken over, released or expired"
    )]
    StaleToken { key: Key, attempt: u32 },
    /// `release` of a claim its token completed: the event was processed, and a release would
    /// delete the record so the next delivery processed it again. Only a claim marked done on
    /// receipt ([`ClaimMode::OnReceipt`](crate::ClaimMode::OnReceipt)) may be released once
    /// done: that is its undo when the work fails.
    #[error(
        "the claim of {key} (attempt {attempt}) was completed: a completed claim cannot be released (the event was processed; releasing it would have the next delivery processed again)"
    )]
    Completed { key: Key, attempt: u32 },
    /// [`ClaimStore::complete_with`](crate::ClaimStore::complete_with) with a result whose
    /// [`size`](crate::StoredResult::size) is over the limit: the result was not stored, but the
    /// claim *was* completed (the event was processed), and its record keeps the size
    /// ([`RecordResult::Withheld`]) for its duplicates to hear.
    #[error(
        "the result of {key} is {size} bytes, over the limit of {limit}: the claim was completed without it"
    )]
    ResultTooLarge { key: Key, size: usize, limit: usize },
    /// The data on disk was written by a newer idemgate.
    #[error(
        "the store was migrated by a newer idemgate (schema version {found}, this build knows up to {known}); upgrade idemgate"
    )]
    NewerSchema { found: i64, known: i64 },
    /// The schema is older than this build: `idemgate migrate` brings it up to date (a tool that
    /// only reads does not migrate).
    #[error(
        "the store is at schema version {found}, this build needs {known}; run idemgate migrate"
    )]
    OlderSchema { found: i64, known: i64 },
    /// There is no store where one was expected (a tool that only reads does not create one);
    /// `what` names the place.
    #[error("{what}")]
    NoStore { what: String },
    /// [`Instances::register_boot`](crate::Instances::register_boot): the instance's latest boot
    /// is alive.
    #[error(
        "instance {} is held by a live process ({live}), whose liveness lease runs {} more and is renewed while it runs; give this process another instance name, or stop the other",
        live.holder.instance,
        crate::Human(live.remaining)
    )]
    InstanceLive { live: Box<crate::store::LiveBoot> },
    /// [`Instances::heartbeat`](crate::Instances::heartbeat): a newer boot of the instance
    /// registered after this one's liveness lease lapsed.
    #[error(
        "boot {} of instance {} was superseded by boot {by}: its liveness lease lapsed and another process started under the name",
        holder.boot,
        holder.instance
    )]
    Superseded {
        holder: crate::claim::Holder,
        by: u64,
    },
    /// The store is closed or shutting down.
    #[error("the store is closed")]
    Closed,
    /// The store does not have what was asked of it ([`crate::object::Capabilities`]): an inbox
    /// on the Redis store, a timeline on a store of a caller's own, ...
    #[error("the {engine} store does not support {capability}")]
    Unsupported {
        engine: &'static str,
        capability: &'static str,
    },
    /// The engine failed; `context` says what idemgate was doing.
    #[error("{context}")]
    Backend {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl StoreError {
    /// Wraps an engine error with what was being done.
    pub fn backend(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Backend {
            context: context.into(),
            source: source.into(),
        }
    }
}

impl crate::result::StoredResult {
    /// What [`ClaimStore::complete_with`](crate::ClaimStore::complete_with) keeps of it under
    /// `limit`, and what it answers once the completion is written: the result itself, or, when
    /// its size is over `limit`, only its size and [`StoreError::ResultTooLarge`].
    pub fn judge(&self, key: &Key, limit: usize) -> (RecordResult, Result<(), StoreError>) {
        let size = self.size();
        if size > limit {
            (
                RecordResult::Withheld { size },
                Err(StoreError::ResultTooLarge {
                    key: key.clone(),
                    size,
                    limit,
                }),
            )
        } else {
            (RecordResult::Stored(self.clone()), Ok(()))
        }
    }
}

#[cfg(test)]
mod result_tests {
    use super::*;
    use crate::result::StoredResult;

    fn sample() -> StoredResult {
        StoredResult::new(201)
            .header("content-type", "application/json")
            .body(b"{}".to_vec())
    }

    #[test]
    fn a_result_over_the_limit_keeps_only_its_size() {
        let key = Key::parse("api", "k").unwrap();
        let r = sample();
        let (kept, answer) = r.judge(&key, r.size());
        assert_eq!(
            (kept, answer.is_ok()),
            (RecordResult::Stored(r.clone()), true)
        );
        let (kept, answer) = r.judge(&key, r.size() - 1);
        assert_eq!(kept, RecordResult::Withheld { size: r.size() });
        assert!(
            matches!(answer, Err(StoreError::ResultTooLarge { size, limit, .. }) if size == r.size() && limit == r.size() - 1),
            "{answer:?}"
        );
    }
}
