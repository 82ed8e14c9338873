//! Group commit: concurrent claims travel to PostgreSQL together, as one `claim_batch` call over
//! arrays, in one transaction and one round trip.
//!
//! One batcher task owns the queue. It takes the first waiting claim, everything queued behind
//! it, and, under load (it had to wait for a free slot, or another batch is still in flight),
//! lingers up to `batch_linger` for more, until it holds as many as recent batches did (at most
//! `batch_max` in all). At most `batch_inflight` batches run at once, so under load the
//! queue fills while the database works and each commit carries many claims. With nothing in
//! flight a lone claim goes at once: a single caller pays no linger.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_core::{ClaimMode, ClaimOutcome, ClaimRequest, StoreError};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::db::Db;
use crate::error::PgError;
use crate::row::{self, millis, outcome_of};

const CLAIM_BATCH: &str = include_str!("../sql/claim_batch.sql");

/// How many times a batch that PostgreSQL aborted to break a deadlock is sent again.
const DEADLOCK_RETRIES: usize = 3;

/// One caller's claim, waiting for its batch.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) req: ClaimRequest,
    pub(crate) nonce: u64,
    pub(crate) reply: oneshot::Sender<Result<ClaimOutcome, StoreError>>,
}

/// The batcher: runs until every sender (every `PgStore` clone) is gone.
pub(crate) async fn run(db: Db, mut queue: mpsc::Receiver<Pending>) {
    let slots = db.cfg.batch_inflight.get();
    let inflight = Arc::new(Semaphore::new(slots));
    let max = db.cfg.batch_max.get();
    let linger = db.cfg.batch_linger;
    let mut recent = 1usize;
    while let Some(first) = queue.recv().await {
        // Under load (every slot taken, or another batch still in flight once we have ours) the
        // batch lingers for company; an idle store sends a lone claim at once.
        let waited = inflight.available_permits() == 0;
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            break;
        };
        let busy = waited || inflight.available_permits() + 1 < slots;
        let mut batch = Vec::with_capacity(max.min(64));
        batch.push(first);
        drain(&mut queue, &mut batch, max);
        // Linger only for as many claims as recent batches held: waiting for company that is not
        // coming would only burn CPU the database needs.
        let expect = recent.min(max);
        if busy && batch.len() < expect && !linger.is_zero() {
            wait_for_more(&mut queue, &mut batch, expect, linger).await;
        }
        // A decaying maximum of recent batch sizes.
        recent = batch.len().max(recent - recent / 8);
        let db = db.clone();
        tokio::spawn(async move {
            let sent = Instant::now();
            let result = send(&db, &batch).await;
            db.claim_latency.record(sent.elapsed(), batch.len());
            // Free the slot before answering: a caller's next claim must not see this batch
            // as still in flight.
            drop(permit);
            answer(batch, result);
        });
    }
}

fn drain(queue: &mut mpsc::Receiver<Pending>, batch: &mut Vec<Pending>, max: usize) {
    while batch.len() < max {
        match queue.try_recv() {
            Ok(p) => batch.push(p),
            Err(_) => break,
        }
    }
}

/// Collects more claims until `linger` has passed or the batch is full. Tokio's timer ticks in
/// milliseconds, so the sub-millisecond rest of a linger is waited by yielding.
async fn wait_for_more(
    queue: &mut mpsc::Receiver<Pending>,
    batch: &mut Vec<Pending>,
    max: usize,
    linger: Duration,
) {
    let deadline = Instant::now() + linger;
    while batch.len() < max {
        match queue.try_recv() {
            Ok(p) => {
                batch.push(p);
                continue;
            }
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        if deadline - now >= Duration::from_millis(1) {
            match tokio::time::timeout_at(deadline.into(), queue.recv()).await {
                Ok(Some(p)) => batch.push(p),
                Ok(None) | Err(_) => return,
            }
        } else {
            tokio::task::yield_now().await;
        }
    }
}

fn answer(batch: Vec<Pending>, result: Result<Vec<ClaimOutcome>, PgError>) {
    match result {
        Ok(outcomes) => {
            for (p, outcome) in batch.into_iter().zip(outcomes) {
                // A caller that gave up waiting is no error.
                let _ = p.reply.send(Ok(outcome));
            }
        }
        Err(PgError::Closed) => {
            for p in batch {
                let _ = p.reply.send(Err(StoreError::Closed));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, claims = batch.len(), "a claim batch failed");
            let shared = Arc::new(e);
            for p in batch {
                let _ = p.reply.send(Err(StoreError::Backend {
                    context: "the PostgreSQL store".to_owned(),
                    source: Box::new(shared.clone()),
                }));
            }
        }
    }
}

/// Sends one batch, retrying it after a deadlock, and after creating a partition it needed.
async fn send(db: &Db, batch: &[Pending]) -> Result<Vec<ClaimOutcome>, PgError> {
    let ttl_ms = batch
        .iter()
        .map(|p| u64::try_from(millis(p.req.ttl)).unwrap_or(0))
        .max()
        .unwrap_or(0);
    let mut tries = 0;
    loop {
        match db.with_partitions(ttl_ms, || send_once(db, batch)).await {
            Err(e) if e.is_deadlock() && tries < DEADLOCK_RETRIES => {
                tries += 1;
                tracing::debug!(
                    claims = batch.len(),
                    tries,
                    "claim batch deadlocked; sending again"
                );
            }
            other => return other,
        }
    }
}

async fn send_once(db: &Db, batch: &[Pending]) -> Result<Vec<ClaimOutcome>, PgError> {
    const CONTEXT: &str = "claiming a batch";
    let n = batch.len();
    let mut sources = Vec::with_capacity(n);
    let mut event_ids = Vec::with_capacity(n);
    let mut fingerprints = Vec::with_capacity(n);
    let mut leases = Vec::with_capacity(n);
    let mut ttls = Vec::with_capacity(n);
    let mut on_receipt = Vec::with_capacity(n);
    let mut nonces = Vec::with_capacity(n);
    let mut late = Vec::with_capacity(n);
    let mut holder_instances = Vec::with_capacity(n);
    let mut holder_boots = Vec::with_capacity(n);
    for p in batch {
        sources.push(p.req.key.source.as_str());
        event_ids.push(p.req.key.event_id.as_str());
        fingerprints.push(p.req.fingerprint.as_ref().map(|f| f.as_bytes().as_slice()));
        leases.push(millis(p.req.lease));
        ttls.push(millis(p.req.ttl));
        on_receipt.push(p.req.mode == ClaimMode::OnReceipt);
        // Bit for bit: the nonce is a u64 kept in a bigint.
        nonces.push(p.nonce as i64);
        late.push(p.req.late_duplicates.as_str());
        holder_instances.push(p.req.holder.as_ref().map(|h| h.instance.as_str()));
        // Bit for bit, like the nonce.
        holder_boots.push(p.req.holder.as_ref().map(|h| h.boot as i64));
    }
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(CLAIM_BATCH)
        .await
        .map_err(PgError::db(CONTEXT))?;
    // One implicit transaction: the rows arrive after the commit (ReadyForQuery), so every
    // outcome is durable when the caller hears it.
    let rows = client
        .query(
            &stmt,
            &[
                &sources,
                &event_ids,
                &fingerprints,
                &leases,
                &ttls,
                &on_receipt,
                &nonces,
                &late,
                &holder_instances,
                &holder_boots,
            ],
        )
        .await
        .map_err(PgError::db(CONTEXT))?;
    let mut outcomes: Vec<Option<ClaimOutcome>> = vec![None; n];
    for row in &rows {
        let idx: i32 = row::get(row, "r_idx", CONTEXT)?;
        let slot = usize::try_from(idx)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|&i| i < n)
            .ok_or_else(|| PgError::Unexpected {
                context: CONTEXT,
                what: format!("answer for element {idx} of {n}"),
            })?;
        outcomes[slot] = Some(outcome_of(&batch[slot].req.key, row)?);
    }
    outcomes
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| PgError::Unexpected {
            context: CONTEXT,
            what: format!("{} answers for {n} claims", rows.len()),
        })
}
