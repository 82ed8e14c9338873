//! Tier mode: a read-through cache of *done* records in front of a SQL store.
//!
//! The inner store (SQLite or PostgreSQL) stays the source of truth; Redis only ever holds
//! answers the inner store already gave:
//!
//! - **claim**: `GET` the event's cache entry. A done entry whose fingerprint agrees answers
//!   [`ClaimOutcome::Duplicate`] at once, without touching SQL. Anything else (no entry, a
//!   tombstone, a fingerprint the entry cannot vouch for, Redis unreachable) asks the inner
//!   store; when it answers `Duplicate` of a done record, the answer is cached until
//!   [`TierConfig::expiry_margin`] before the record expires (`PXAT`, so the cache can never
//!   outlive the record by more than the clock difference between the two servers, which the
//!   margin covers). Processing records, in-flight answers and conflicts are never cached.
//! - **complete**: the inner store only; the first duplicate after it fills the cache (filling
//!   at completion would cost a SQL read for every event, most of which never see a duplicate).
//!   A completion's result ([`ClaimStore::complete_with`]) is written to the inner store alone,
//!   in its completion, and never cached: a duplicate answered from Redis carries no result, and
//!   whoever wants the result reads it through **lookup**, from the inner store.
//! - **release**: first a tombstone replaces the cache entry (so a read-through that read the
//!   record before the release cannot cache it after), then the inner store deletes the record.
//!   When Redis cannot take the tombstone, a record that is not done is released anyway (it was
//!   never cacheable); a done one is refused, since its cached answer could outlive the release.
//! - **renew**, **lookup**, [`Sweep`](idemgate_core::Sweep), [`Stats`](idemgate_core::Stats),
//!   [`HistoryQuery`](idemgate_core::HistoryQuery), [`Identity`],
//!   [`Instances`](idemgate_core::Instances): the inner store.
//!
//! Why eviction, `FLUSHALL` or a restart can only cost a round trip: a claim is never decided by
//! Redis alone. A missing entry means "ask SQL", and SQL's answer is the one the caller gets.
//!
//! **Tied to its store.** Every cache entry is written for one inner store: its key ends with
//! the inner store's [`Identity::store_id`] (`<prefix>{<source>/<id>}:c:<store id>`), read once
//! when the tier is built. Two stores sharing one Redis and one prefix (two gateways on two
//! databases), or a database wiped and created again (a new id), never answer from each other's
//! entries. The id is in the key, not in the value: a mismatch in the value would only turn a
//! hit into a miss, while two stores sharing keys would overwrite each other's entries and
//! tombstones on every fill and release (each store's hits would fall to nothing, and one
//! store's release tombstone would keep the other from caching). With the id in the key each
//! store has its own entries, and a former store's expire on their own (each by its record's
//! expiry). A database restored from a backup keeps its id, so its entries are still read: see
//! the crate README.
//!
//! A Redis error counts in [`TierCounters::errors`], is logged at most once a minute, and sends
//! claims straight to the inner store for [`TierConfig::retry_after`] (counted as `bypassed`), so
//! an outage costs one timeout per period rather than one per claim. It never fails a claim.
//!
//! **History.** Duplicates answered from Redis are counted in [`TierCounters::hits`] but write no
//! history row: writing one would put SQL back on the hot path the tier exists to avoid (and an
//! asynchronous write could only go through `claim`, which might *claim* a record released
//! meanwhile). The first duplicate of an event, and every one while it is not cached, is still
//! recorded by the inner store, so the gap history the TTL advisor reads keeps each event's
//! earliest duplicate; later ones show only in the counters.

//!
//! # Layout
//!
//! This file holds [`TieredStore`] and the two operations that go through Redis (claim and
//! release); `entry` the cache entries' text; `counters` the [`TierCounters`]; `delegated` the
//! traits left to the inner store whole.

mod counters;
mod delegated;
mod entry;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idemgate_core::{
    ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, EventView, Identity, Key, Record,
    RecordResult, RecordState, StoreError, Timestamp,
};
use redis::{AsyncCommands, Script, TlsCertificates};
use tracing::{instrument, warn};

use crate::config::TierConfig;
use crate::conn::{Conn, Timeouts};
use crate::error::RedisError;
use crate::keys::Keys;
use crate::limiter::LogLimiter;
use crate::reply;
use crate::tls;
use counters::Counters;
pub use counters::TierCounters;
use entry::{Cached, TOMBSTONE};

/// A [`ClaimStore`] answering known duplicates from Redis in front of `S`, the source of truth.
/// Cheap to clone when `S` is.
#[derive(Debug)]
pub struct TieredStore<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: Clone> Clone for TieredStore<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

#[derive(Debug)]
struct Shared {
    cfg: TierConfig,
    /// The TLS files' contents, read once (to learn why a `rediss://` Cluster refused us).
    certs: Option<TlsCertificates>,
    conn: Conn,
    keys: Keys,
    /// The suffix of this tier's cache keys: the inner store's id ([`Keys::cache_scope`]).
    scope: String,
    fill: Script,
    counters: Counters,
    start: Instant,
    /// Milliseconds since `start` before which Redis is not tried (after an error).
    skip_until_ms: AtomicU64,
    errors_log: LogLimiter,
}

impl<S: ClaimStore + Identity> TieredStore<S> {
    /// Puts Redis in front of `inner`, caching only for `inner`'s [`Identity::store_id`] (read
    /// now). Never connects: the connection is made on first use and remade after failures, so a
    /// Redis that is down at start only means answers come from `inner` until it is up. Must be
    /// called within a Tokio runtime.
    ///
    /// # Errors
    /// [`RedisError::Config`] when `cfg` cannot work.
    pub fn new(inner: S, cfg: TierConfig) -> Result<Self, RedisError> {
        let certs = cfg.check()?;
        let timeouts = Timeouts {
            connect: cfg.connect_timeout,
            response: cfg.response_timeout,
            retries: 0,
        };
        let conn = Conn::lazy(&cfg.target, certs.as_ref(), timeouts).map_err(|source| {
            RedisError::Connect {
                target: cfg.target.describe(),
                source,
            }
        })?;
        let scope = Keys::cache_scope(inner.store_id());
        Ok(Self {
            inner,
            shared: Arc::new(Shared {
                keys: Keys::new(&cfg.key_prefix),
                scope,
                cfg,
                certs,
                conn,
                fill: Script::new(include_str!("../lua/fill.lua")),
                counters: Counters::default(),
                start: Instant::now(),
                skip_until_ms: AtomicU64::new(0),
                errors_log: LogLimiter::new(Duration::from_secs(60)),
            }),
        })
    }
}

impl<S: ClaimStore> TieredStore<S> {
    /// The store behind the cache.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The configuration it runs on.
    pub fn config(&self) -> &TierConfig {
        &self.shared.cfg
    }

    /// A real round trip to Redis (`PING`), for health checks: the tier answers nothing while it
    /// fails, so this is the only way to hear that it is down.
    ///
    /// # Errors
    /// [`RedisError::Tls`] when the TLS handshake fails (naming why), [`RedisError::Command`]
    /// when Redis does not answer.
    pub async fn ping_tier(&self) -> Result<(), RedisError> {
        let s = &self.shared;
        let mut conn = s.conn.clone();
        match redis::cmd("PING").query_async::<String>(&mut conn).await {
            Ok(_) => Ok(()),
            Err(source) => Err(RedisError::tls_or(
                &s.cfg.target,
                s.certs.as_ref(),
                s.cfg.connect_timeout,
                source,
                RedisError::command("PING"),
            )
            .await),
        }
    }

    /// Hits, misses, errors and bypasses so far.
    pub fn counters(&self) -> TierCounters {
        self.shared.counters.snapshot()
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.shared.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether to try Redis now (not within `retry_after` of a failure).
    fn redis_usable(&self) -> bool {
        self.elapsed_ms() >= self.shared.skip_until_ms.load(Ordering::Relaxed)
    }

    /// Counts and (at most once a minute) logs a Redis failure, and skips Redis for a while.
    fn redis_failed(&self, doing: &'static str, error: &(dyn std::error::Error + 'static)) {
        let s = &self.shared;
        s.counters.errors.fetch_add(1, Ordering::Relaxed);
        let retry_ms = u64::try_from(s.cfg.retry_after.as_millis()).unwrap_or(u64::MAX);
        s.skip_until_ms.store(
            self.elapsed_ms().saturating_add(retry_ms),
            Ordering::Relaxed,
        );
        if let Some(held_back) = s.errors_log.check() {
            // A TLS failure in words (which certificate was refused, and why).
            let error = tls::tls_reason(error).unwrap_or_else(|| error.to_string());
            warn!(
                %error,
                doing,
                held_back,
                target = %s.cfg.target.describe(),
                "Redis unavailable: answering from the SQL store alone"
            );
        }
    }

    /// The cached answer for `req`, if Redis has one it can vouch for.
    async fn cached(&self, req: &ClaimRequest) -> Option<ClaimOutcome> {
        let counters = &self.shared.counters;
        if !self.redis_usable() {
            counters.bypassed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let mut conn = self.shared.conn.clone();
        let entry: Option<String> = match conn
            .get(self.shared.keys.cache(&req.key, &self.shared.scope))
            .await
        {
            Ok(entry) => entry,
            Err(e) => {
                self.redis_failed("reading the cache", &e);
                return None;
            }
        };
        match entry.as_deref().and_then(Cached::parse) {
            Some(c) if c.vouches_for(req.fingerprint) => {
                counters.hits.fetch_add(1, Ordering::Relaxed);
                Some(ClaimOutcome::Duplicate {
                    first_seen: c.first_seen,
                    state: RecordState::Done,
                    expires_at: c.expires_at,
                })
            }
            Some(_) | None => {
                counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Caches the inner store's `Duplicate` of a done record until just before it expires.
    async fn fill(&self, req: &ClaimRequest, entry: Cached) {
        if !self.redis_usable() {
            return;
        }
        let until = entry.expires_at.as_millis().saturating_sub(
            i64::try_from(self.shared.cfg.expiry_margin.as_millis()).unwrap_or(i64::MAX),
        );
        let mut conn = self.shared.conn.clone();
        let result = self
            .shared
            .fill
            .key(self.shared.keys.cache(&req.key, &self.shared.scope))
            .arg(entry.encode())
            .arg(until)
            .arg(TOMBSTONE)
            .invoke_async(&mut conn)
            .await;
        match result.map(reply::Fill::decode) {
            // Released meanwhile, or too close to expiry: nothing to cache, nothing wrong.
            Ok(Ok(reply::Fill::Cached | reply::Fill::Released | reply::Fill::Expiring)) => {}
            Ok(Err(e)) => self.redis_failed("filling the cache", &e),
            Err(e) => self.redis_failed("filling the cache", &e),
        }
    }

    /// Puts the release tombstone in place of the event's cache entry.
    async fn tombstone(&self, key: &Key) -> Result<(), redis::RedisError> {
        let mut conn = self.shared.conn.clone();
        let ms = u64::try_from(self.shared.cfg.release_tombstone.as_millis()).unwrap_or(u64::MAX);
        redis::cmd("SET")
            .arg(self.shared.keys.cache(key, &self.shared.scope))
            .arg(TOMBSTONE)
            .arg("PX")
            .arg(ms)
            .query_async::<()>(&mut conn)
            .await
    }
}

impl<S: ClaimStore> ClaimStore for TieredStore<S> {
    #[instrument(level = "debug", skip_all, fields(source = %req.key.source))]
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        if let Some(answer) = self.cached(&req).await {
            return Ok(answer);
        }
        let outcome = self.inner.claim(req.clone()).await?;
        match &outcome {
            ClaimOutcome::Duplicate {
                first_seen,
                state: RecordState::Done,
                expires_at,
            } => {
                let entry = Cached {
                    first_seen: *first_seen,
                    expires_at: *expires_at,
                    fingerprint: req.fingerprint,
                };
                self.fill(&req, entry).await;
            }
            // Only done records are cached. A late duplicate's new done record is cached by the
            // first plain duplicate after it, which the inner store records in history.
            ClaimOutcome::Duplicate {
                state: RecordState::Processing,
                ..
            }
            | ClaimOutcome::Claimed { .. }
            | ClaimOutcome::LateDuplicate { .. }
            | ClaimOutcome::InFlight { .. }
            | ClaimOutcome::Conflict { .. } => {}
        }
        Ok(outcome)
    }

    #[instrument(level = "debug", skip_all, fields(source = %token.key.source))]
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.inner.complete(token).await
    }

    /// The inner store only, as `complete`. Results are never cached: a duplicate answered
    /// from Redis carries none, and its result is read from the inner store ([`lookup`]), so
    /// the tier can never answer a result the inner store does not have.
    ///
    /// [`lookup`]: ClaimStore::lookup
    #[instrument(level = "debug", skip_all, fields(source = %token.key.source))]
    async fn complete_keeping(
        &self,
        token: &ClaimToken,
        result: RecordResult,
    ) -> Result<(), StoreError> {
        self.inner.complete_keeping(token, result).await
    }

    #[instrument(level = "debug", skip_all, fields(source = %token.key.source))]
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        let failure = if self.redis_usable() {
            match self.tombstone(&token.key).await {
                Ok(()) => return self.inner.release(token).await,
                Err(e) => {
                    self.redis_failed("invalidating the cache", &e);
                    Some(e)
                }
            }
        } else {
            None
        };
        // Redis cannot take the tombstone. Only a done record can have a cached answer; one its
        // token completed is not released at all (the store refuses it, below).
        let view = self.inner.lookup(&token.key).await?;
        let held_done = view.record.is_some_and(|r| {
            r.state == RecordState::Done
                && !r.completed
                && r.attempt == token.attempt
                && r.nonce == token.nonce
        });
        if held_done {
            let why = "Redis is unreachable, so the cached answer of this completed claim cannot be invalidated; retry the release later";
            return Err(match failure {
                Some(e) => StoreError::backend(why, e),
                None => StoreError::backend(
                    why,
                    RedisError::reply("cache", "skipped after a recent failure"),
                ),
            });
        }
        self.inner.release(token).await
    }

    #[instrument(level = "debug", skip_all, fields(source = %token.key.source))]
    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        self.inner.renew(token, lease).await
    }

    #[instrument(level = "debug", skip_all, fields(source = %key.source))]
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        self.inner.lookup(key).await
    }

    #[instrument(level = "debug", skip_all, fields(source = %key.source))]
    async fn record(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        self.inner.record(key).await
    }
}
