//! A store of one's own: claims kept in a `HashMap` under one mutex, decided by idemgate's claim
//! rules ([`idemgate::machine`]), so it answers exactly as the engines do. It implements
//! [`ClaimStore`] and [`Identity`], and says in [`Capabilities`] that it has nothing else (no
//! inbox, no sweeping, no history queries): asked for one, [`AnyStore`](idemgate::AnyStore)
//! answers [`StoreError::Unsupported`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate::engines::core::{Capabilities, Clock, Identity, Prior, SteadyClock};
use idemgate::machine::{self, FinishStep};
use idemgate::{
    ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, EventView, HistoryEntry, HistoryOutcome,
    Key, Record, RecordResult, StoreError, Timestamp,
};

/// Records and their history, in memory. Clones share them.
#[derive(Debug, Clone)]
pub struct OwnStore {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
struct State {
    records: HashMap<Key, Record>,
    history: HashMap<Key, Vec<HistoryEntry>>,
}

impl OwnStore {
    /// A store on `clock` (the host's steady clock, or a test's manual one).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Arc::default(),
            clock,
        }
    }

    /// A store on the host's steady clock.
    #[allow(dead_code)]
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SteadyClock::new()))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Completes or releases: the rules decide, the write and its history row go together.
    fn finish(
        &self,
        token: &ClaimToken,
        decide: impl FnOnce(&ClaimToken, Option<&Record>, Timestamp) -> Option<FinishStep>,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let stale = || StoreError::StaleToken {
            key: token.key.clone(),
            attempt: token.attempt,
        };
        let step = decide(token, st.records.get(&token.key), now).ok_or_else(stale)?;
        let fingerprint = st.records.get(&token.key).and_then(|r| r.fingerprint);
        let outcome = match step {
            FinishStep::Nothing => return Ok(()),
            FinishStep::Completed => {
                return Err(StoreError::Completed {
                    key: token.key.clone(),
                    attempt: token.attempt,
                });
            }
            FinishStep::Update(record, outcome) => {
                st.records.insert(token.key.clone(), record);
                outcome
            }
            FinishStep::Delete(outcome) => {
                st.records.remove(&token.key);
                outcome
            }
        };
        st.history
            .entry(token.key.clone())
            .or_default()
            .push(HistoryEntry {
                outcome,
                processed: outcome == HistoryOutcome::Completed,
                attempt: Some(token.attempt),
                at: now,
                gap: None,
                fingerprint,
                note: None,
            });
        Ok(())
    }
}

impl ClaimStore for OwnStore {
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        let now = self.clock.now();
        let mut st = self.state();
        let stored = st.records.get(&req.key);
        let prior = if machine::needs_prior(&req, stored, now) {
            st.history.get(&req.key).and_then(|h| Prior::of(h))
        } else {
            None
        };
        let step = machine::claim(&req, stored, now, machine::nonce(), prior);
        if let Some(record) = step.write {
            st.records.insert(req.key.clone(), record);
        }
        st.history
            .entry(req.key.clone())
            .or_default()
            .push(HistoryEntry {
                outcome: step.history,
                processed: step.processed,
                attempt: step.attempt,
                at: now,
                gap: step.gap,
                fingerprint: req.fingerprint,
                note: None,
            });
        Ok(step.outcome)
    }

    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.finish(token, machine::complete)
    }

    /// The completed record keeps the result (the rules put it in the record they return).
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
        if let Some(record) = step.write {
            st.records.insert(token.key.clone(), record);
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

impl Identity for OwnStore {
    fn store_id(&self) -> &str {
        "own-store"
    }
}

/// Claims only: every other capability is left out.
impl Capabilities for OwnStore {
    fn engine(&self) -> &'static str {
        "own"
    }
    fn clock(&self) -> Option<&dyn Clock> {
        Some(self.clock.as_ref())
    }
}
