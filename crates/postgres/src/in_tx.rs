//! Claims inside the caller's own transaction: [`PgStore::claim_in`] and
//! [`PgStore::complete_in`] (or [`PgStore::complete_with_in`], keeping the work's result), so a worker claims an event and writes its own rows in one atomic
//! step (the pattern of a transactional outbox, or a queue in the same database). Committed,
//! the claim, its completion and the worker's rows are there together; rolled back, none are,
//! and the event is claimed afresh by its next delivery.
//!
//! Inside the transaction the record's row is locked from the claim to the commit: another
//! claim of the same event waits for it, then answers as the committed state says (a duplicate
//! once completed), so no one else sees the claim in flight. The claim is decided by the same
//! statement as every other PostgreSQL claim (`claim_batch.sql`, with one element), by the
//! database's clock.

use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimToken, StoreError, StoredResult};
use tokio_postgres::Transaction;

use crate::batch::{CLAIM_BATCH, ClaimArrays, FINISH_BATCH, by_element};
use crate::error::PgError;
use crate::row::{self, outcome_of};
use crate::store::{COMPLETE_KEEPING, Keeping, PgStore, stale};

impl PgStore {
    /// Claims `req` inside `tx`, the caller's transaction on a connection to this store's
    /// database whose `search_path` puts this store's schema first (a connection from
    /// [`crate::PgConfig::connection_config`] does). Nothing is durable until the caller
    /// commits; a rollback leaves the event unclaimed.
    ///
    /// Keep the transaction short: until it ends, the event's record is locked, and another
    /// delivery of the same event waits for it, in a batch of the store's own claims whose
    /// other claims wait with it.
    ///
    /// # Errors
    /// [`StoreError::Backend`]: the statement failed (the caller's transaction is then aborted,
    /// as any failed statement leaves it), or the connection looks in another schema first.
    pub async fn claim_in(
        &self,
        tx: &Transaction<'_>,
        req: ClaimRequest,
    ) -> Result<ClaimOutcome, StoreError> {
        const CONTEXT: &str = "claiming inside the caller's transaction";
        self.check_schema(tx).await?;
        let arrays = ClaimArrays::of(std::iter::once((&req, idemgate_core::machine::nonce())));
        let rows = tx
            .query(CLAIM_BATCH, &arrays.params())
            .await
            .map_err(PgError::db(CONTEXT))?;
        let mut outcomes = by_element(&rows, 1, CONTEXT, "claims", |_, row| {
            outcome_of(&req.key, row)
        })?;
        Ok(outcomes.remove(0))
    }

    /// Completes `token`'s claim inside `tx`: done once the caller commits.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when the claim is no longer this token's; otherwise as
    /// [`claim_in`](Self::claim_in).
    pub async fn complete_in(
        &self,
        tx: &Transaction<'_>,
        token: &ClaimToken,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "completing a claim inside the caller's transaction";
        let Ok(attempt) = i32::try_from(token.attempt) else {
            return Err(stale(token));
        };
        self.check_schema(tx).await?;
        let rows = tx
            .query(
                FINISH_BATCH,
                &[
                    &vec![token.key.source.as_str()],
                    &vec![token.key.event_id.as_str()],
                    &vec![attempt],
                    // The nonce travels as bigint, bit for bit.
                    &vec![token.nonce as i64],
                    &vec![false],
                ],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        let held: Vec<Option<bool>> = by_element(&rows, 1, CONTEXT, "completions", |_, row| {
            row::get(row, "r_held", CONTEXT)
        })?;
        match held[0] {
            Some(true) => Ok(()),
            _ => Err(stale(token)),
        }
    }

    /// Completes `token`'s claim inside `tx` with the work's `result` kept beside the record, as
    /// [`ClaimStore::complete_with`](idemgate_core::ClaimStore::complete_with) does: done, and
    /// the result stored, once the caller commits. A result over `limit` is not stored; the
    /// claim is completed without it (once the caller commits), and the answer is
    /// [`StoreError::ResultTooLarge`]: commit all the same, the work was done.
    ///
    /// # Errors
    /// [`StoreError::StaleToken`] when the claim is no longer this token's (nothing written);
    /// [`StoreError::ResultTooLarge`] as above; otherwise as [`claim_in`](Self::claim_in).
    pub async fn complete_with_in(
        &self,
        tx: &Transaction<'_>,
        token: &ClaimToken,
        result: &StoredResult,
        limit: usize,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "completing a claim with its result inside the caller's transaction";
        let (kept, answer) = result.judge(&token.key, limit);
        let Some(keep) = Keeping::of(token, &kept) else {
            // A result is always kept, stored or withheld.
            return self.complete_in(tx, token).await.and(answer);
        };
        self.check_schema(tx).await?;
        let row = tx
            .query_one(COMPLETE_KEEPING, &keep.params())
            .await
            .map_err(PgError::db(CONTEXT))?;
        keep.answer(token, &row, CONTEXT)?;
        answer
    }

    /// Refuses a transaction whose connection does not look in this store's schema first: its
    /// statements would read and write another schema's tables.
    async fn check_schema(&self, tx: &Transaction<'_>) -> Result<(), PgError> {
        const CONTEXT: &str = "reading the transaction's schema";
        let row = tx
            .query_one("SELECT current_schema() AS schema", &[])
            .await
            .map_err(PgError::db(CONTEXT))?;
        let found: Option<String> = row::get(&row, "schema", CONTEXT)?;
        let schema = &self.config().schema;
        if found.as_deref() == Some(schema.as_str()) {
            Ok(())
        } else {
            Err(PgError::SearchPath {
                schema: schema.clone(),
                found: found.unwrap_or_default(),
            })
        }
    }
}
