//! Store mode: Redis (standalone or Cluster) as the only store.
//!
//! Each operation is one Lua script (`src/lua/`) over one hash per event, holding its record and
//! its capped history. The scripts read the server's clock (`TIME`), so every expiry decision is
//! the server's: a record past its `expires_at` is absent to them, and the hash itself expires
//! (`PEXPIREAT`) once both the record and the history retention are over.
//!
//! History lives in two places:
//! - per event, in the event's hash, written by the same script as the state change, so
//!   [`ClaimStore::lookup`] shows exactly what happened to the event, in order;
//! - per source, in a stream capped at about [`RedisConfig::source_stream_maxlen`] entries. On a
//!   standalone server the script itself adds to it; on a Cluster a separate `XADD` follows the
//!   script (a source's stream lives in another slot than its events, and a Cluster script may
//!   only touch one slot). It is **best-effort**: a failed or missed `XADD` is logged and skipped,
//!   and the cap drops old entries. It is a feed for the TTL advisor and dashboards, not an audit
//!   log; keep audit history in a SQL store.

use idemgate_core::HistoryRetention;
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use std::time::Instant;

use idemgate_core::advise::{Observation, Tally};
use idemgate_core::{
    Boot, ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, EventView, Fingerprint,
    HistoryEntry, HistoryOutcome, HistoryQuery, Holder, Identity, InstanceName, Instances, Key,
    LateDuplicates, Record, RecordState, SourceName, SourceStats, Stats, StoreError, StoreStats,
    Timestamp, machine,
};
use redis::{FromRedisValue, Script, ScriptInvocation, Value};
use tracing::{info, instrument, warn};

use crate::config::RedisConfig;
use crate::conn::{Conn, Node, Timeouts};
use crate::error::RedisError;
use crate::keys::Keys;
use crate::limiter::LogLimiter;

/// The Redis store (store mode). Cheap to clone: clones share one multiplexed connection.
#[derive(Debug, Clone)]
pub struct RedisStore {
    conn: Conn,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    cfg: RedisConfig,
    keys: Keys,
    scripts: Scripts,
    /// `ARGV[1]` and `ARGV[2]` of every script: history retention (ms) and cap.
    history_args: (u64, usize),
    /// The scripts add to the source's stream themselves (standalone; a Cluster script cannot
    /// reach the stream's slot). Turned off for good by a server that refuses it (CROSSSLOT).
    stream_in_script: AtomicBool,
    stream_errors: LogLimiter,
    /// The streams found by the last purge's keyspace walk, and when: a purge runs in many
    /// batches, and walking every key for each would cost more than the trimming.
    purge_streams: Mutex<Option<(Instant, SourceStreams)>>,
    /// `<prefix>store_id`, read (or created) at connect.
    store_id: String,
}

#[derive(Debug)]
struct Scripts {
    claim: Script,
    finish: Script,
    lookup: Script,
    renew: Script,
    abandon: Script,
    boot: Script,
}

impl Scripts {
    fn new() -> Self {
        macro_rules! script {
            ($file:literal) => {
                Script::new(concat!(
                    include_str!("lua/common.lua"),
                    "\n",
                    include_str!(concat!("lua/", $file))
                ))
            };
        }
        Self {
            claim: script!("claim.lua"),
            finish: script!("finish.lua"),
            lookup: script!("lookup.lua"),
            renew: script!("renew.lua"),
            abandon: script!("abandon.lua"),
            // Not an event script: no common.lua.
            boot: Script::new(include_str!("lua/boot.lua")),
        }
    }
}

/// Each master with the source streams it holds: `(source, key)`.
type SourceStreams = Vec<(Node, Vec<(SourceName, String)>)>;

/// The longest duration a script is given, in ms (keeps Lua's doubles exact).
const MAX_MS: u64 = 1 << 50;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(MAX_MS).min(MAX_MS)
}

impl RedisStore {
    /// Connects, checks the server (see below) and loads the scripts.
    ///
    /// The checks, on every master: `maxmemory-policy` must be `noeviction` (every idemgate key
    /// has a TTL, so `volatile-*` policies evict them too) unless
    /// [`RedisConfig::allow_eviction`] is set, which turns the refusal into a warning; a server
    /// that keeps nothing on disk (`appendonly no` and `save ""`) is a warning, since a restart
    /// then forgets every claim. When `CONFIG` is disabled the checks warn and pass.
    ///
    /// # Errors
    /// [`RedisError::Config`], [`RedisError::Connect`], [`RedisError::EvictingPolicy`], or
    /// [`RedisError::Command`] when a check or the script load fails.
    pub async fn connect(cfg: RedisConfig) -> Result<Self, RedisError> {
        cfg.validate()?;
        let timeouts = Timeouts {
            connect: cfg.connect_timeout,
            response: cfg.response_timeout,
            retries: 3,
        };
        let conn = Conn::connect(&cfg.target, timeouts)
            .await
            .map_err(|source| RedisError::Connect {
                target: cfg.target.describe(),
                source,
            })?;
        let stream_in_script =
            matches!(conn, Conn::Single(_)) && cfg.source_stream_maxlen.is_some();
        let store_id = Self::identity(&conn, &Keys::new(&cfg.key_prefix)).await?;
        let store = Self {
            conn,
            shared: Arc::new(Shared {
                stream_in_script: AtomicBool::new(stream_in_script),
                keys: Keys::new(&cfg.key_prefix),
                scripts: Scripts::new(),
                history_args: (ms(cfg.history_retention), cfg.history_per_event.get()),
                stream_errors: LogLimiter::new(Duration::from_secs(60)),
                purge_streams: Mutex::new(None),
                store_id,
                cfg,
            }),
        };
        store.check_server().await?;
        store.load_scripts().await?;
        info!(target = %store.shared.cfg.target.describe(), "Redis store ready");
        Ok(store)
    }

    /// The configuration it runs on.
    pub fn config(&self) -> &RedisConfig {
        &self.shared.cfg
    }

    /// The store's id under its prefix: created by the first store to connect (`SET NX`, no
    /// expiry), read by every later one.
    async fn identity(conn: &Conn, keys: &Keys) -> Result<String, RedisError> {
        let mut conn = conn.clone();
        let key = keys.store_id();
        redis::cmd("SET")
            .arg(&key)
            .arg(idemgate_core::store::random_store_id())
            .arg("NX")
            .query_async::<Value>(&mut conn)
            .await
            .map_err(RedisError::command("SET NX"))?;
        let id: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(RedisError::command("GET"))?;
        id.filter(|id| !id.is_empty())
            .ok_or_else(|| RedisError::reply("GET", format!("no store id under {key}")))
    }

    async fn check_server(&self) -> Result<(), RedisError> {
        let cfg = &self.shared.cfg;
        for (node, policy) in self.config_get("maxmemory-policy").await? {
            match policy {
                None => warn!(
                    %node,
                    "cannot read maxmemory-policy (CONFIG disabled or renamed?): idemgate cannot check that Redis never evicts its records"
                ),
                Some(p) if p == "noeviction" => {}
                Some(policy) if cfg.allow_eviction => warn!(
                    %node,
                    %policy,
                    "Redis runs an evicting maxmemory-policy and allow_eviction is set: an evicted record lets its event's next delivery through as new"
                ),
                Some(policy) => return Err(RedisError::EvictingPolicy { node, policy }),
            }
        }
        let appendonly: HashMap<_, _> = self.config_get("appendonly").await?.into_iter().collect();
        for (node, save) in self.config_get("save").await? {
            let aof = appendonly.get(&node).cloned().flatten();
            if aof.as_deref() == Some("no") && save.as_deref() == Some("") {
                warn!(
                    %node,
                    "Redis keeps nothing on disk (appendonly no, save \"\"): a restart forgets every claim, and deliveries in flight may then be processed twice"
                );
            }
        }
        Ok(())
    }

    /// `CONFIG GET name` on every master: `None` where it cannot be read.
    async fn config_get(&self, name: &str) -> Result<Vec<(String, Option<String>)>, RedisError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(name);
        let answers = conn
            .on_masters(cmd)
            .await
            .map_err(RedisError::command("CONFIG GET"))?;
        Ok(answers
            .into_iter()
            .map(|(node, answer)| {
                let value = answer
                    .ok()
                    .and_then(|v| redis::from_redis_value::<HashMap<String, String>>(v).ok())
                    .and_then(|mut m| m.remove(name));
                (node, value)
            })
            .collect())
    }

    async fn load_scripts(&self) -> Result<(), RedisError> {
        let mut conn = self.conn.clone();
        let s = &self.shared.scripts;
        for script in [
            &s.claim, &s.finish, &s.lookup, &s.renew, &s.abandon, &s.boot,
        ] {
            script
                .load_async(&mut conn)
                .await
                .map_err(RedisError::command("SCRIPT LOAD"))?;
        }
        Ok(())
    }

    /// Runs `script` on `key`'s event with the arguments every script takes (see
    /// `lua/common.lua`), then those `add` appends. Returns the answer and whether the script
    /// added to the source's stream itself.
    ///
    /// A single endpoint in front of shards (a cluster proxy) may refuse a script that touches
    /// two slots with CROSSSLOT before running any of it: the stream then moves out of the
    /// scripts for good, and the call is made again.
    async fn eval<T: FromRedisValue>(
        &self,
        label: &'static str,
        script: &Script,
        key: &Key,
        add: impl Fn(&mut ScriptInvocation<'_>),
    ) -> Result<(T, bool), RedisError> {
        loop {
            let in_script = self.shared.stream_in_script.load(Ordering::Relaxed);
            let mut inv = self.invocation(script, key, in_script);
            add(&mut inv);
            let mut conn = self.conn.clone();
            match inv.invoke_async(&mut conn).await {
                Ok(answer) => return Ok((answer, in_script)),
                Err(e) if in_script && e.code() == Some("CROSSSLOT") => {
                    warn!(
                        error = %e,
                        "the server refuses scripts that touch two hash slots: source streams are now written by a separate XADD after each script"
                    );
                    self.shared.stream_in_script.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(RedisError::command(label)(e)),
            }
        }
    }

    /// `script` on `key`'s event, with the arguments every script takes (see `lua/common.lua`).
    fn invocation<'a>(&self, script: &'a Script, key: &Key, stream: bool) -> ScriptInvocation<'a> {
        let s = &self.shared;
        let (retention, cap) = s.history_args;
        let mut inv = script.key(s.keys.event(key));
        inv.arg(retention).arg(cap);
        match s.cfg.source_stream_maxlen {
            Some(maxlen) if stream => {
                inv.key(s.keys.stream(&key.source))
                    .arg(maxlen.get())
                    .arg(key.event_id.as_str());
            }
            _ => {
                inv.arg(0).arg("");
            }
        }
        inv
    }

    async fn run_claim(&self, req: &ClaimRequest, nonce: u64) -> Result<ClaimOutcome, RedisError> {
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
        let ((answer, n, gap, expires_at, late_first_seen, stream_failed), in_script): (
            (String, i64, i64, i64, i64, i64),
            bool,
        ) = self
            .eval(
                "claim script",
                &self.shared.scripts.claim,
                &req.key,
                |inv| {
                    inv.arg(mode)
                        .arg(&fingerprint)
                        .arg(ms(req.lease))
                        .arg(ms(req.ttl).max(1))
                        .arg(&nonce_hex)
                        .arg(late)
                        .arg(holder_instance)
                        .arg(&holder_boot);
                },
            )
            .await?;
        let bad = || {
            RedisError::reply(
                "claim script",
                format!("{answer} {n} {gap} {expires_at} {late_first_seen}"),
            )
        };
        let expires_at = Timestamp::from_millis(expires_at);
        let token = || -> Result<ClaimToken, RedisError> {
            Ok(ClaimToken {
                key: req.key.clone(),
                attempt: u32::try_from(n).map_err(|_| bad())?,
                nonce,
            })
        };
        let (outcome, history) = match answer.as_str() {
            "claimed" | "reclaimed" | "late_claimed" => {
                let history = match answer.as_str() {
                    "claimed" => HistoryOutcome::Claimed,
                    "reclaimed" => HistoryOutcome::Reclaimed,
                    _ => HistoryOutcome::LateDuplicate,
                };
                let late_duplicate =
                    (late_first_seen >= 0).then(|| Timestamp::from_millis(late_first_seen));
                let outcome = ClaimOutcome::Claimed {
                    token: token()?,
                    expires_at,
                    late_duplicate,
                };
                (outcome, history)
            }
            "late_rejected" => (
                ClaimOutcome::LateDuplicate {
                    first_seen: Timestamp::from_millis(n),
                    expires_at,
                },
                HistoryOutcome::LateDuplicate,
            ),
            "duplicate" => (
                ClaimOutcome::Duplicate {
                    first_seen: Timestamp::from_millis(n),
                    state: RecordState::Done,
                    expires_at,
                },
                HistoryOutcome::Duplicate,
            ),
            "in_flight" => (
                ClaimOutcome::InFlight {
                    retry_after: Duration::from_millis(u64::try_from(n).map_err(|_| bad())?),
                },
                HistoryOutcome::InFlight,
            ),
            "conflict" => (
                ClaimOutcome::Conflict {
                    first_seen: Timestamp::from_millis(n),
                },
                HistoryOutcome::Conflict,
            ),
            _ => return Err(bad()),
        };
        let attempt = match &outcome {
            ClaimOutcome::Claimed { token, .. } => Some(token.attempt),
            ClaimOutcome::Duplicate { .. }
            | ClaimOutcome::LateDuplicate { .. }
            | ClaimOutcome::InFlight { .. }
            | ClaimOutcome::Conflict { .. } => None,
        };
        if !in_script {
            self.append_stream(&req.key, history, attempt, u64::try_from(gap).ok())
                .await;
        } else if stream_failed != 0 {
            self.stream_failed(&req.key);
        }
        Ok(outcome)
    }

    async fn run_finish(&self, token: &ClaimToken, what: HistoryOutcome) -> Result<(), StoreError> {
        let (op, label) = match what {
            HistoryOutcome::Released => ("release", "release script"),
            _ => ("complete", "complete script"),
        };
        let nonce_hex = format!("{:016x}", token.nonce);
        let (done, in_script): (i64, bool) = self
            .eval(label, &self.shared.scripts.finish, &token.key, |inv| {
                inv.arg(op).arg(token.attempt).arg(&nonce_hex);
            })
            .await?;
        if done == 0 {
            return Err(StoreError::StaleToken {
                key: token.key.clone(),
                attempt: token.attempt,
            });
        }
        if done == 3 {
            // Completing a done record again: nothing happened, nothing to record.
        } else if !in_script {
            self.append_stream(&token.key, what, Some(token.attempt), None)
                .await;
        } else if done == 2 {
            self.stream_failed(&token.key);
        }
        Ok(())
    }

    async fn run_renew(
        &self,
        token: &ClaimToken,
        lease: Duration,
    ) -> Result<Timestamp, StoreError> {
        let nonce_hex = format!("{:016x}", token.nonce);
        // No history row: the stream stays out of it.
        let mut inv = self.invocation(&self.shared.scripts.renew, &token.key, false);
        inv.arg(token.attempt).arg(&nonce_hex).arg(ms(lease));
        let mut conn = self.conn.clone();
        let (code, at): (i64, i64) = inv
            .invoke_async(&mut conn)
            .await
            .map_err(RedisError::command("renew script"))?;
        match code {
            1 | 3 => Ok(Timestamp::from_millis(at)),
            0 => Err(StoreError::StaleToken {
                key: token.key.clone(),
                attempt: token.attempt,
            }),
            other => Err(RedisError::reply("renew script", format!("{other} {at}")).into()),
        }
    }

    /// Registers the boot (one script on the instance's key), then walks every master's events
    /// (`SCAN`, one pipelined `HGET` of the record per page) and runs the abandon script on each
    /// whose record names `instance` under an earlier boot; the script decides by the server's
    /// clock and writes the `abandoned` row. Each event is freed atomically; the walk as a whole
    /// is not (a crash during it leaves the rest to their leases).
    async fn run_boot(&self, instance: &InstanceName) -> Result<Boot, RedisError> {
        let keys = &self.shared.keys;
        let mut conn = self.conn.clone();
        let (boot, started): (u64, i64) = self
            .shared
            .scripts
            .boot
            .key(keys.instance(instance))
            .invoke_async(&mut conn)
            .await
            .map_err(RedisError::command("boot script"))?;
        let pattern = keys.events_pattern();
        let mut freed = 0;
        for node in conn.masters().await.map_err(RedisError::command("PING"))? {
            let mut cursor = 0;
            loop {
                let (next, page) = conn
                    .scan_page(&node, cursor, &pattern)
                    .await
                    .map_err(RedisError::command("SCAN"))?;
                let records: Vec<Option<String>> = if page.is_empty() {
                    Vec::new()
                } else {
                    let mut pipe = redis::pipe();
                    for key in &page {
                        pipe.cmd("HGET").arg(key).arg("r");
                    }
                    conn.pipeline_on_node(&node, pipe)
                        .await
                        .map_err(RedisError::command("HGET"))?
                        .into_iter()
                        .map(redis::from_redis_value)
                        .collect::<Result<_, _>>()
                        .map_err(|e| RedisError::command("HGET")(e.into()))?
                };
                for (event_key, record) in page.iter().zip(records) {
                    let held_before = record.as_deref().and_then(parse_record).is_some_and(|r| {
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
                    let ((done, attempt, stream_failed), in_script): ((i64, i64, i64), bool) = self
                        .eval(
                            "abandon script",
                            &self.shared.scripts.abandon,
                            &key,
                            |inv| {
                                inv.arg(instance.as_str()).arg(boot);
                            },
                        )
                        .await?;
                    if done != 1 {
                        continue;
                    }
                    freed += 1;
                    if !in_script {
                        let attempt = u32::try_from(attempt).ok();
                        self.append_stream(&key, HistoryOutcome::Abandoned, attempt, None)
                            .await;
                    } else if stream_failed != 0 {
                        self.stream_failed(&key);
                    }
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(Boot {
            holder: Holder {
                instance: instance.clone(),
                boot,
            },
            started_at: Timestamp::from_millis(started),
            freed,
        })
    }

    /// A script could not add to the source's stream (logged at most once a minute).
    fn stream_failed(&self, key: &Key) {
        if let Some(held_back) = self.shared.stream_errors.check() {
            warn!(
                source = %key.source,
                held_back,
                "cannot append to the source's history stream (best-effort; the event's own history is intact)"
            );
        }
    }

    /// Best-effort: one entry in the source's capped stream. Failures are logged (at most once a
    /// minute) and otherwise ignored.
    async fn append_stream(
        &self,
        key: &Key,
        outcome: HistoryOutcome,
        attempt: Option<u32>,
        gap_ms: Option<u64>,
    ) {
        let Some(maxlen) = self.shared.cfg.source_stream_maxlen else {
            return;
        };
        let mut cmd = redis::cmd("XADD");
        cmd.arg(self.shared.keys.stream(&key.source))
            .arg("MAXLEN")
            .arg("~")
            .arg(maxlen.get())
            .arg("*")
            .arg("id")
            .arg(key.event_id.as_str())
            .arg("outcome")
            .arg(outcome.as_str());
        if let Some(a) = attempt {
            cmd.arg("attempt").arg(a);
        }
        if let Some(g) = gap_ms {
            cmd.arg("gap_ms").arg(g);
        }
        let mut conn = self.conn.clone();
        if let Err(error) = cmd.query_async::<Value>(&mut conn).await
            && let Some(held_back) = self.shared.stream_errors.check()
        {
            warn!(
                %error,
                source = %key.source,
                held_back,
                "cannot append to the source's history stream (best-effort; the event's own history is intact)"
            );
        }
    }

    async fn run_lookup(&self, key: &Key) -> Result<EventView, RedisError> {
        let mut conn = self.conn.clone();
        let (retention, cap) = self.shared.history_args;
        let (record, rows): (Option<String>, Vec<String>) = self
            .shared
            .scripts
            .lookup
            .key(self.shared.keys.event(key))
            .arg(retention)
            .arg(cap)
            .invoke_async(&mut conn)
            .await
            .map_err(RedisError::command("lookup script"))?;
        let record = record
            .map(|r| parse_record(&r).ok_or_else(|| RedisError::reply("lookup script", r)))
            .transpose()?;
        let history = rows
            .into_iter()
            .map(|h| parse_history(&h).ok_or_else(|| RedisError::reply("lookup script", h)))
            .collect::<Result<_, _>>()?;
        Ok(EventView {
            key: key.clone(),
            record,
            history,
        })
    }
}

/// Counting and history queries walk the keyspace (`SCAN` on every master), so they cost time in
/// proportion to the events stored: meant for `idemgate stats` and the TTL advisor, not for a
/// scrape every few seconds.
impl RedisStore {
    async fn count(&self) -> Result<StoreStats, RedisError> {
        let keys = &self.shared.keys;
        let pattern = keys.events_pattern();
        let mut conn = self.conn.clone();
        let nodes = conn.masters().await.map_err(RedisError::command("PING"))?;
        let mut stats = StoreStats::default();
        let mut per_source = BTreeMap::<SourceName, SourceStats>::new();
        for node in &nodes {
            let now = conn
                .server_ms(node)
                .await
                .map_err(RedisError::command("TIME"))?;
            let mut cursor = 0;
            loop {
                let (next, page) = conn
                    .scan_page(node, cursor, &pattern)
                    .await
                    .map_err(RedisError::command("SCAN"))?;
                let mut pipe = redis::pipe();
                for key in &page {
                    pipe.cmd("HMGET").arg(key).arg(&["r", "n", "f", "p"]);
                    pipe.cmd("HLEN").arg(key);
                }
                let answers: Vec<Value> = if page.is_empty() {
                    Vec::new()
                } else {
                    conn.pipeline_on_node(node, pipe)
                        .await
                        .map_err(RedisError::command("HMGET"))?
                };
                for (key, pair) in page.iter().zip(answers.chunks(2)) {
                    let [fields, len] = pair else { continue };
                    // r, n, f and p: the fields beside the rows (see `lua/common.lua`).
                    let mut fields: Vec<Option<String>> =
                        redis::from_redis_value(fields.clone())
                            .map_err(|e| RedisError::command("HMGET")(e.into()))?;
                    let len: u64 = redis::from_redis_value(len.clone())
                        .map_err(|e| RedisError::command("HLEN")(e.into()))?;
                    let fixed = fields.iter().filter(|f| f.is_some()).count() as u64;
                    stats.history_rows += len.saturating_sub(fixed);
                    let record = fields.first_mut().and_then(Option::take);
                    let (Some(source), Some(text)) = (keys.source_of(key), record) else {
                        continue;
                    };
                    let rec = parse_record(&text)
                        .ok_or_else(|| RedisError::reply("HMGET", text.clone()))?;
                    let s = per_source
                        .entry(source.clone())
                        .or_insert_with(|| SourceStats {
                            source,
                            live: 0,
                            expired: 0,
                            oldest: None,
                        });
                    if rec.expires_at.as_millis() > now {
                        s.live += 1;
                    } else {
                        s.expired += 1;
                    }
                    s.oldest = Some(s.oldest.map_or(rec.first_seen, |o| o.min(rec.first_seen)));
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        for s in per_source.values() {
            stats.live += s.live;
            stats.expired += s.expired;
            stats.oldest = match (stats.oldest, s.oldest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        stats.per_source = per_source.into_values().collect();
        Ok(stats)
    }

    /// Every source's history stream, by the master that holds it.
    async fn streams(&self) -> Result<SourceStreams, RedisError> {
        let pattern = self.shared.keys.streams_pattern();
        let mut conn = self.conn.clone();
        let nodes = conn.masters().await.map_err(RedisError::command("PING"))?;
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            let mut found = Vec::new();
            let mut cursor = 0;
            loop {
                let (next, page) = conn
                    .scan_page(&node, cursor, &pattern)
                    .await
                    .map_err(RedisError::command("SCAN"))?;
                found.extend(
                    page.into_iter()
                        .filter_map(|k| Some((self.shared.keys.source_of(&k)?, k))),
                );
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            out.push((node, found));
        }
        Ok(out)
    }

    async fn observe_streams(&self, period: Duration) -> Result<Vec<Observation>, RedisError> {
        const PAGE: usize = 1_000;
        let mut conn = self.conn.clone();
        let mut tally = Tally::default();
        for (node, streams) in self.streams().await? {
            let now = conn
                .server_ms(&node)
                .await
                .map_err(RedisError::command("TIME"))?;
            let since = now.saturating_sub(i64::try_from(ms(period)).unwrap_or(i64::MAX));
            for (source, key) in streams {
                let mut from = format!("{}-0", since.max(0));
                loop {
                    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                        .arg(&key)
                        .arg(&from)
                        .arg("+")
                        .arg("COUNT")
                        .arg(PAGE)
                        .query_async(&mut conn)
                        .await
                        .map_err(RedisError::command("XRANGE"))?;
                    for (_, fields) in &entries {
                        let field = |name: &str| {
                            fields
                                .chunks(2)
                                .find(|kv| kv[0] == name)
                                .and_then(|kv| kv.get(1))
                                .filter(|v| !v.is_empty())
                        };
                        let Some(outcome) = field("outcome").and_then(|o| HistoryOutcome::parse(o))
                        else {
                            continue;
                        };
                        let gap = field("gap_ms")
                            .and_then(|g| g.parse().ok())
                            .map(Duration::from_millis);
                        tally.add(source.clone(), outcome, gap);
                    }
                    match entries.last() {
                        Some((id, _)) if entries.len() == PAGE => from = format!("({id}"),
                        _ => break,
                    }
                }
            }
        }
        Ok(tally.finish(period))
    }

    /// Trims the source streams' entries older than `retention`, at most `batch` in all.
    async fn trim_streams(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, RedisError> {
        const FRESH: Duration = Duration::from_secs(60);
        let cached = self
            .shared
            .purge_streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .filter(|(at, _)| at.elapsed() < FRESH);
        let streams = match cached {
            Some((_, streams)) => streams,
            None => {
                let streams = self.streams().await?;
                *self
                    .shared
                    .purge_streams
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) =
                    Some((Instant::now(), streams.clone()));
                streams
            }
        };
        let mut conn = self.conn.clone();
        let mut left = u64::from(batch.get());
        let mut trimmed = 0;
        for (node, streams) in streams {
            let now = conn
                .server_ms(&node)
                .await
                .map_err(RedisError::command("TIME"))?;
            let cutoff = now.saturating_sub(i64::try_from(ms(retention)).unwrap_or(i64::MAX));
            if cutoff <= 0 {
                continue;
            }
            for (_, key) in streams {
                if left == 0 {
                    return Ok(trimmed);
                }
                // The oldest `left` entries before the cutoff: trim up to just past the last of
                // them, so no more than `left` go.
                let old: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg(format!("({cutoff}-0"))
                    .arg("COUNT")
                    .arg(left)
                    .query_async(&mut conn)
                    .await
                    .map_err(RedisError::command("XRANGE"))?;
                let Some((last, _)) = old.last() else {
                    continue;
                };
                let (ms_part, seq) = last
                    .split_once('-')
                    .and_then(|(m, s)| Some((m.parse::<u64>().ok()?, s.parse::<u64>().ok()?)))
                    .ok_or_else(|| RedisError::reply("XRANGE", last.clone()))?;
                let n: u64 = redis::cmd("XTRIM")
                    .arg(&key)
                    .arg("MINID")
                    .arg("=")
                    .arg(format!("{ms_part}-{}", seq + 1))
                    .query_async(&mut conn)
                    .await
                    .map_err(RedisError::command("XTRIM"))?;
                trimmed += n;
                left = left.saturating_sub(n);
            }
        }
        Ok(trimmed)
    }
}

impl Stats for RedisStore {
    /// Live and expired records per source, history rows kept, and the oldest first receipt. An
    /// expired record counts until its event's hash expires with its history. No size: Redis
    /// cannot tell one prefix's memory cheaply.
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        Ok(self.count().await?)
    }
}

impl HistoryQuery for RedisStore {
    /// Whether the source's history stream exists (it keeps the source's deliveries for
    /// `store.history_retention`).
    async fn has_source(&self, source: &SourceName) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let n: i64 = redis::cmd("EXISTS")
            .arg(self.shared.keys.stream(source))
            .query_async(&mut conn)
            .await
            .map_err(RedisError::command("EXISTS"))?;
        Ok(n > 0)
    }

    /// From the sources' history streams: best-effort, and no further back than their cap.
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        Ok(self.observe_streams(period).await?)
    }
}

impl HistoryRetention for RedisStore {
    /// Trims the sources' streams. Each event's own history expires by itself, `history_retention`
    /// after its record was made (or when the record expires, if later).
    async fn purge_history(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        Ok(self.trim_streams(retention, batch).await?)
    }
}

impl ClaimStore for RedisStore {
    #[instrument(level = "debug", skip_all, fields(source = %req.key.source))]
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        Ok(self.run_claim(&req, machine::nonce()).await?)
    }

    #[instrument(level = "debug", skip_all, fields(source = %token.key.source))]
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.run_finish(token, HistoryOutcome::Completed).await
    }

    #[instrument(level = "debug", skip_all, fields(source = %token.key.source))]
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.run_finish(token, HistoryOutcome::Released).await
    }

    #[instrument(level = "debug", skip_all, fields(source = %token.key.source))]
    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        self.run_renew(token, lease).await
    }

    #[instrument(level = "debug", skip_all, fields(source = %key.source))]
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        Ok(self.run_lookup(key).await?)
    }
}

impl Identity for RedisStore {
    /// `<prefix>store_id`: one id per prefix on one server or Cluster, made by the first store
    /// that connected. A flushed Redis makes a new one at the next connect.
    fn store_id(&self) -> &str {
        &self.shared.store_id
    }
}

impl Instances for RedisStore {
    /// Atomic per event, not as a whole: see the crate README.
    #[instrument(level = "info", skip_all, fields(instance = %instance))]
    async fn register_boot(&self, instance: &InstanceName) -> Result<Boot, StoreError> {
        Ok(self.run_boot(instance).await?)
    }
}

fn opt_fingerprint(hex: &str) -> Option<Option<Fingerprint>> {
    if hex.is_empty() {
        Some(None)
    } else {
        Fingerprint::from_hex(hex).ok().map(Some)
    }
}

/// `state|attempt|nonce|fingerprint|first_seen|lease_until|expires_at`, then
/// `|holder_instance|holder_boot` when held (see `lua/common.lua`).
fn parse_record(text: &str) -> Option<Record> {
    let mut f = text.split('|');
    let state = match f.next()? {
        "p" => RecordState::Processing,
        "d" => RecordState::Done,
        _ => return None,
    };
    let attempt = f.next()?.parse().ok()?;
    let nonce = u64::from_str_radix(f.next()?, 16).ok()?;
    let fingerprint = opt_fingerprint(f.next()?)?;
    let first_seen = Timestamp::from_millis(f.next()?.parse().ok()?);
    let lease_until = match f.next()? {
        "" => None,
        t => Some(Timestamp::from_millis(t.parse().ok()?)),
    };
    let expires_at = Timestamp::from_millis(f.next()?.parse().ok()?);
    let holder = match (f.next(), f.next()) {
        (None, None) => None,
        (Some(instance), Some(boot)) => Some(Holder {
            instance: InstanceName::new(instance).ok()?,
            boot: boot.parse().ok()?,
        }),
        _ => return None,
    };
    f.next().is_none().then_some(Record {
        state,
        attempt,
        nonce,
        fingerprint,
        first_seen,
        lease_until,
        expires_at,
        holder,
    })
}

/// `outcome|processed|attempt|at|gap|fingerprint` (see `lua/common.lua`).
fn parse_history(text: &str) -> Option<HistoryEntry> {
    let mut f = text.split('|');
    let outcome = HistoryOutcome::parse(f.next()?)?;
    let processed = match f.next()? {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    let attempt = match f.next()? {
        "" => None,
        a => Some(a.parse().ok()?),
    };
    let at = Timestamp::from_millis(f.next()?.parse().ok()?);
    let gap = match f.next()? {
        "" => None,
        g => Some(Duration::from_millis(g.parse().ok()?)),
    };
    let fingerprint = opt_fingerprint(f.next()?)?;
    f.next().is_none().then_some(HistoryEntry {
        outcome,
        processed,
        attempt,
        at,
        gap,
        fingerprint,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_history_rows_parse() {
        let fp = "ab".repeat(32);
        let rec = parse_record(&format!("p|2|00000000deadbeef|{fp}|1000|1250|5000")).unwrap();
        assert_eq!(rec.state, RecordState::Processing);
        assert_eq!(rec.attempt, 2);
        assert_eq!(rec.nonce, 0xdead_beef);
        assert_eq!(rec.fingerprint, Some(Fingerprint([0xab; 32])));
        assert_eq!(rec.lease_until, Some(Timestamp::from_millis(1250)));
        let done = parse_record("d|1|0000000000000001||1000||5000").unwrap();
        assert_eq!(
            (done.state, done.fingerprint, done.lease_until),
            (RecordState::Done, None, None)
        );
        assert!(parse_record("q|1|1||1||5").is_none());
        assert!(parse_record("d|1|1||1||5|extra").is_none());
        let held = parse_record("p|1|0000000000000001||1000|1250|5000|gw-1|3").unwrap();
        assert_eq!(
            held.holder,
            Some(Holder {
                instance: InstanceName::new("gw-1").unwrap(),
                boot: 3
            })
        );
        assert!(parse_record("p|1|1||1|2|5|gw 1|3").is_none());
        assert!(parse_record("p|1|1||1|2|5|gw-1|x").is_none());
        assert!(parse_record("p|1|1||1|2|5|gw-1|3|more").is_none());

        let row = parse_history("duplicate|0|1|2000|1000|").unwrap();
        assert_eq!(row.outcome, HistoryOutcome::Duplicate);
        assert_eq!(row.gap, Some(Duration::from_secs(1)));
        assert!(!row.processed);
        let row = parse_history("completed|1|1|2000||").unwrap();
        assert_eq!((row.attempt, row.gap, row.processed), (Some(1), None, true));
        assert!(parse_history("nope|0|1|2000||").is_none());
        assert!(parse_history("claimed|2|1|2000||").is_none());
    }
}
