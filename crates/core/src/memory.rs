//! An in-memory store with an injectable clock: for tests, and for trying idemgate out.
//!
//! Nothing survives the process. Every operation holds one mutex, so each is atomic. Each store
//! gets a random [`Identity`] when it is made; its clones share it. The [`crate::inbox::Inbox`]
//! queue lives beside the records, under the same mutex (`memory/inbox.rs`).

mod inbox;

use crate::HistoryRetention;
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::claim::{
    ClaimOutcome, ClaimRequest, ClaimToken, EventView, HistoryEntry, HistoryOutcome, Holder, Prior,
    Record,
};
use crate::key::{InstanceName, Key};
use crate::machine::{self, FinishStep};
use crate::result::RecordResult;
use std::time::Duration;

use crate::advise::{Observation, Tally};
use crate::store::{
    Boot, BootRequest, ClaimStore, HistoryQuery, Identity, Instances, SourceStats, Stats,
    StoreError, StoreStats, Sweep, Timeline, TimelineCounts,
};
use crate::time::{Clock, SteadyClock, Timestamp};

/// The in-memory store. Clones share one state.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    id: Arc<str>,
}

#[derive(Debug, Default)]
struct State {
    records: HashMap<Key, Record>,
    history: HashMap<Key, Vec<HistoryEntry>>,
    history_rows: u64,
    /// Each instance's latest boot and when it started.
    boots: HashMap<InstanceName, machine::BootRow>,
    /// The inbox queue: items by id (ids grow, so by id is oldest first), dead letters included.
    items: BTreeMap<i64, inbox::Item>,
    /// The last item id given out.
    last_item: i64,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store on the host's clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SteadyClock::new()))
    }

    /// A store on `clock` (a [`crate::ManualClock`] in tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: Arc::default(),
            clock,
            id: machine::random_store_id().into(),
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied step: every step computes
        // first and writes after.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn finish(
        &self,
        token: &ClaimToken,
        decide: impl FnOnce(&ClaimToken, Option<&Record>, Timestamp) -> Option<FinishStep>,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let step = decide(token, st.records.get(&token.key), now).ok_or_else(|| {
            StoreError::StaleToken {
                key: token.key.clone(),
                attempt: token.attempt,
            }
        })?;
        let fingerprint = st.records.get(&token.key).and_then(|r| r.fingerprint);
        let outcome = match step {
            FinishStep::Nothing => return Ok(()),
            FinishStep::Completed => {
                return Err(StoreError::Completed {
                    key: token.key.clone(),
                    attempt: token.attempt,
                });
            }
            FinishStep::Update(rec, outcome) => {
                st.records.insert(token.key.clone(), rec);
                outcome
            }
            FinishStep::Delete(outcome) => {
                st.records.remove(&token.key);
                outcome
            }
        };
        st.append(
            &token.key,
            HistoryEntry {
                outcome,
                processed: outcome == HistoryOutcome::Completed,
                attempt: Some(token.attempt),
                at: now,
                gap: None,
                fingerprint,
                note: None,
            },
        );
        Ok(())
    }
}

impl State {
    fn append(&mut self, key: &Key, entry: HistoryEntry) {
        self.history.entry(key.clone()).or_default().push(entry);
        self.history_rows += 1;
    }

    /// Decides `req` by [`machine::claim`] and applies its write and history row.
    fn claim(&mut self, req: &ClaimRequest, now: Timestamp) -> ClaimOutcome {
        let stored = self.records.get(&req.key);
        let prior = if machine::needs_prior(req, stored, now) {
            self.history.get(&req.key).and_then(|h| Prior::of(h))
        } else {
            None
        };
        let step = machine::claim(req, stored, now, machine::nonce(), prior);
        if let Some(rec) = step.write {
            self.records.insert(req.key.clone(), rec);
        }
        self.append(
            &req.key,
            HistoryEntry {
                outcome: step.history,
                processed: step.processed,
                attempt: step.attempt,
                at: now,
                gap: step.gap,
                fingerprint: req.fingerprint,
                note: None,
            },
        );
        step.outcome
    }
}

impl ClaimStore for MemoryStore {
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        let now = self.clock.now();
        Ok(self.state().claim(&req, now))
    }

    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.finish(token, machine::complete)
    }

    async fn complete_keeping(
        &self,
        token: &ClaimToken,
        result: RecordResult,
    ) -> Result<(), StoreError> {
        self.finish(token, |token, stored, now| {
            machine::complete_keeping(token, stored, now, result)
        })
    }

    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.finish(token, machine::release)
    }

    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let step =
            machine::renew(token, st.records.get(&token.key), now, lease).ok_or_else(|| {
                StoreError::StaleToken {
                    key: token.key.clone(),
                    attempt: token.attempt,
                }
            })?;
        if let Some(rec) = step.write {
            st.records.insert(token.key.clone(), rec);
        }
        Ok(step.until)
    }

    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        let now = self.clock.now();
        let st = self.state();
        Ok(EventView {
            key: key.clone(),
            record: machine::live(st.records.get(key), now).cloned(),
            history: st.history.get(key).cloned().unwrap_or_default(),
        })
    }
}

impl Identity for MemoryStore {
    fn store_id(&self) -> &str {
        &self.id
    }
}

impl Instances for MemoryStore {
    async fn register_boot(&self, req: &BootRequest) -> Result<Boot, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let instance = &req.instance;
        let row = machine::register(req, st.boots.get(instance), now).map_err(|live| {
            StoreError::InstanceLive {
                live: Box::new(live),
            }
        })?;
        let boot = row.boot;
        st.boots.insert(instance.clone(), row);
        let freed: Vec<(Key, Record)> = st
            .records
            .iter()
            .filter_map(|(k, r)| Some((k.clone(), machine::abandon(instance, boot, Some(r), now)?)))
            .collect();
        st.free_items(instance, boot, now);
        for (key, rec) in &freed {
            let entry = HistoryEntry {
                outcome: HistoryOutcome::Abandoned,
                processed: false,
                attempt: Some(rec.attempt),
                at: now,
                gap: None,
                fingerprint: rec.fingerprint,
                note: None,
            };
            st.records.insert(key.clone(), rec.clone());
            st.append(key, entry);
        }
        Ok(Boot {
            holder: Holder {
                instance: instance.clone(),
                boot,
            },
            started_at: now,
            freed: freed.len() as u64,
        })
    }

    async fn heartbeat(&self, holder: &Holder, lease: Duration) -> Result<Timestamp, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let row = machine::heartbeat(holder, st.boots.get(&holder.instance), now, lease).map_err(
            |by| StoreError::Superseded {
                holder: holder.clone(),
                by,
            },
        )?;
        let until = row.alive_until.unwrap_or(now);
        st.boots.insert(holder.instance.clone(), row);
        Ok(until)
    }

    async fn end_boot(&self, holder: &Holder) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        if let Some(row) = machine::end_boot(holder, st.boots.get(&holder.instance), now) {
            st.boots.insert(holder.instance.clone(), row);
        }
        Ok(())
    }
}

impl Sweep for MemoryStore {
    async fn sweep_expired(&self, batch: NonZeroU32) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let expired: Vec<Key> = st
            .records
            .iter()
            .filter(|(_, r)| r.expires_at <= now)
            .map(|(k, _)| k.clone())
            .take(batch.get() as usize)
            .collect();
        for key in &expired {
            st.records.remove(key);
        }
        Ok(expired.len() as u64)
    }
}

impl HistoryQuery for MemoryStore {
    async fn has_source(&self, source: &crate::SourceName) -> Result<bool, StoreError> {
        let st = self.state();
        Ok(st.history.keys().any(|k| k.source == *source)
            || st.records.keys().any(|k| k.source == *source))
    }

    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        let since = self.clock.now().minus(period);
        let st = self.state();
        let mut tally = Tally::default();
        let now = self.clock.now();
        for (key, rows) in &st.history {
            for h in rows.iter().filter(|h| h.at >= since) {
                tally.add(key.source.clone(), h.outcome, h.gap);
                tally.seen(&key.source, now.since(h.at));
            }
        }
        Ok(tally.finish(period))
    }
}

impl Timeline for MemoryStore {
    async fn recent(
        &self,
        source: &crate::SourceName,
        limit: NonZeroU32,
    ) -> Result<Vec<crate::store::Recent>, StoreError> {
        let st = self.state();
        let mut rows: Vec<crate::store::Recent> = st
            .history
            .iter()
            .filter(|(k, _)| k.source == *source)
            .flat_map(|(k, rows)| {
                rows.iter().map(|h| crate::store::Recent {
                    event_id: k.event_id.clone(),
                    outcome: h.outcome,
                    at: h.at,
                    attempt: h.attempt,
                })
            })
            .collect();
        // Newest first; rows of one instant in no particular order, as the SQL stores give them.
        rows.sort_by_key(|r| std::cmp::Reverse(r.at));
        rows.truncate(limit.get() as usize);
        Ok(rows)
    }

    async fn timeline(
        &self,
        source: &crate::SourceName,
        bucket_secs: NonZeroU32,
        buckets: NonZeroU32,
    ) -> Result<TimelineCounts, StoreError> {
        let now = self.clock.now();
        let (start, _) = TimelineCounts::window(now, bucket_secs, buckets);
        let width = i64::from(bucket_secs.get()) * 1_000;
        let st = self.state();
        let mut counts: HashMap<(i64, HistoryOutcome), u64> = HashMap::new();
        for rows in st
            .history
            .iter()
            .filter(|(k, _)| k.source == *source)
            .map(|(_, rows)| rows)
        {
            for h in rows.iter().filter(|h| h.at >= start) {
                let i = (h.at.as_millis() - start.as_millis()) / width;
                *counts.entry((i, h.outcome)).or_default() += 1;
            }
        }
        Ok(TimelineCounts::from_rows(
            now,
            bucket_secs,
            buckets,
            counts.into_iter().map(|((i, o), n)| (i, o, n)),
        ))
    }
}

impl HistoryRetention for MemoryStore {
    async fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        let cutoff = self.clock.now().minus(retention);
        let mut st = self.state();
        let mut left = batch.get() as usize;
        let mut purged = 0u64;
        for rows in st.history.values_mut() {
            let old = rows.iter().take_while(|h| h.at < cutoff).count().min(left);
            rows.drain(..old);
            left -= old;
            purged += old as u64;
        }
        st.history.retain(|_, rows| !rows.is_empty());
        st.history_rows -= purged;
        Ok(purged)
    }
}

impl Stats for MemoryStore {
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let now = self.clock.now();
        let st = self.state();
        let mut per: BTreeMap<&crate::SourceName, SourceStats> = BTreeMap::new();
        for (key, rec) in &st.records {
            let s = per.entry(&key.source).or_insert_with(|| SourceStats {
                source: key.source.clone(),
                live: 0,
                expired: 0,
                oldest: None,
            });
            if rec.expires_at > now {
                s.live += 1;
            } else {
                s.expired += 1;
            }
            s.oldest = Some(s.oldest.map_or(rec.first_seen, |o| o.min(rec.first_seen)));
        }
        let per_source: Vec<SourceStats> = per.into_values().collect();
        Ok(StoreStats {
            live: per_source.iter().map(|s| s.live).sum(),
            expired: per_source.iter().map(|s| s.expired).sum(),
            oldest: per_source.iter().filter_map(|s| s.oldest).min(),
            per_source,
            size_bytes: None,
            history_rows: st.history_rows,
        })
    }
}

impl crate::object::Capabilities for MemoryStore {
    fn engine(&self) -> &'static str {
        "memory"
    }
    fn instances(&self) -> Option<&dyn crate::object::DynInstances> {
        Some(self)
    }
    fn sweep(&self) -> Option<&dyn crate::object::DynSweep> {
        Some(self)
    }
    fn history(&self) -> Option<&dyn crate::object::DynHistory> {
        Some(self)
    }
    fn stats(&self) -> Option<&dyn crate::object::DynStats> {
        Some(self)
    }
    fn timeline(&self) -> Option<&dyn crate::object::DynTimeline> {
        Some(self)
    }
    fn inbox(&self) -> Option<&dyn crate::object::DynInbox> {
        Some(self)
    }
    fn clock(&self) -> Option<&dyn crate::time::Clock> {
        Some(self.clock().as_ref())
    }
}
