//! [`Instances`](idemgate_core::Instances): a new boot of a gateway instance, and the claims its
//! earlier boots held, freed one event at a time.

use std::time::Duration;

use idemgate_core::{Boot, BootRequest, HistoryOutcome, Holder, LiveBoot, RecordState, Timestamp};

use super::RedisStore;
use super::record::parse_record;
use super::script::Call;
use crate::error::RedisError;
use crate::reply;

impl RedisStore {
    /// Registers the boot (one operation on the instance's key), then walks every master's
    /// events (`SCAN`, one pipelined `HMGET` of each record with its fingerprint and holder per
    /// page) and runs the abandon operation on each whose record names `instance` under an
    /// earlier boot; the operation decides by the server's clock and writes the `abandoned` row.
    /// Each event is freed atomically; the walk as a whole is not (a crash during it leaves the
    /// rest to their leases).
    pub(super) async fn run_boot(
        &self,
        req: &BootRequest,
    ) -> Result<Result<Boot, LiveBoot>, RedisError> {
        let instance = &req.instance;
        let mut call = Call::default();
        call.key(self.shared.keys.instance(instance))
            .arg("boot")
            .arg(u64::try_from(req.lease.as_millis()).unwrap_or(u64::MAX))
            .arg(&req.host)
            .arg(req.pid)
            .arg(&req.process)
            .arg(req.supersede.map(|b| b.to_string()).unwrap_or_default());
        let (boot, started) = match self.boot_script(&call).await? {
            reply::BootReply::Booted { boot, started_at } => (boot, started_at.as_millis()),
            reply::BootReply::Live {
                boot,
                started_at,
                host,
                pid,
                alive_until,
                now,
                process,
            } => {
                return Ok(Err(LiveBoot {
                    holder: Holder {
                        instance: instance.clone(),
                        boot,
                    },
                    host,
                    pid,
                    process,
                    started_at,
                    alive_until,
                    remaining: alive_until.since(now),
                }));
            }
            other => {
                return Err(RedisError::reply(
                    "boot script",
                    format!("{other:?} to a boot"),
                ));
            }
        };
        let keys = &self.shared.keys;
        let mut conn = self.conn.clone();
        let pattern = keys.events_pattern();
        let mut freed = 0;
        for node in conn.masters().await.map_err(RedisError::command("PING"))? {
            let mut cursor = 0;
            loop {
                let (next, page) = conn
                    .scan_page(&node, cursor, &pattern)
                    .await
                    .map_err(RedisError::command("SCAN"))?;
                // Each event's record r, fingerprint g and holder o (see `lua/common.lua`).
                let records: Vec<[Option<String>; 3]> = if page.is_empty() {
                    Vec::new()
                } else {
                    let mut pipe = redis::pipe();
                    for key in &page {
                        pipe.cmd("HMGET").arg(key).arg(&["r", "g", "o"]);
                    }
                    conn.pipeline_on_node(&node, pipe)
                        .await
                        .map_err(RedisError::command("HMGET"))?
                        .into_iter()
                        .map(redis::from_redis_value)
                        .collect::<Result<_, _>>()
                        .map_err(|e| RedisError::command("HMGET")(e.into()))?
                };
                for (event_key, [record, g, o]) in page.iter().zip(records) {
                    let held_before = record
                        .as_deref()
                        .and_then(|r| parse_record(r, g.as_deref(), o.as_deref()))
                        .is_some_and(|r| {
                            r.state == RecordState::Processing
                                && r.holder
                                    .is_some_and(|h| h.instance == *instance && h.boot < boot)
                        });
                    if !held_before {
                        continue;
                    }
                    let Some(key) = keys.key_of(event_key) else {
                        continue;
                    };
                    let (reply, in_script): (redis::Value, bool) = self
                        .eval(
                            "abandon script",
                            &self.shared.scripts.abandon,
                            &key,
                            super::EventKeys::Event,
                            |inv| {
                                inv.arg(instance.as_str()).arg(boot);
                            },
                        )
                        .await?;
                    let reply::Abandon::Abandoned {
                        attempt,
                        stream_failed,
                    } = reply::Abandon::decode(reply)?
                    else {
                        continue;
                    };
                    freed += 1;
                    if !in_script {
                        self.append_stream(&key, HistoryOutcome::Abandoned, Some(attempt), None)
                            .await;
                    } else if stream_failed {
                        self.stream_failed(&key);
                    }
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(Ok(Boot {
            holder: Holder {
                instance: instance.clone(),
                boot,
            },
            started_at: Timestamp::from_millis(started),
            freed,
        }))
    }

    /// Renews `holder`'s liveness lease by `lease`, or ends it (`None`): the lease's new end, or
    /// the boot that superseded it.
    pub(super) async fn run_beat(
        &self,
        holder: &Holder,
        lease: Option<Duration>,
    ) -> Result<Result<Timestamp, u64>, RedisError> {
        let mut call = Call::default();
        call.key(self.shared.keys.instance(&holder.instance));
        match lease {
            Some(lease) => call
                .arg("beat")
                .arg(holder.boot)
                .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX)),
            None => call.arg("end").arg(holder.boot),
        };
        match self.boot_script(&call).await? {
            reply::BootReply::Until(until) => Ok(Ok(until)),
            reply::BootReply::Superseded(by) => Ok(Err(by)),
            other => Err(RedisError::reply(
                "boot script",
                format!("{other:?} to a heartbeat"),
            )),
        }
    }

    async fn boot_script(&self, call: &Call) -> Result<reply::BootReply, RedisError> {
        let scripts = &self.shared.scripts;
        let value: redis::Value = scripts
            .run(&self.conn, &scripts.boot, call)
            .await
            .map_err(RedisError::command("boot script"))?;
        reply::BootReply::decode(value)
    }
}
