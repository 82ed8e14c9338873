//! Store mode: Redis (standalone or Cluster) as the only store.
//!
//! Each operation is one Lua function (`src/lua/`; one `FCALL`, or one `EVALSHA` where the server
//! has no Functions: see `script`) over one hash per event, holding its record and its capped
//! history. The operations read the server's clock (`TIME`), so every expiry decision is
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
//!
//! # Layout
//!
//! - this file: [`RedisStore`], connecting, running a script on an event (`eval`), and the
//!   core traits, each delegating to the module of its concern;
//! - `script`: the Lua, its loading (a function library, else scripts) and running it; `checks`:
//!   the start-up checks;
//! - `claims`: claim, complete, release, renew and lookup; `record`: the record and history row
//!   text read back;
//! - `history`: the sources' streams (append, observe, trim); `stats`: counting;
//!   `instances`: boots and freeing an earlier boot's claims.
//!
//! The scripts' replies are decoded in `crate::reply`.

mod checks;
mod claims;
mod history;
mod instances;
mod record;
mod script;
mod stats;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemgate_core::advise::Observation;
use idemgate_core::{
    Boot, BootRequest, ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, EventView,
    HistoryOutcome, HistoryQuery, HistoryRetention, Holder, Identity, Instances, Key, RecordResult,
    SourceName, Stats, StoreError, StoreStats, Timestamp, machine,
};
use redis::{FromRedisValue, Value};
use tracing::{info, instrument, warn};

use crate::config::{RedisConfig, StoreKeys};
use crate::conn::{Conn, Node, Timeouts};
use crate::error::RedisError;
use crate::keys::Keys;
use crate::limiter::LogLimiter;
use script::{Call, Operation, Scripts};

/// Which of an event's keys an operation touches besides its hash (`lua/common.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EventKeys {
    /// The event's hash alone.
    Event,
    /// The hash and the completed record's result key (`finish`, `lookup`).
    WithResult,
}

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

/// Each master with the source streams it holds: `(source, key)`.
type SourceStreams = Vec<(Node, Vec<(SourceName, String)>)>;

/// The longest duration a script is given, in ms (keeps Lua's doubles exact).
const MAX_MS: u64 = 1 << 50;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(MAX_MS).min(MAX_MS)
}

impl RedisStore {
    /// Connects, checks the server (see below) and loads the Lua (a function library, or scripts
    /// on a server without Functions).
    ///
    /// The checks, on every master: `maxmemory-policy` must be `noeviction` (every idemgate key
    /// has a TTL, so `volatile-*` policies evict them too) unless
    /// [`RedisConfig::allow_eviction`] is set, which turns the refusal into a warning; a server
    /// that keeps nothing on disk (`appendonly no` and `save ""`) is a warning, since a restart
    /// then forgets every claim. When `CONFIG` is disabled the checks warn and pass.
    ///
    /// # Errors
    /// [`RedisError::Config`], [`RedisError::Connect`], [`RedisError::EvictingPolicy`], or
    /// [`RedisError::Command`] when a check or loading the Lua fails.
    pub async fn connect(cfg: RedisConfig) -> Result<Self, RedisError> {
        let certs = cfg.check(&StoreKeys::LIBRARY)?;
        let timeouts = Timeouts {
            connect: cfg.connect_timeout,
            response: cfg.response_timeout,
            retries: 3,
        };
        let conn = match Conn::connect(&cfg.target, certs.as_ref(), timeouts).await {
            Ok(conn) => conn,
            Err(source) => {
                let target = &cfg.target;
                let connect = |source| RedisError::Connect {
                    target: target.describe(),
                    source,
                };
                let timeout = cfg.connect_timeout;
                return Err(
                    RedisError::tls_or(target, certs.as_ref(), timeout, source, connect).await,
                );
            }
        };
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
        checks::check_server(&store.conn, store.shared.cfg.allow_eviction).await?;
        store.shared.scripts.load(&store.conn).await?;
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
            .arg(idemgate_core::machine::random_store_id())
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
        op: &Operation,
        key: &Key,
        keys: EventKeys,
        add: impl Fn(&mut Call),
    ) -> Result<(T, bool), RedisError> {
        loop {
            let in_script = self.shared.stream_in_script.load(Ordering::Relaxed);
            let mut call = self.call(key, keys, in_script);
            add(&mut call);
            match self.shared.scripts.run(&self.conn, op, &call).await {
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

    /// A call on `key`'s event, with the arguments every operation takes (see `lua/common.lua`):
    /// the event's key, then its result key when `keys` says so, then the source's stream when
    /// `stream` says so (and the store keeps one).
    fn call(&self, key: &Key, keys: EventKeys, stream: bool) -> Call {
        let s = &self.shared;
        let (retention, cap) = s.history_args;
        let mut call = Call::default();
        call.key(s.keys.event(key)).arg(retention).arg(cap);
        if keys == EventKeys::WithResult {
            call.key(s.keys.result(key));
        }
        match s.cfg.source_stream_maxlen {
            Some(maxlen) if stream => {
                call.key(s.keys.stream(&key.source))
                    .arg(maxlen.get())
                    .arg(key.event_id.as_str());
            }
            _ => {
                call.arg(0).arg("");
            }
        }
        call
    }
}

impl Stats for RedisStore {
    /// Live and expired records per source, history rows kept, and the oldest first receipt. An
    /// expired record counts until its event's hash expires with its history. No size: Redis
    /// cannot tell one prefix's memory cheaply.
    #[instrument(level = "debug", skip_all)]
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        Ok(self.count().await?)
    }
}

impl HistoryQuery for RedisStore {
    /// Whether the source's history stream exists (it keeps the source's deliveries for
    /// `store.history_retention`).
    #[instrument(level = "debug", skip_all, fields(source = %source))]
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
    #[instrument(level = "debug", skip_all, fields(period = ?period))]
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        Ok(self.observe_streams(period).await?)
    }
}

impl HistoryRetention for RedisStore {
    /// Trims the sources' streams. Each event's own history expires by itself, `history_retention`
    /// after its record was made (or when the record expires, if later).
    #[instrument(level = "debug", skip_all, fields(batch = batch.get()))]
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
        self.run_finish(token, HistoryOutcome::Completed, &RecordResult::None)
            .await
    }

    #[instrument(level = "debug", skip_all, fields(source = %token.key.source, result = result.name()))]
    async fn complete_keeping(
        &self,
        token: &ClaimToken,
        result: RecordResult,
    ) -> Result<(), StoreError> {
        self.run_finish(token, HistoryOutcome::Completed, &result)
            .await
    }

    #[instrument(level = "debug", skip_all, fields(source = %token.key.source))]
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.run_finish(token, HistoryOutcome::Released, &RecordResult::None)
            .await
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
    #[instrument(level = "info", skip_all, fields(instance = %req.instance))]
    async fn register_boot(&self, req: &BootRequest) -> Result<Boot, StoreError> {
        self.run_boot(req)
            .await?
            .map_err(|live| StoreError::InstanceLive {
                live: Box::new(live),
            })
    }

    #[instrument(level = "debug", skip_all, fields(instance = %holder.instance))]
    async fn heartbeat(&self, holder: &Holder, lease: Duration) -> Result<Timestamp, StoreError> {
        self.run_beat(holder, Some(lease))
            .await?
            .map_err(|by| StoreError::Superseded {
                holder: holder.clone(),
                by,
            })
    }

    #[instrument(level = "debug", skip_all, fields(instance = %holder.instance))]
    async fn end_boot(&self, holder: &Holder) -> Result<(), StoreError> {
        // A superseded boot has nothing left to end (`Err` here is the boot that superseded it).
        let _ended_or_superseded = self.run_beat(holder, None).await?;
        Ok(())
    }
}

/// Redis expires records by itself (no sweep), keeps each event's history as a stream (no
/// timeline, no export) and has no inbox.
impl idemgate_core::Capabilities for RedisStore {
    fn engine(&self) -> &'static str {
        "redis"
    }
    fn instances(&self) -> Option<&dyn idemgate_core::object::DynInstances> {
        Some(self)
    }
    fn history(&self) -> Option<&dyn idemgate_core::object::DynHistory> {
        Some(self)
    }
    fn stats(&self) -> Option<&dyn idemgate_core::object::DynStats> {
        Some(self)
    }
    /// Counting walks the keyspace: too slow for every `/metrics` scrape.
    fn counts_cheaply(&self) -> bool {
        false
    }
}
