//! The in-memory store's inbox queue: items beside the records, under the store's one mutex.
//!
//! History rows the queue writes: `completed` (processed) when an item is delivered,
//! `attempt_failed` (with the error in `note`) for each attempt retried later, `dead_lettered`
//! (with the last error) and `replayed` (not processed) when it dies and comes back. A dead letter was
//! never delivered, so its row does not claim the event was processed; nor does it undo the
//! enqueue's `claimed` row (processed, as every on-receipt claim is): [`crate::Prior`] reads
//! only processed and `released` rows, so a delivery after the record's TTL is still a late
//! duplicate, and within the TTL the record is `done` and every retry a duplicate.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use super::{MemoryStore, State};
use crate::claim::{ClaimMode, ClaimOutcome, ClaimRequest, HistoryEntry, HistoryOutcome, Holder};
use crate::inbox::{
    AttemptLog, DeadLetter, Failure, Inbox, InboxStats, ItemRef, LastFailure, QueueEntry,
    QueuedItem, ReplayFilter, Taken,
};
use crate::key::{InstanceName, Key, SourceName};
use crate::store::StoreError;
use crate::time::Timestamp;

/// One queue item, dead or alive.
#[derive(Debug)]
pub(super) struct Item {
    key: Key,
    queued: QueuedItem,
    received_at: Timestamp,
    due_at: Timestamp,
    /// Takes so far, replays included; the fence.
    attempt: u32,
    /// Takes in the current budget (reset by a replay).
    tries: u32,
    /// Set while taken (live or lapsed); cleared by a report, a replay, or the holder's next boot.
    lease_until: Option<Timestamp>,
    holder: Option<Holder>,
    dead_at: Option<Timestamp>,
    attempts: Vec<AttemptLog>,
}

impl Item {
    fn due(&self, now: Timestamp) -> bool {
        self.dead_at.is_none()
            && self.due_at <= now
            && self.lease_until.is_none_or(|until| until <= now)
    }

    fn in_flight(&self, now: Timestamp) -> bool {
        self.dead_at.is_none() && self.lease_until.is_some_and(|until| until > now)
    }
}

fn stale(item: &ItemRef) -> StoreError {
    StoreError::StaleToken {
        key: item.key.clone(),
        attempt: item.attempt,
    }
}

impl State {
    /// The item `item` names, while that attempt of it is still taken (its lease may have lapsed,
    /// as long as nobody took it again).
    fn held(&mut self, item: &ItemRef) -> Result<&mut Item, StoreError> {
        self.items
            .get_mut(&item.id)
            .filter(|it| it.attempt == item.attempt && it.lease_until.is_some())
            .ok_or_else(|| stale(item))
    }

    /// Queues `item` for `key`, due now.
    fn queue(&mut self, key: Key, item: QueuedItem, now: Timestamp) {
        self.last_item += 1;
        let id = self.last_item;
        self.items.insert(
            id,
            Item {
                key,
                queued: item,
                received_at: now,
                due_at: now,
                attempt: 0,
                tries: 0,
                lease_until: None,
                holder: None,
                dead_at: None,
                attempts: Vec::new(),
            },
        );
    }

    /// Appends an inbox history row for `key`, with the record's fingerprint while it is stored.
    fn append_inbox(
        &mut self,
        key: &Key,
        outcome: HistoryOutcome,
        attempt: u32,
        now: Timestamp,
        note: Option<&str>,
    ) {
        self.append_inbox_gap(key, outcome, attempt, now, note, None);
    }

    /// As [`State::append_inbox`], with the row's gap (a delivery's time since receipt).
    fn append_inbox_gap(
        &mut self,
        key: &Key,
        outcome: HistoryOutcome,
        attempt: u32,
        now: Timestamp,
        note: Option<&str>,
        gap: Option<Duration>,
    ) {
        let fingerprint = self.records.get(key).and_then(|r| r.fingerprint);
        self.append(
            key,
            HistoryEntry {
                outcome,
                processed: outcome == HistoryOutcome::Completed,
                attempt: Some(attempt),
                at: now,
                gap,
                fingerprint,
                note: note.map(str::to_owned),
            },
        );
    }

    /// Ends the leases earlier boots of `instance` hold on queue items: they are due at once.
    pub(super) fn free_items(&mut self, instance: &InstanceName, boot: u64, now: Timestamp) {
        for item in self.items.values_mut() {
            let earlier = matches!(
                &item.holder,
                Some(Holder { instance: i, boot: b }) if i == instance && *b < boot
            );
            if earlier && item.in_flight(now) {
                item.lease_until = None;
            }
        }
    }
}

impl Inbox for MemoryStore {
    async fn enqueue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
    ) -> Result<ClaimOutcome, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let req = req.mode(ClaimMode::OnReceipt);
        let outcome = st.claim(&req, now);
        if matches!(outcome, ClaimOutcome::Claimed { .. }) {
            st.queue(req.key, item, now);
        }
        Ok(outcome)
    }

    async fn requeue(
        &self,
        req: ClaimRequest,
        item: QueuedItem,
        reason: &str,
    ) -> Result<ClaimOutcome, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let req = req.mode(ClaimMode::OnReceipt);
        let outcome = st.claim(&req, now);
        st.queue(req.key.clone(), item, now);
        st.append_inbox(&req.key, HistoryOutcome::Replayed, 0, now, Some(reason));
        Ok(outcome)
    }

    async fn take(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
        lease: Duration,
        holder: Option<&Holder>,
    ) -> Result<Vec<Taken>, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let lease_until = now.plus(lease);
        Ok(st
            .items
            .iter_mut()
            .filter(|(_, it)| it.key.source == *source && it.due(now))
            .take(limit.get() as usize)
            .map(|(&id, it)| {
                it.attempt = it.attempt.saturating_add(1);
                it.tries = it.tries.saturating_add(1);
                it.lease_until = Some(lease_until);
                it.holder = holder.cloned();
                Taken {
                    item: ItemRef {
                        id,
                        attempt: it.attempt,
                        key: it.key.clone(),
                    },
                    key: it.key.clone(),
                    queued: it.queued.clone(),
                    received_at: it.received_at,
                    lease_until,
                    tries: it.tries,
                }
            })
            .collect())
    }

    async fn delivered(&self, item: ItemRef) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        st.held(&item)?;
        let gone = st.items.remove(&item.id).expect("held just now");
        // The gap of a delivered item: its time in the queue and on the way (the queue lag).
        st.append_inbox_gap(
            &gone.key,
            HistoryOutcome::Completed,
            item.attempt,
            now,
            None,
            Some(now.since(gone.received_at)),
        );
        Ok(())
    }

    async fn retry_later(
        &self,
        item: ItemRef,
        failure: &Failure,
        delay: Duration,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let it = st.held(&item)?;
        it.attempts.push(log(&item, failure, now));
        it.due_at = now.plus(delay);
        it.lease_until = None;
        it.holder = None;
        let key = it.key.clone();
        st.append_inbox(
            &key,
            HistoryOutcome::AttemptFailed,
            item.attempt,
            now,
            Some(&failure.error),
        );
        Ok(())
    }

    async fn dead_letter(&self, item: ItemRef, failure: &Failure) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let it = st.held(&item)?;
        it.attempts.push(log(&item, failure, now));
        it.dead_at = Some(now);
        it.lease_until = None;
        it.holder = None;
        let key = it.key.clone();
        st.append_inbox(
            &key,
            HistoryOutcome::DeadLettered,
            item.attempt,
            now,
            Some(&failure.error),
        );
        Ok(())
    }

    async fn dead_letters(
        &self,
        filter: &ReplayFilter,
        limit: NonZeroU32,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let now = self.clock.now();
        let st = self.state();
        let mut dead: Vec<DeadLetter> = st
            .items
            .iter()
            .filter_map(|(&id, it)| {
                let dead_at = it.dead_at?;
                filter.selects(&it.key, dead_at, now).then(|| DeadLetter {
                    id,
                    key: it.key.clone(),
                    queued: it.queued.clone(),
                    received_at: it.received_at,
                    dead_at,
                    attempts: it.attempts.clone(),
                })
            })
            .collect();
        dead.sort_by_key(|d| (d.dead_at, d.id));
        dead.truncate(limit.get() as usize);
        Ok(dead)
    }

    async fn queued(&self, key: &Key) -> Result<Vec<QueueEntry>, StoreError> {
        let now = self.clock.now();
        let st = self.state();
        Ok(st
            .items
            .iter()
            .filter(|(_, it)| it.key == *key)
            .map(|(&id, it)| QueueEntry {
                id,
                received_at: it.received_at,
                due_at: it.due_at,
                attempt: it.attempt,
                in_flight_until: it.lease_until.filter(|_| it.in_flight(now)),
                dead_at: it.dead_at,
                attempts: it.attempts.clone(),
            })
            .collect())
    }

    async fn replay_dead_letters(
        &self,
        filter: &ReplayFilter,
        reason: &str,
    ) -> Result<u64, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let mut replayed = Vec::new();
        for item in st.items.values_mut() {
            let selected = item
                .dead_at
                .is_some_and(|at| filter.selects(&item.key, at, now));
            if selected {
                item.dead_at = None;
                item.due_at = now;
                item.tries = 0;
                replayed.push((item.key.clone(), item.attempt));
            }
        }
        for (key, attempt) in &replayed {
            st.append_inbox(key, HistoryOutcome::Replayed, *attempt, now, Some(reason));
        }
        Ok(replayed.len() as u64)
    }

    async fn purge_dead_letters(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        let cutoff = self.clock.now().minus(retention);
        let mut st = self.state();
        let mut old: Vec<(Timestamp, i64)> = st
            .items
            .iter()
            .filter_map(|(&id, it)| Some((it.dead_at.filter(|at| *at < cutoff)?, id)))
            .collect();
        old.sort_unstable();
        old.truncate(batch.get() as usize);
        for (_, id) in &old {
            st.items.remove(id);
        }
        Ok(old.len() as u64)
    }

    async fn inbox_stats(&self) -> Result<Vec<InboxStats>, StoreError> {
        let now = self.clock.now();
        let st = self.state();
        let mut per: BTreeMap<&SourceName, InboxStats> = BTreeMap::new();
        for item in st.items.values() {
            let s = per.entry(&item.key.source).or_insert_with(|| InboxStats {
                source: item.key.source.clone(),
                pending: 0,
                in_flight: 0,
                dead: 0,
                oldest_pending: None,
                failing: 0,
                last_failure: None,
            });
            if let Some(last) = item.attempts.last()
                && s.last_failure
                    .as_ref()
                    .is_none_or(|l| (l.attempt.at, l.attempt.attempt) < (last.at, last.attempt))
            {
                s.last_failure = Some(LastFailure {
                    event_id: item.key.event_id.clone(),
                    attempt: last.clone(),
                });
            }
            if item.dead_at.is_some() {
                s.dead += 1;
                continue;
            }
            if !item.attempts.is_empty() {
                s.failing += 1;
            }
            if item.in_flight(now) {
                s.in_flight += 1;
            } else {
                s.pending += 1;
            }
            let age = now.since(item.received_at);
            s.oldest_pending = Some(s.oldest_pending.map_or(age, |o| o.max(age)));
        }
        Ok(per.into_values().collect())
    }
}

fn log(item: &ItemRef, failure: &Failure, now: Timestamp) -> AttemptLog {
    AttemptLog {
        attempt: item.attempt,
        at: now,
        status: failure.status,
        error: failure.error.clone(),
    }
}
