//! The inbox on PostgreSQL: [`Inbox`] for [`PgStore`].
//!
//! An enqueue is one call of `enqueue_claim` (`sql/migrations/0003_inbox.sql`): the claim of
//! `claim_one`, done at once, and the queue item when the claim is won, in one transaction. It
//! does not go through the group-commit batcher: the batch function knows nothing of items.
//! Every other operation is one statement of `sql/inbox_*.sql` (one implicit transaction, by the
//! database's clock, `now()`): a take is `FOR UPDATE SKIP LOCKED`, so several gateways on one
//! schema share its queue and no item goes to two of them; a report (`delivered`, `retry_later`,
//! `dead_letter`) changes the item only while it is still the attempt the take gave, and writes
//! its attempt log and history row in the same statement.

use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::time::Duration;

use idemgate_core::inbox::{
    DeadLetter, Failure, Inbox, InboxStats, ItemRef, QueueEntry, QueuedItem, ReplayFilter, Taken,
};
use idemgate_core::{ClaimOutcome, ClaimRequest, EventId, Holder, Key, SourceName, StoreError};
use tokio_postgres::types::ToSql;

use crate::error::PgError;
use crate::row::{self, count, millis};
use crate::store::PgStore;

const ENQUEUE: &str = include_str!("../sql/enqueue.sql");
const REQUEUE: &str = include_str!("../sql/requeue.sql");
const TAKE: &str = include_str!("../sql/inbox_take.sql");
const DELIVERED: &str = include_str!("../sql/inbox_delivered.sql");
const RETRY_LATER: &str = include_str!("../sql/inbox_retry_later.sql");
const DEAD_LETTER: &str = include_str!("../sql/inbox_dead_letter.sql");
const DEAD_LETTERS: &str = include_str!("../sql/inbox_dead_letters.sql");
const DEAD_LETTERS_OF_EVENT: &str = include_str!("../sql/inbox_dead_letters_of_event.sql");
const REPLAY: &str = include_str!("../sql/inbox_replay.sql");
const REPLAY_EVENT: &str = include_str!("../sql/inbox_replay_event.sql");

/// The statement of `filter`: one source's event through `inbox_key`, or the general one.
fn of_event(filter: &ReplayFilter, one: &'static str, general: &'static str) -> &'static str {
    if filter.source.is_some() && filter.event_id.is_some() {
        one
    } else {
        general
    }
}
const PURGE: &str = include_str!("../sql/inbox_purge.sql");
const STATS: &str = include_str!("../sql/inbox_stats.sql");
const QUEUED: &str = include_str!("../sql/inbox_queued.sql");

/// How many times an enqueue that PostgreSQL aborted to break a deadlock is sent again.
const DEADLOCK_RETRIES: usize = 3;

/// A report on `item` that changed nothing: taken again, reported already, freed by its holder's
/// next boot, replayed, or gone.
fn stale(item: &ItemRef) -> StoreError {
    StoreError::StaleToken {
        key: item.key.clone(),
        attempt: item.attempt,
    }
}

fn status_of(failure: &Failure) -> Option<i32> {
    failure.status.map(i32::from)
}

impl PgStore {
    /// Runs `sql` (one statement) with `params`; its rows.
    async fn inbox_query(
        &self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        context: &'static str,
    ) -> Result<Vec<tokio_postgres::Row>, PgError> {
        let client = self.db().client().await?;
        let stmt = client
            .prepare_cached(sql)
            .await
            .map_err(PgError::db(context))?;
        client
            .query(&stmt, params)
            .await
            .map_err(PgError::db(context))
    }

    /// One report on a taken item (`sql` answers a row when it changed the item, none when the
    /// report is stale). Creates a history partition the report needed, and sends it again.
    async fn report(
        &self,
        item: &ItemRef,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        context: &'static str,
    ) -> Result<(), StoreError> {
        let rows = self
            .db()
            .with_partitions(0, || self.inbox_query(sql, params, context))
            .await?;
        if rows.is_empty() {
            Err(stale(item))
        } else {
            Ok(())
        }
    }

    async fn enqueue_once(
        &self,
        req: &ClaimRequest,
        nonce: i64,
        item: &QueuedItem,
        forced: Option<&str>,
    ) -> Result<ClaimOutcome, PgError> {
        const CONTEXT: &str = "claiming and queueing an inbox delivery";
        let (names, values): (Vec<&str>, Vec<&str>) = item
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .unzip();
        let source = req.key.source.as_str();
        let event_id = req.key.event_id.as_str();
        let fingerprint = req.fingerprint.as_ref().map(|f| f.as_bytes().as_slice());
        let (lease, ttl) = (millis(req.lease), millis(req.ttl));
        let late = req.late_duplicates.as_str();
        let horizon = millis(req.late_duplicate_horizon());
        let body = item.body.as_slice();
        let content_type = item.content_type.as_deref();
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &source,
            &event_id,
            &fingerprint,
            &lease,
            &ttl,
            &nonce,
            &late,
            &body,
            &content_type,
            &names,
            &values,
            &horizon,
        ];
        let sql = match &forced {
            None => ENQUEUE,
            Some(reason) => {
                params.push(reason);
                REQUEUE
            }
        };
        let rows = self
            .db()
            .with_partitions(u64::try_from(ttl).unwrap_or(0), || {
                self.inbox_query(sql, &params, CONTEXT)
            })
            .await?;
        let row = rows.first().ok_or_else(|| PgError::Unexpected {
            context: CONTEXT,
            what: "no answer".to_owned(),
        })?;
        let outcome = row::outcome_of(&req.key, row)?;
        let queued: Option<i64> = row::get(row, "r_item", CONTEXT)?;
        if matches!(outcome, ClaimOutcome::Claimed { .. }) != queued.is_some() {
            return Err(PgError::Unexpected {
                context: CONTEXT,
                what: format!("outcome {outcome:?} with queue item {queued:?}"),
            });
        }
        Ok(outcome)
    }
}

impl Inbox for PgStore {
    /// One call of `enqueue_claim`: `claim_one` in mark-on-receipt mode (with the key's advisory
    /// lock first in partitioned mode, as a claim batch takes it), then the item insert when the
    /// claim is won, in one transaction. Sent again after a deadlock (nothing was written).
    #[tracing::instrument(level = "debug", skip_all, fields(source = %req.key.source, event_id = %req.key.event_id))]
    async fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> Result<ClaimOutcome, StoreError> {
        let ttl = u64::try_from(millis(req.ttl)).unwrap_or(0);
        self.db().max_ttl_ms.fetch_max(ttl, Ordering::Relaxed);
        // Bit for bit: the nonce is a u64 kept in a bigint.
        let nonce = idemgate_core::machine::nonce() as i64;
        let mut tries = 0;
        loop {
            match self.enqueue_once(&req, nonce, &item, None).await {
                Err(e) if e.is_deadlock() && tries < DEADLOCK_RETRIES => {
                    tries += 1;
                    tracing::debug!(tries, "enqueue deadlocked; sending again");
                }
                other => return Ok(other?),
            }
        }
    }

    /// As `enqueue`, in one statement with the forced item and the `replayed` row.
    #[tracing::instrument(level = "debug", skip_all, fields(source = %req.key.source, event_id = %req.key.event_id))]
    async fn requeue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        let ttl = u64::try_from(millis(req.ttl)).unwrap_or(0);
        self.db().max_ttl_ms.fetch_max(ttl, Ordering::Relaxed);
        let nonce = idemgate_core::machine::nonce() as i64;
        let mut tries = 0;
        loop {
            match self.enqueue_once(&req, nonce, &item, Some(reason)).await {
                Err(e) if e.is_deadlock() && tries < DEADLOCK_RETRIES => {
                    tries += 1;
                    tracing::debug!(tries, "requeue deadlocked; sending again");
                }
                other => return Ok(other?),
            }
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %source, limit = limit.get()))]
    async fn take(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&Holder>,
    ) -> Result<Vec<Taken>, StoreError> {
        const CONTEXT: &str = "taking inbox items";
        let rows = self
            .inbox_query(
                TAKE,
                &[
                    &source.as_str(),
                    &i64::from(limit.get()),
                    &millis(lease),
                    &holder.map(|h| h.instance.as_str()),
                    // Bit for bit, like the claims' holders.
                    &holder.map(|h| h.boot as i64),
                ],
                CONTEXT,
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| row::taken_of(r, CONTEXT))
            .collect::<Result<_, _>>()?)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %item.key.source, event_id = %item.key.event_id, item = item.id, attempt = item.attempt))]
    async fn delivered(&self, item: ItemRef) -> Result<(), StoreError> {
        let Ok(attempt) = i32::try_from(item.attempt) else {
            return Err(stale(&item));
        };
        self.report(
            &item,
            DELIVERED,
            &[&item.id, &attempt],
            "removing a delivered inbox item",
        )
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %item.key.source, event_id = %item.key.event_id, item = item.id, attempt = item.attempt))]
    async fn retry_later(
        &self,
        item: ItemRef,
        failure: &Failure,
        delay: Duration,
    ) -> Result<(), StoreError> {
        let Ok(attempt) = i32::try_from(item.attempt) else {
            return Err(stale(&item));
        };
        self.report(
            &item,
            RETRY_LATER,
            &[
                &item.id,
                &attempt,
                &millis(delay),
                &status_of(failure),
                &failure.error.as_str(),
            ],
            "scheduling an inbox item's retry",
        )
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %item.key.source, event_id = %item.key.event_id, item = item.id, attempt = item.attempt))]
    async fn dead_letter(&self, item: ItemRef, failure: &Failure) -> Result<(), StoreError> {
        let Ok(attempt) = i32::try_from(item.attempt) else {
            return Err(stale(&item));
        };
        self.report(
            &item,
            DEAD_LETTER,
            &[
                &item.id,
                &attempt,
                &status_of(failure),
                &failure.error.as_str(),
            ],
            "dead-lettering an inbox item",
        )
        .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = filter.source.as_ref().map(SourceName::as_str), limit = limit.get()))]
    async fn dead_letters(
        &self,
        filter: &ReplayFilter,
        limit: NonZeroU32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        const CONTEXT: &str = "reading dead letters";
        let source = filter.source.as_ref().map(SourceName::as_str);
        let since = filter.since.map(millis);
        let event_id = filter.event_id.as_ref().map(EventId::as_str);
        let rows = self
            .inbox_query(
                of_event(filter, DEAD_LETTERS_OF_EVENT, DEAD_LETTERS),
                &[&source, &i64::from(limit.get()), &since, &event_id],
                CONTEXT,
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| row::dead_letter_of(r, CONTEXT))
            .collect::<Result<_, _>>()?)
    }

    async fn queued(&self, key: &Key) -> Result<Vec<QueueEntry>, StoreError> {
        const CONTEXT: &str = "reading an event's queue items";
        let rows = self
            .inbox_query(
                QUEUED,
                &[&key.source.as_str(), &key.event_id.as_str()],
                CONTEXT,
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| row::queue_entry_of(r, CONTEXT))
            .collect::<Result<_, _>>()?)
    }

    /// One statement (one transaction), however many dead letters it moves.
    #[tracing::instrument(level = "debug", skip_all, fields(source = filter.source.as_ref().map(SourceName::as_str), since = ?filter.since))]
    async fn replay_dead_letters(
        &self,
        filter: &ReplayFilter,
        reason: &str,
    ) -> Result<u64, StoreError> {
        const CONTEXT: &str = "replaying dead letters";
        let source = filter.source.as_ref().map(SourceName::as_str);
        let since = filter.since.map(millis);
        let event_id = filter.event_id.as_ref().map(EventId::as_str);
        let params: [&(dyn ToSql + Sync); 4] = [&source, &since, &reason, &event_id];
        let rows = self
            .db()
            .with_partitions(0, || {
                self.inbox_query(of_event(filter, REPLAY_EVENT, REPLAY), &params, CONTEXT)
            })
            .await?;
        let row = rows.first().ok_or_else(|| PgError::Unexpected {
            context: CONTEXT,
            what: "no answer".to_owned(),
        })?;
        let moved = count(row::get(row, "moved", CONTEXT)?);
        if moved > 0 {
            tracing::info!(moved, reason, "replayed dead letters");
        }
        Ok(moved)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(retention = ?retention, batch = batch.get()))]
    async fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        const CONTEXT: &str = "purging dead letters";
        let client = self.db().client().await?;
        let stmt = client
            .prepare_cached(PURGE)
            .await
            .map_err(PgError::db(CONTEXT))?;
        let purged = client
            .execute(&stmt, &[&millis(retention), &i64::from(batch.get())])
            .await
            .map_err(PgError::db(CONTEXT))?;
        Ok(purged)
    }

    #[tracing::instrument(level = "debug", skip_all)]
    async fn inbox_stats(&self) -> Result<Vec<InboxStats>, StoreError> {
        const CONTEXT: &str = "counting inbox items";
        let mut client = self.db().client().await?;
        let rows = crate::db::reporting(&mut client, &[(STATS, &[])])
            .await
            .map_err(PgError::db(CONTEXT))?
            .remove(0);
        Ok(rows
            .iter()
            .map(|r| row::inbox_stats_of(r, CONTEXT))
            .collect::<Result<_, _>>()?)
    }
}
