//! The claim state machine's operations, one script each: claim, complete and release
//! (`finish.lua`), renew, and lookup. The scripts decide; this side builds their arguments and
//! turns their replies (`crate::reply`) into core's outcomes.

use std::time::Duration;

use idemgate_core::{
    ClaimMode, ClaimOutcome, ClaimRequest, ClaimToken, EventView, HistoryOutcome, Key,
    LateDuplicates, RecordResult, RecordState, StoreError, Timestamp,
};

use super::record::{parse_history, parse_record, parse_result};
use super::script::Call;
use super::{EventKeys, RedisStore, ms};
use crate::error::RedisError;
use crate::reply;

impl RedisStore {
    pub(super) async fn run_claim(
        &self,
        req: &ClaimRequest,
        nonce: u64,
    ) -> Result<ClaimOutcome, RedisError> {
        let mode = match req.mode {
            ClaimMode::OnSuccess => "s",
            ClaimMode::OnReceipt => "r",
        };
        let late = match req.late_duplicates {
            LateDuplicates::Off => "off",
            LateDuplicates::Flag => "flag",
            LateDuplicates::Reject => "reject",
        };
        let fingerprint = req.fingerprint.map(|f| f.to_hex()).unwrap_or_default();
        let nonce_hex = format!("{nonce:016x}");
        let (holder_instance, holder_boot) = match &req.holder {
            Some(h) => (h.instance.as_str(), h.boot.to_string()),
            None => ("", String::new()),
        };
        let (reply, in_script): (redis::Value, bool) = self
            .eval(
                "claim script",
                &self.shared.scripts.claim,
                &req.key,
                EventKeys::Event,
                |inv| {
                    inv.arg(mode)
                        .arg(&fingerprint)
                        .arg(ms(req.lease))
                        .arg(ms(req.ttl).max(1))
                        .arg(&nonce_hex)
                        .arg(late)
                        .arg(holder_instance)
                        .arg(&holder_boot)
                        .arg(ms(req.late_duplicate_horizon()));
                },
            )
            .await?;
        let reply::ClaimReply {
            claim,
            gap,
            expires_at,
            stream_failed,
        } = reply::ClaimReply::decode(reply)?;
        let claimed = |attempt, late_duplicate| ClaimOutcome::Claimed {
            token: ClaimToken {
                key: req.key.clone(),
                attempt,
                nonce,
            },
            expires_at,
            late_duplicate,
        };
        let (outcome, history) = match claim {
            reply::Claim::Claimed { attempt } => (claimed(attempt, None), HistoryOutcome::Claimed),
            reply::Claim::Reclaimed { attempt } => {
                (claimed(attempt, None), HistoryOutcome::Reclaimed)
            }
            reply::Claim::LateClaimed {
                attempt,
                first_seen,
            } => (
                claimed(attempt, Some(first_seen)),
                HistoryOutcome::LateDuplicate,
            ),
            reply::Claim::LateRejected { first_seen } => (
                ClaimOutcome::LateDuplicate {
                    first_seen,
                    expires_at,
                },
                HistoryOutcome::LateDuplicate,
            ),
            reply::Claim::Duplicate { first_seen } => (
                ClaimOutcome::Duplicate {
                    first_seen,
                    state: RecordState::Done,
                    expires_at,
                },
                HistoryOutcome::Duplicate,
            ),
            reply::Claim::InFlight { retry_after } => (
                ClaimOutcome::InFlight { retry_after },
                HistoryOutcome::InFlight,
            ),
            reply::Claim::Conflict { first_seen } => (
                ClaimOutcome::Conflict { first_seen },
                HistoryOutcome::Conflict,
            ),
        };
        let attempt = match &outcome {
            ClaimOutcome::Claimed { token, .. } => Some(token.attempt),
            ClaimOutcome::Duplicate { .. }
            | ClaimOutcome::LateDuplicate { .. }
            | ClaimOutcome::InFlight { .. }
            | ClaimOutcome::Conflict { .. } => None,
        };
        if !in_script {
            self.append_stream(&req.key, history, attempt, gap).await;
        } else if stream_failed {
            self.stream_failed(&req.key);
        }
        Ok(outcome)
    }

    /// Completes (`what` completed, the record keeping `result`) or releases (`what` released;
    /// `result` ignored) the claim `token` holds.
    pub(super) async fn run_finish(
        &self,
        token: &ClaimToken,
        what: HistoryOutcome,
        result: &RecordResult,
    ) -> Result<(), StoreError> {
        let (op, label) = match what {
            HistoryOutcome::Released => ("release", "release script"),
            _ => ("complete", "complete script"),
        };
        let nonce_hex = format!("{:016x}", token.nonce);
        let (kind, kept): (&str, Vec<u8>) = match result {
            RecordResult::None => ("", Vec::new()),
            RecordResult::Stored(r) => ("s", r.encode()),
            RecordResult::Withheld { size } => ("w", size.to_string().into_bytes()),
        };
        let (reply, in_script): (redis::Value, bool) = self
            .eval(
                label,
                &self.shared.scripts.finish,
                &token.key,
                EventKeys::WithResult,
                |inv| {
                    inv.arg(op)
                        .arg(token.attempt)
                        .arg(&nonce_hex)
                        .arg(kind)
                        .arg(&kept);
                },
            )
            .await?;
        match reply::Finish::decode(reply)? {
            reply::Finish::Stale => Err(StoreError::StaleToken {
                key: token.key.clone(),
                attempt: token.attempt,
            }),
            // Completing a done record again: nothing happened, nothing to record.
            reply::Finish::AlreadyDone => Ok(()),
            reply::Finish::CompletedClaim => Err(StoreError::Completed {
                key: token.key.clone(),
                attempt: token.attempt,
            }),
            reply::Finish::Completed { stream_failed }
            | reply::Finish::Released { stream_failed } => {
                if !in_script {
                    self.append_stream(&token.key, what, Some(token.attempt), None)
                        .await;
                } else if stream_failed {
                    self.stream_failed(&token.key);
                }
                Ok(())
            }
        }
    }

    pub(super) async fn run_renew(
        &self,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let nonce_hex = format!("{:016x}", token.nonce);
        // No history row: the stream stays out of it.
        let mut call = self.call(&token.key, EventKeys::Event, false);
        call.arg(token.attempt).arg(&nonce_hex).arg(ms(lease));
        let scripts = &self.shared.scripts;
        let reply = scripts
            .run(&self.conn, &scripts.renew, &call)
            .await
            .map_err(RedisError::command("renew script"))?;
        match reply::Renew::decode(reply)? {
            reply::Renew::Renewed { lease_until } => Ok(lease_until),
            // Already completed under this token: nothing to renew, the record stands until its
            // expiry.
            reply::Renew::AlreadyDone { expires_at } => Ok(expires_at),
            reply::Renew::Stale => Err(StoreError::StaleToken {
                key: token.key.clone(),
                attempt: token.attempt,
            }),
        }
    }

    pub(super) async fn run_lookup(&self, key: &Key) -> Result<EventView, RedisError> {
        let (retention, cap) = self.shared.history_args;
        let mut call = Call::default();
        call.key(self.shared.keys.event(key))
            .key(self.shared.keys.result(key))
            .arg(retention)
            .arg(cap);
        // r as stored (when live), the event's fingerprint g and holder o, the rows, and the
        // result key's value (when the record is completed).
        type Stored = (
            Option<String>,
            Option<String>,
            Option<String>,
            Vec<String>,
            Option<Vec<u8>>,
        );
        let scripts = &self.shared.scripts;
        let (record, g, o, rows, result): Stored = scripts
            .run(&self.conn, &scripts.lookup, &call)
            .await
            .map_err(RedisError::command("lookup script"))?;
        let (g, o) = (g.as_deref(), o.as_deref());
        let record = record
            .map(|r| parse_record(&r, g, o).ok_or_else(|| RedisError::reply("lookup script", r)))
            .transpose()?
            .map(|mut rec| {
                if let Some(kept) = result {
                    rec.result = parse_result(&kept, rec.nonce).ok_or_else(|| {
                        RedisError::reply("lookup script", String::from_utf8_lossy(&kept))
                    })?;
                }
                Ok::<_, RedisError>(rec)
            })
            .transpose()?;
        let history = rows
            .into_iter()
            .map(|h| parse_history(&h, g).ok_or_else(|| RedisError::reply("lookup script", h)))
            .collect::<Result<_, _>>()?;
        Ok(EventView {
            key: key.clone(),
            record,
            history,
        })
    }
}
