//! Group commit: concurrent calls travel to PostgreSQL together, as one call over arrays, in one
//! transaction and one round trip. Claims (`claim_batch`) and finishes (`finish_batch`:
//! completions and releases) each have a batcher of their own: a [`Job`] says how a batch of its
//! kind is sent.
//!
//! One batcher task owns the queue. It takes the first waiting call, everything queued behind
//! it, and, under load (it had to wait for a free slot, or another batch is still in flight),
//! lingers up to `batch_linger` for more, until it holds as many as recent batches did (at most
//! `batch_max` in all). At most `batch_inflight` batches run at once, so under load the
//! queue fills while the database works and each commit carries many calls. On an idle store
//! (nothing queued, nothing in flight) a call is a batch of its own, sent at once from the
//! caller's task: a single caller pays no linger and no hop through the batcher task.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_core::{ClaimMode, ClaimOutcome, ClaimRequest, StoreError};
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::config::Expiry;
use crate::db::Db;
use crate::error::PgError;
use crate::row::{self, millis, outcome_of};

pub(crate) const CLAIM_BATCH: &str = include_str!("../sql/claim_batch.sql");
const CLAIM_FRESH: &str = include_str!("../sql/claim_fresh.sql");
const RELEASE_UNANSWERED: &str = include_str!("../sql/release_unanswered.sql");
pub(crate) const FINISH_BATCH: &str = include_str!("../sql/finish_batch.sql");

/// How many times a batch that PostgreSQL aborted to break a deadlock is sent again.
const DEADLOCK_RETRIES: usize = 3;

/// A kind of call the batcher group-commits.
pub(crate) trait Job: Send + Sync + 'static {
    /// One caller's call.
    type Item: Send + Sync + 'static;
    /// Its answer.
    type Answer: Send + 'static;
    /// What a batch does, for the log when one fails ("a claim batch failed").
    const WHAT: &'static str;

    /// Sends one batch: one answer per item, in order.
    fn send(
        db: &Db,
        items: &[Pending<Self>],
    ) -> impl Future<Output = Result<Vec<Self::Answer>, PgError>> + Send;

    /// A batch of `calls` took `took` to send and answer (the sweeper paces itself by the
    /// claims'; see `idemgate_core::sweep`).
    fn observe(_db: &Db, _took: Duration, _calls: usize) {}

    /// The batch was sent but its answer never came ([`PgError::is_ambiguous`]): it may have
    /// committed, and none of its callers will ever know.
    fn unanswered(_db: &Db, _batch: &[Pending<Self>]) {}
}

/// One caller's call, waiting for its batch.
pub(crate) struct Pending<J: Job + ?Sized> {
    pub(crate) item: J::Item,
    pub(crate) reply: oneshot::Sender<Result<J::Answer, StoreError>>,
}

/// A claim and the nonce its record will carry if it wins.
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) req: ClaimRequest,
    pub(crate) nonce: u64,
}

/// Claims: `claim_batch`.
pub(crate) struct Claims;

/// A completion (`release` false) or a release of the claim a token holds.
#[derive(Debug)]
pub(crate) struct Finish {
    pub(crate) source: String,
    pub(crate) event_id: String,
    pub(crate) attempt: i32,
    /// The token's nonce, bit for bit (a u64 kept in a bigint).
    pub(crate) nonce: i64,
    pub(crate) release: bool,
}

/// Completions and releases: `finish_batch`; each answer says whether the token held the claim
/// (`Some(true)`), did not (`Some(false)`), or completed it and may not release it (`None`).
pub(crate) struct Finishes;

/// The callers' side of a batcher of `J`: its queue and its slots. The batcher task stops once
/// the last clone is dropped.
pub(crate) struct Batcher<J: Job> {
    queue: mpsc::Sender<Pending<J>>,
    inflight: Arc<Semaphore>,
    db: Db,
}

impl<J: Job> Batcher<J> {
    /// Starts the batcher task on `db` (on the current tokio runtime).
    pub(crate) fn start(db: Db) -> Self {
        let (queue, rx) = mpsc::channel(db.cfg.batch_max.get() * 4);
        let inflight = Arc::new(Semaphore::new(db.cfg.batch_inflight.get()));
        tokio::spawn(run(db.clone(), rx, inflight.clone()));
        Self {
            queue,
            inflight,
            db,
        }
    }

    /// One call, answered once its batch committed. On an idle store (nothing queued, no batch
    /// in flight) the call is a batch of its own, sent from the caller's task: a lone caller pays
    /// no hop through the batcher task. Under load every call goes through the batcher, so that
    /// no slot is spent on a batch of one while others queue.
    pub(crate) async fn call(&self, item: J::Item) -> Result<J::Answer, StoreError> {
        let (reply, answered) = oneshot::channel();
        let pending = Pending { item, reply };
        if self.queue.capacity() == self.queue.max_capacity()
            && self.inflight.available_permits() == self.db.cfg.batch_inflight.get()
            && let Ok(permit) = self.inflight.clone().try_acquire_owned()
        {
            let batch = vec![pending];
            let result = retried::<J>(&self.db, &batch).await;
            drop(permit);
            answer(&self.db, batch, result);
        } else {
            self.queue
                .send(pending)
                .await
                .map_err(|_| StoreError::Closed)?;
        }
        answered.await.map_err(|_| StoreError::Closed)?
    }
}

/// The batcher task: runs until every [`Batcher`] (every `PgStore` clone) is gone.
async fn run<J: Job>(db: Db, mut queue: mpsc::Receiver<Pending<J>>, inflight: Arc<Semaphore>) {
    let slots = db.cfg.batch_inflight.get();
    let max = db.cfg.batch_max.get();
    let linger = db.cfg.batch_linger;
    let mut recent = 1usize;
    while let Some(first) = queue.recv().await {
        // Under load (every slot taken, or another batch still in flight once we have ours) the
        // batch lingers for company; an idle store sends a lone call at once.
        let waited = inflight.available_permits() == 0;
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            break;
        };
        let busy = waited || inflight.available_permits() + 1 < slots;
        let mut batch = Vec::with_capacity(max.min(64));
        batch.push(first);
        drain(&mut queue, &mut batch, max);
        // Linger only for as many calls as recent batches held: waiting for company that is not
        // coming would only burn CPU the database needs.
        let expect = recent.min(max);
        if busy && batch.len() < expect && !linger.is_zero() {
            wait_for_more(&mut queue, &mut batch, expect, linger).await;
        }
        // A decaying maximum of recent batch sizes.
        recent = batch.len().max(recent - recent / 8);
        let db = db.clone();
        tokio::spawn(async move {
            let result = retried::<J>(&db, &batch).await;
            // Free the slot before answering: a caller's next call must not see this batch
            // as still in flight.
            drop(permit);
            answer(&db, batch, result);
        });
    }
}

fn drain<J: Job>(queue: &mut mpsc::Receiver<Pending<J>>, batch: &mut Vec<Pending<J>>, max: usize) {
    while batch.len() < max {
        match queue.try_recv() {
            Ok(p) => batch.push(p),
            Err(_) => break,
        }
    }
}

/// Collects more calls until `linger` has passed or the batch is full. Tokio's timer ticks in
/// milliseconds, so the sub-millisecond rest of a linger is waited by yielding.
async fn wait_for_more<J: Job>(
    queue: &mut mpsc::Receiver<Pending<J>>,
    batch: &mut Vec<Pending<J>>,
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

fn answer<J: Job>(db: &Db, batch: Vec<Pending<J>>, result: Result<Vec<J::Answer>, PgError>) {
    if let Err(e) = &result
        && e.is_ambiguous()
    {
        J::unanswered(db, &batch);
    }
    match result {
        Ok(answers) => {
            for (p, a) in batch.into_iter().zip(answers) {
                // A caller that gave up waiting is no error.
                let _ = p.reply.send(Ok(a));
            }
        }
        Err(PgError::Closed) => {
            for p in batch {
                let _ = p.reply.send(Err(StoreError::Closed));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, calls = batch.len(), "{} failed", J::WHAT);
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

/// Sends one batch, again after a deadlock PostgreSQL broke by aborting it, and tells the job
/// how long it took.
async fn retried<J: Job>(db: &Db, batch: &[Pending<J>]) -> Result<Vec<J::Answer>, PgError> {
    let sent = Instant::now();
    let result = retried_untimed(db, batch).await;
    J::observe(db, sent.elapsed(), batch.len());
    result
}

async fn retried_untimed<J: Job>(db: &Db, batch: &[Pending<J>]) -> Result<Vec<J::Answer>, PgError> {
    let mut tries = 0;
    loop {
        match J::send(db, batch).await {
            Err(e) if e.is_deadlock() && tries < DEADLOCK_RETRIES => {
                tries += 1;
                tracing::debug!(
                    calls = batch.len(),
                    tries,
                    "{} deadlocked; sending again",
                    J::WHAT
                );
            }
            other => return other,
        }
    }
}

impl Job for Claims {
    type Item = Claim;
    type Answer = ClaimOutcome;
    const WHAT: &'static str = "a claim batch";

    fn observe(db: &Db, took: Duration, calls: usize) {
        db.claim_latency.record(took, calls);
    }

    /// Claims that may have been won with nobody told: released as soon as the database
    /// answers again (each by the nonce it would carry), so they do not sit `processing` for a
    /// lease that no caller holds.
    fn unanswered(db: &Db, batch: &[Pending<Self>]) {
        let claims: Vec<(String, String, i64)> = batch
            .iter()
            .map(|p| {
                let key = &p.item.req.key;
                (
                    key.source.as_str().to_owned(),
                    key.event_id.as_str().to_owned(),
                    // Bit for bit, as claim_batch stored it.
                    p.item.nonce as i64,
                )
            })
            .collect();
        tokio::spawn(release_unanswered(db.clone(), claims));
    }

    /// One `claim_batch` call, again after creating a partition it needed. In batched mode a
    /// lone claim first tries `claim_fresh.sql`, a plain statement that claims a key never seen
    /// for a fraction of `claim_batch`'s cost (an idle store's usual claim), and goes to
    /// `claim_batch` when that claimed nothing.
    async fn send(db: &Db, batch: &[Pending<Self>]) -> Result<Vec<ClaimOutcome>, PgError> {
        let ttl_ms = batch
            .iter()
            .map(|p| u64::try_from(millis(p.item.req.ttl)).unwrap_or(0))
            .max()
            .unwrap_or(0);
        let batched = matches!(db.cfg.expiry, Expiry::Batched { .. });
        db.with_partitions(ttl_ms, || async move {
            if let [lone] = batch
                && batched
                && let Some(outcome) = claim_fresh(db, &lone.item).await?
            {
                return Ok(vec![outcome]);
            }
            claim_once(db, batch).await
        })
        .await
    }
}

impl Job for Finishes {
    type Item = Finish;
    type Answer = Option<bool>;
    const WHAT: &'static str = "a batch of completions and releases";

    /// One `finish_batch` call, again after creating a history partition it needed.
    async fn send(db: &Db, batch: &[Pending<Self>]) -> Result<Vec<Option<bool>>, PgError> {
        db.with_partitions(0, || finish_once(db, batch)).await
    }
}

/// How long unanswered claims are tried to be released before they are left to their leases.
const UNANSWERED_FOR: Duration = Duration::from_secs(600);

/// Releases the claims of a batch whose answer never came, retrying until the database answers
/// (or [`UNANSWERED_FOR`] passed): `release_unanswered` deletes each record still holding the
/// claim's nonce and not completed, with a `released` history row.
async fn release_unanswered(db: Db, claims: Vec<(String, String, i64)>) {
    const CONTEXT: &str = "releasing claims whose answer was lost";
    let started = Instant::now();
    let mut pause = Duration::from_millis(200);
    let (sources, rest): (Vec<_>, Vec<_>) = claims.into_iter().map(|(s, e, n)| (s, (e, n))).unzip();
    let (event_ids, nonces): (Vec<_>, Vec<_>) = rest.into_iter().unzip();
    loop {
        tokio::time::sleep(pause).await;
        let released = async {
            let client = db.client().await?;
            client
                .query_one(RELEASE_UNANSWERED, &[&sources, &event_ids, &nonces])
                .await
                .map_err(PgError::db(CONTEXT))
                .and_then(|row| row::get::<i64>(&row, "released", CONTEXT))
        }
        .await;
        match released {
            Ok(n) => {
                tracing::info!(
                    claims = sources.len(),
                    released = n,
                    "a claim batch's answer was lost; released the claims it had won"
                );
                return;
            }
            Err(e) if started.elapsed() < UNANSWERED_FOR => {
                tracing::debug!(error = %e, "cannot release unanswered claims yet");
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                tracing::warn!(error = %e, claims = sources.len(), "gave up releasing claims whose answer was lost; they wait out their leases");
                return;
            }
        }
    }
}

/// `claim_fresh.sql`: the claim's outcome when the key was never seen, `None` otherwise (nothing
/// written).
async fn claim_fresh(db: &Db, claim: &Claim) -> Result<Option<ClaimOutcome>, PgError> {
    const CONTEXT: &str = "claiming a new key";
    let req = &claim.req;
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(CLAIM_FRESH)
        .await
        .map_err(PgError::db(CONTEXT))?;
    let row = client
        .query_opt(
            &stmt,
            &[
                &req.key.source.as_str(),
                &req.key.event_id.as_str(),
                &req.fingerprint.as_ref().map(|f| f.as_bytes().as_slice()),
                &millis(req.lease),
                &millis(req.ttl),
                &(req.mode == ClaimMode::OnReceipt),
                // Bit for bit: the nonce is a u64 kept in a bigint.
                &(claim.nonce as i64),
                &req.late_duplicates.as_str(),
                &req.holder.as_ref().map(|h| h.instance.as_str()),
                &req.holder.as_ref().map(|h| h.boot as i64),
                &millis(req.late_duplicate_horizon()),
            ],
        )
        .await
        .map_err(PgError::db(CONTEXT))?;
    row.map(|row| outcome_of(&req.key, &row)).transpose()
}

async fn finish_once(db: &Db, batch: &[Pending<Finishes>]) -> Result<Vec<Option<bool>>, PgError> {
    const CONTEXT: &str = "completing and releasing a batch of claims";
    let n = batch.len();
    let mut sources = Vec::with_capacity(n);
    let mut event_ids = Vec::with_capacity(n);
    let mut attempts = Vec::with_capacity(n);
    let mut nonces = Vec::with_capacity(n);
    let mut releases = Vec::with_capacity(n);
    for Pending { item, .. } in batch {
        sources.push(item.source.as_str());
        event_ids.push(item.event_id.as_str());
        attempts.push(item.attempt);
        nonces.push(item.nonce);
        releases.push(item.release);
    }
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(FINISH_BATCH)
        .await
        .map_err(PgError::db(CONTEXT))?;
    // One implicit transaction: the rows arrive after the commit.
    let rows = client
        .query(
            &stmt,
            &[&sources, &event_ids, &attempts, &nonces, &releases],
        )
        .await
        .map_err(PgError::db(CONTEXT))?;
    by_element(&rows, n, CONTEXT, "completions and releases", |_, row| {
        row::get(row, "r_held", CONTEXT)
    })
}

/// A batch's rows put in the order of its elements (`r_idx`, 1-based): one answer each, read by
/// `answer(element, row)`; an index out of range, or an element without its row, is
/// [`PgError::Unexpected`].
pub(crate) fn by_element<T: Clone>(
    rows: &[tokio_postgres::Row],
    n: usize,
    context: &'static str,
    what: &str,
    answer: impl Fn(usize, &tokio_postgres::Row) -> Result<T, PgError>,
) -> Result<Vec<T>, PgError> {
    let mut answers: Vec<Option<T>> = vec![None; n];
    for row in rows {
        let idx: i32 = row::get(row, "r_idx", context)?;
        let slot = usize::try_from(idx)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|&i| i < n)
            .ok_or_else(|| PgError::Unexpected {
                context,
                what: format!("answer for element {idx} of {n}"),
            })?;
        answers[slot] = Some(answer(slot, row)?);
    }
    answers
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| PgError::Unexpected {
            context,
            what: format!("{} answers for {n} {what}", rows.len()),
        })
}

/// `claim_batch.sql`'s parameters: one array per column, one element per claim.
pub(crate) struct ClaimArrays<'a> {
    sources: Vec<&'a str>,
    event_ids: Vec<&'a str>,
    fingerprints: Vec<Option<&'a [u8]>>,
    leases: Vec<i64>,
    ttls: Vec<i64>,
    on_receipt: Vec<bool>,
    nonces: Vec<i64>,
    late: Vec<&'static str>,
    holder_instances: Vec<Option<&'a str>>,
    holder_boots: Vec<Option<i64>>,
    horizons: Vec<i64>,
}

impl<'a> ClaimArrays<'a> {
    /// The arrays of `claims`, each a request and its nonce.
    pub(crate) fn of(claims: impl ExactSizeIterator<Item = (&'a ClaimRequest, u64)>) -> Self {
        let n = claims.len();
        let mut a = Self {
            sources: Vec::with_capacity(n),
            event_ids: Vec::with_capacity(n),
            fingerprints: Vec::with_capacity(n),
            leases: Vec::with_capacity(n),
            ttls: Vec::with_capacity(n),
            on_receipt: Vec::with_capacity(n),
            nonces: Vec::with_capacity(n),
            late: Vec::with_capacity(n),
            holder_instances: Vec::with_capacity(n),
            holder_boots: Vec::with_capacity(n),
            horizons: Vec::with_capacity(n),
        };
        for (req, nonce) in claims {
            a.sources.push(req.key.source.as_str());
            a.event_ids.push(req.key.event_id.as_str());
            a.fingerprints
                .push(req.fingerprint.as_ref().map(|f| f.as_bytes().as_slice()));
            a.leases.push(millis(req.lease));
            a.ttls.push(millis(req.ttl));
            a.on_receipt.push(req.mode == ClaimMode::OnReceipt);
            // Bit for bit: the nonce is a u64 kept in a bigint.
            a.nonces.push(nonce as i64);
            a.late.push(req.late_duplicates.as_str());
            a.holder_instances
                .push(req.holder.as_ref().map(|h| h.instance.as_str()));
            // Bit for bit, like the nonce.
            a.holder_boots
                .push(req.holder.as_ref().map(|h| h.boot as i64));
            a.horizons.push(millis(req.late_duplicate_horizon()));
        }
        a
    }

    /// The statement's parameters, in order.
    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 11] {
        [
            &self.sources,
            &self.event_ids,
            &self.fingerprints,
            &self.leases,
            &self.ttls,
            &self.on_receipt,
            &self.nonces,
            &self.late,
            &self.holder_instances,
            &self.holder_boots,
            &self.horizons,
        ]
    }
}

async fn claim_once(db: &Db, batch: &[Pending<Claims>]) -> Result<Vec<ClaimOutcome>, PgError> {
    const CONTEXT: &str = "claiming a batch";
    let n = batch.len();
    let arrays = ClaimArrays::of(batch.iter().map(|p| (&p.item.req, p.item.nonce)));
    let client = db.client().await?;
    let stmt = client
        .prepare_cached(CLAIM_BATCH)
        .await
        .map_err(PgError::db(CONTEXT))?;
    // One implicit transaction: the rows arrive after the commit (ReadyForQuery), so every
    // outcome is durable when the caller hears it.
    let rows = client
        .query(&stmt, &arrays.params())
        .await
        .map_err(PgError::db(CONTEXT))?;
    by_element(&rows, n, CONTEXT, "claims", |slot, row| {
        outcome_of(&batch[slot].item.req.key, row)
    })
}
