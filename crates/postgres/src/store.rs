//! [`PgStore`]: the store traits on a connection pool, claims through the group-commit batcher.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use deadpool_postgres::Pool;
use idemgate_core::advise::{Observation, Tally};
use idemgate_core::{
    Boot, BootRequest, ClaimOutcome, ClaimRequest, ClaimStore, ClaimToken, EventView,
    HistoryOutcome, HistoryQuery, HistoryRetention, Holder, Identity, Instances, Key, LiveBoot,
    Record, RecordResult, SourceName, Stats, StoreError, StoreStats, Timeline, TimelineCounts,
    Timestamp,
};

use crate::batch::{Batcher, Claim, Claims, Finish, Finishes};
use crate::config::PgConfig;
use crate::db::Db;
use crate::error::PgError;
use crate::migrate::{self, migrate};
use crate::row::{self, count, millis, ms};

const RENEW: &str = include_str!("../sql/renew.sql");
const REGISTER_BOOT: &str = include_str!("../sql/register_boot.sql");
const HEARTBEAT_BOOT: &str = include_str!("../sql/heartbeat_boot.sql");
const LOOKUP_RECORD: &str = include_str!("../sql/lookup_record.sql");
pub(crate) const COMPLETE_KEEPING: &str = include_str!("../sql/complete_keeping.sql");
const LOOKUP_HISTORY: &str = include_str!("../sql/lookup_history.sql");
const STATS_SOURCES: &str = include_str!("../sql/stats_sources.sql");
const STATS_TOTALS: &str = include_str!("../sql/stats_totals.sql");

/// The PostgreSQL store. Clones share one pool and one batcher; the batcher stops once the last
/// clone is dropped.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    db: Db,
    claims: Batcher<Claims>,
    /// Completions and releases, group-committed like claims.
    finishes: Batcher<Finishes>,
    /// The schema's `meta.store_id`, read at connect.
    store_id: String,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.inner.db.cfg.target())
            .field("schema", &self.inner.db.cfg.schema)
            .field("expiry", &self.inner.db.cfg.expiry)
            .field("store_id", &self.inner.store_id)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Validates `cfg`, migrates the schema, creates the partitions needed ahead and starts the
    /// claim batcher (on the current tokio runtime). Every connection (the migration's and the
    /// pool's) uses TLS as `cfg`'s `sslmode` says ([`PgConfig::tls_connector`]).
    ///
    /// # Errors
    /// Everything [`migrate()`] refuses ([`PgError::Config`], [`PgError::Connect`],
    /// [`PgError::Tls`], [`PgError::NewerSchema`], [`PgError::ModeMismatch`]), and [`PgError::Db`] when the
    /// partitions cannot be created.
    pub async fn connect(cfg: PgConfig) -> Result<Self, PgError> {
        migrate(&cfg).await?;
        Self::open(Db::connect(cfg)?, true).await
    }

    /// Like [`PgStore::connect`], on a pool built by the caller (for TLS, connection hooks, or
    /// pool settings [`PgConfig`] does not have): checks that the pool's connections look in
    /// `cfg.schema` first, migrates the schema through one of them (creating it if needed, under
    /// the same advisory lock as [`migrate()`]), creates the partitions needed ahead and starts
    /// the claim batcher.
    ///
    /// The store's statements name its tables unqualified, so every connection of the pool must
    /// run with `cfg.schema` first on its `search_path`. A pool whose manager is built from
    /// [`PgConfig::connection_config`] does, and has idemgate's other session settings too (UTC,
    /// generic plans, the application name); give it [`PgConfig::tls_connector`] for the TLS
    /// `connect` would use. `cfg.url` is used here only to name the server in
    /// errors, and `cfg.pool_size` not at all: the pool keeps its own size (give it more than
    /// `batch_inflight` connections, for completions and lookups beside the claim batches).
    ///
    /// # Errors
    /// [`PgError::Config`] for a bad setting (the URL is not checked), [`PgError::Pool`] when
    /// the pool gives no connection, [`PgError::SearchPath`] when its connection does not look
    /// in `cfg.schema` first, and what [`migrate()`] refuses ([`PgError::NewerSchema`],
    /// [`PgError::ModeMismatch`], [`PgError::Db`]).
    pub async fn from_pool(pool: Pool, cfg: PgConfig) -> Result<Self, PgError> {
        cfg.validate_settings()?;
        let db = Db::new(pool, cfg);
        {
            let mut client = db.client().await?;
            check_search_path(&client, &db.cfg.schema).await?;
            migrate::migrate_on(&mut client, &db.cfg).await?;
        }
        Self::open(db, true).await
    }

    /// Opens a schema that already exists at the current version, changing nothing on the way
    /// (no schema, table or partition is created): for tools that only read, or sweep. The
    /// expiry mode is the one the schema was created with, whatever `cfg` says.
    ///
    /// # Errors
    /// [`PgError::NoSchema`] and [`PgError::OlderSchema`] (run `idemgate migrate`), and what
    /// [`PgStore::connect`] refuses.
    pub async fn open_existing(mut cfg: PgConfig) -> Result<Self, PgError> {
        migrate::check_existing(&mut cfg).await?;
        Self::open(Db::connect(cfg)?, false).await
    }

    async fn open(db: Db, partitions: bool) -> Result<Self, PgError> {
        if partitions {
            db.ensure_partitions(0).await?;
        }
        const CONTEXT: &str = "reading the store id";
        let row = db
            .client()
            .await?
            .query_one("SELECT value FROM meta WHERE key = 'store_id'", &[])
            .await
            .map_err(PgError::db(CONTEXT))?;
        let store_id: String = row::get(&row, "value", CONTEXT)?;
        let claims = Batcher::start(db.clone());
        let finishes = Batcher::start(db.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                db,
                claims,
                finishes,
                store_id,
            }),
        })
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &PgConfig {
        &self.inner.db.cfg
    }

    pub(crate) fn db(&self) -> &Db {
        &self.inner.db
    }

    /// The schema's version as the database holds it now, beside the newest this build knows
    /// ([`crate::SCHEMA_VERSION`]): a newer binary may have migrated it since this one started.
    ///
    /// # Errors
    /// [`PgError::Pool`], [`PgError::Db`].
    pub async fn schema_version(&self) -> Result<(i64, i64), PgError> {
        let client = self.db().client().await?;
        let found = migrate::schema_version(&**client).await?;
        Ok((found, migrate::SCHEMA_VERSION))
    }

    /// Completes (`release` false) or releases the claim `token` holds, through the batcher.
    async fn finish(&self, token: &ClaimToken, release: bool) -> Result<(), StoreError> {
        let Ok(attempt) = i32::try_from(token.attempt) else {
            return Err(stale(token));
        };
        let held = self
            .inner
            .finishes
            .call(Finish {
                source: token.key.source.as_str().to_owned(),
                event_id: token.key.event_id.as_str().to_owned(),
                attempt,
                // The nonce travels as bigint, bit for bit.
                nonce: token.nonce as i64,
                release,
            })
            .await?;
        match held {
            Some(true) => Ok(()),
            Some(false) => Err(stale(token)),
            None => Err(StoreError::Completed {
                key: token.key.clone(),
                attempt: token.attempt,
            }),
        }
    }

    /// Completes the claim `token` holds with `result` kept beside the record: one call of
    /// `complete_keeping` (its own transaction; not group-committed). Without a result, the
    /// batcher's completion.
    async fn finish_keeping(
        &self,
        token: &ClaimToken,
        result: RecordResult,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "completing a claim with its result";
        let Some(keep) = Keeping::of(token, &result) else {
            return self.finish(token, false).await;
        };
        let client = self.db().client().await?;
        let stmt = client
            .prepare_cached(COMPLETE_KEEPING)
            .await
            .map_err(PgError::db(CONTEXT))?;
        let row = client
            .query_one(&stmt, &keep.params())
            .await
            .map_err(PgError::db(CONTEXT))?;
        keep.answer(token, &row, CONTEXT)
    }

    /// One call of `register_boot`, sent again after a deadlock: the new boot, or the live one
    /// that refuses it.
    async fn new_boot(&self, req: &BootRequest) -> Result<Result<Boot, LiveBoot>, PgError> {
        const CONTEXT: &str = "registering a boot";
        let instance = &req.instance;
        let lease = millis(req.lease);
        let pid = i32::try_from(req.pid).unwrap_or(i32::MAX);
        let mut tries = 0;
        loop {
            let client = self.db().client().await?;
            let stmt = client
                .prepare_cached(REGISTER_BOOT)
                .await
                .map_err(PgError::db(CONTEXT))?;
            // One implicit transaction: a deadlock with a claim batch rolls all of it back.
            match client
                .query_one(
                    &stmt,
                    &[
                        &instance.as_str(),
                        &lease,
                        &req.host,
                        &pid,
                        &req.process,
                        &req.supersede.map(|b| b as i64),
                    ],
                )
                .await
                .map_err(PgError::db(CONTEXT))
            {
                Ok(row) => {
                    let items: i64 = row::get(&row, "r_items_freed", CONTEXT)?;
                    if items > 0 {
                        tracing::info!(items, "freed the inbox items of earlier boots");
                    }
                    return row::boot_of(instance, &row, CONTEXT);
                }
                Err(e) if e.is_deadlock() && tries < 3 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// One call of `heartbeat_boot`: the lease's new end, or the boot that superseded `holder`.
    async fn beat(
        &self,
        holder: &Holder,
        lease: Option<Duration>,
    ) -> Result<Result<Timestamp, u64>, PgError> {
        const CONTEXT: &str = "renewing a boot's liveness lease";
        let client = self.db().client().await?;
        let stmt = client
            .prepare_cached(HEARTBEAT_BOOT)
            .await
            .map_err(PgError::db(CONTEXT))?;
        let lease = lease.map(millis);
        let row = client
            .query_one(
                &stmt,
                &[&holder.instance.as_str(), &(holder.boot as i64), &lease],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        let until: Option<i64> = row::get(&row, "r_until_ms", CONTEXT)?;
        let latest: i64 = row::get(&row, "r_latest", CONTEXT)?;
        Ok(until
            .map(Timestamp::from_millis)
            .ok_or(u64::try_from(latest).unwrap_or(0)))
    }
}

/// Refuses a connection (of a pool given to [`PgStore::from_pool`]) that does not look in
/// `schema` first.
async fn check_search_path(client: &tokio_postgres::Client, schema: &str) -> Result<(), PgError> {
    const CONTEXT: &str = "reading the connection's search_path";
    let row = client
        .query_one("SELECT current_setting('search_path') AS search_path", &[])
        .await
        .map_err(PgError::db(CONTEXT))?;
    let found: String = row::get(&row, "search_path", CONTEXT)?;
    let first = found
        .split(',')
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('"');
    if first == schema {
        Ok(())
    } else {
        Err(PgError::SearchPath {
            schema: schema.to_owned(),
            found,
        })
    }
}

/// The arguments of `complete_keeping.sql` for a token and a result to keep.
pub(crate) struct Keeping<'a> {
    source: &'a str,
    event_id: &'a str,
    attempt: i32,
    nonce: i64,
    stored: Option<Vec<u8>>,
    withheld: Option<i64>,
}

impl<'a> Keeping<'a> {
    /// `None` when there is nothing to keep (a plain completion). A token whose attempt no
    /// `integer` holds is stale: its `attempt` is then one no record has, and the call answers so.
    pub(crate) fn of(token: &'a ClaimToken, result: &RecordResult) -> Option<Self> {
        let (stored, withheld) = match result {
            RecordResult::None => return None,
            RecordResult::Stored(r) => (Some(r.encode()), None),
            RecordResult::Withheld { size } => {
                (None, Some(i64::try_from(*size).unwrap_or(i64::MAX)))
            }
        };
        Some(Self {
            source: token.key.source.as_str(),
            event_id: token.key.event_id.as_str(),
            attempt: i32::try_from(token.attempt).unwrap_or(-1),
            // The nonce travels as bigint, bit for bit.
            nonce: token.nonce as i64,
            stored,
            withheld,
        })
    }

    pub(crate) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 6] {
        [
            &self.source,
            &self.event_id,
            &self.attempt,
            &self.nonce,
            &self.stored,
            &self.withheld,
        ]
    }

    /// The call's answer: `r_held` false is a stale token.
    pub(crate) fn answer(
        &self,
        token: &ClaimToken,
        row: &tokio_postgres::Row,
        context: &'static str,
    ) -> Result<(), StoreError> {
        if row::get::<bool>(row, "r_held", context)? {
            Ok(())
        } else {
            Err(stale(token))
        }
    }
}

pub(crate) fn stale(token: &ClaimToken) -> StoreError {
    StoreError::StaleToken {
        key: token.key.clone(),
        attempt: token.attempt,
    }
}

impl ClaimStore for PgStore {
    #[tracing::instrument(level = "debug", skip_all, fields(source = %req.key.source, event_id = %req.key.event_id))]
    async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, StoreError> {
        let ttl = u64::try_from(millis(req.ttl)).unwrap_or(0);
        self.inner.db.max_ttl_ms.fetch_max(ttl, Ordering::Relaxed);
        self.inner
            .claims
            .call(Claim {
                req,
                nonce: idemgate_core::machine::nonce(),
            })
            .await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %token.key.source, event_id = %token.key.event_id, attempt = token.attempt))]
    async fn complete(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.finish(token, false).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %token.key.source, event_id = %token.key.event_id, attempt = token.attempt, result = result.name()))]
    async fn complete_keeping(
        &self,
        token: &ClaimToken,
        result: RecordResult,
    ) -> Result<(), StoreError> {
        self.finish_keeping(token, result).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %token.key.source, event_id = %token.key.event_id, attempt = token.attempt))]
    async fn release(&self, token: &ClaimToken) -> Result<(), StoreError> {
        self.finish(token, true).await
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %token.key.source, event_id = %token.key.event_id, attempt = token.attempt))]
    async fn renew(&self, token: &ClaimToken, lease: Duration) -> Result<Timestamp, StoreError> {
        const CONTEXT: &str = "renewing a lease";
        let Ok(attempt) = i32::try_from(token.attempt) else {
            return Err(stale(token));
        };
        let client = self.db().client().await?;
        let stmt = client
            .prepare_cached(RENEW)
            .await
            .map_err(PgError::db(CONTEXT))?;
        let row = client
            .query_one(
                &stmt,
                &[
                    &token.key.source.as_str(),
                    &token.key.event_id.as_str(),
                    &attempt,
                    &(token.nonce as i64),
                    &millis(lease),
                ],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        let until: Option<i64> = row::get(&row, "lease_until_ms", CONTEXT)?;
        until
            .map(Timestamp::from_millis)
            .ok_or_else(|| stale(token))
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %key.source, event_id = %key.event_id))]
    async fn lookup(&self, key: &Key) -> Result<EventView, StoreError> {
        const CONTEXT: &str = "looking an event up";
        let client = self.inner.db.client().await?;
        let (rec_stmt, hist_stmt) = tokio::try_join!(
            client.prepare_cached(LOOKUP_RECORD),
            client.prepare_cached(LOOKUP_HISTORY)
        )
        .map_err(PgError::db(CONTEXT))?;
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] =
            [&key.source.as_str(), &key.event_id.as_str()];
        // Sent together: one round trip.
        let (records, history) = tokio::try_join!(
            client.query(&rec_stmt, &params),
            client.query(&hist_stmt, &params)
        )
        .map_err(PgError::db(CONTEXT))?;

        let record = records
            .first()
            .map(|row| row::record_of(row, CONTEXT))
            .transpose()?;
        let history = history
            .iter()
            .map(|row| row::history_entry_of(row, CONTEXT))
            .collect::<Result<_, _>>()?;
        Ok(EventView {
            key: key.clone(),
            record,
            history,
        })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %key.source, event_id = %key.event_id))]
    async fn record(&self, key: &Key) -> Result<Option<Record>, StoreError> {
        const CONTEXT: &str = "reading an event's record";
        let client = self.inner.db.client().await?;
        let stmt = client
            .prepare_cached(LOOKUP_RECORD)
            .await
            .map_err(PgError::db(CONTEXT))?;
        let rows = client
            .query(&stmt, &[&key.source.as_str(), &key.event_id.as_str()])
            .await
            .map_err(PgError::db(CONTEXT))?;
        Ok(rows
            .first()
            .map(|row| row::record_of(row, CONTEXT))
            .transpose()?)
    }
}

impl Identity for PgStore {
    /// The schema's `meta.store_id`, created with it (or by migration 2 for a schema of
    /// version 1).
    fn store_id(&self) -> &str {
        &self.inner.store_id
    }
}

impl Instances for PgStore {
    /// One call of `register_boot` (one transaction). Finding the earlier boots' claims scans
    /// `dedup`: no index on the holder, so takeovers and completions stay HOT updates.
    #[tracing::instrument(level = "info", skip_all, fields(instance = %req.instance))]
    async fn register_boot(&self, req: &BootRequest) -> Result<Boot, StoreError> {
        self.new_boot(req)
            .await?
            .map_err(|live| StoreError::InstanceLive {
                live: Box::new(live),
            })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(instance = %holder.instance))]
    async fn heartbeat(&self, holder: &Holder, lease: Duration) -> Result<Timestamp, StoreError> {
        self.beat(holder, Some(lease))
            .await?
            .map_err(|by| StoreError::Superseded {
                holder: holder.clone(),
                by,
            })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(instance = %holder.instance))]
    async fn end_boot(&self, holder: &Holder) -> Result<(), StoreError> {
        // A superseded boot has nothing left to end (`Err` here is the boot that superseded it).
        let _ended_or_superseded = self.beat(holder, None).await?;
        Ok(())
    }
}

impl HistoryQuery for PgStore {
    #[tracing::instrument(level = "debug", skip_all, fields(source = %source))]
    async fn has_source(&self, source: &SourceName) -> Result<bool, StoreError> {
        const CONTEXT: &str = "looking for a source";
        let client = self.inner.db.client().await?;
        // Both probes are index prefix scans (history's indexes and the dedup primary key).
        let row = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM history WHERE source = $1 AND outcome <> '') \
                     OR EXISTS (SELECT 1 FROM dedup WHERE source = $1) AS known",
                &[&source.as_str()],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        Ok(row::get(&row, "known", CONTEXT)?)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(period = ?period))]
    async fn observe(&self, period: Duration) -> Result<Vec<Observation>, StoreError> {
        const CONTEXT: &str = "reading history";
        let mut client = self.inner.db.client().await?;
        let rows = crate::db::reporting(
            &mut client,
            &[(include_str!("../sql/observe.sql"), &[&millis(period)])],
        )
        .await
        .map_err(PgError::db(CONTEXT))?
        .remove(0);
        let mut tally = Tally::default();
        for row in &rows {
            let source: &str = row::get(row, "source", CONTEXT)?;
            let outcome: &str = row::get(row, "outcome", CONTEXT)?;
            let gap: Option<i64> = row::get(row, "gap_ms", CONTEXT)?;
            let age: i64 = row::get(row, "age_ms", CONTEXT)?;
            // Only valid names and known outcomes are ever stored.
            if let (Ok(source), Some(outcome)) =
                (SourceName::new(source), HistoryOutcome::parse(outcome))
            {
                tally.add(source.clone(), outcome, gap.map(ms));
                tally.seen(&source, ms(age));
            }
        }
        Ok(tally.finish(period))
    }
}

impl idemgate_core::HistoryExport for PgStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn history_days(
        &self,
        source: Option<&SourceName>,
        since: Timestamp,
        until: Timestamp,
    ) -> Result<idemgate_core::HistoryDays, StoreError> {
        const CONTEXT: &str = "counting history per day";
        let client = self.inner.db.client().await?;
        let source = source.map(SourceName::as_str);
        let mut client = client;
        // A count over the range: a scan serves it better than the hot path's index lookups.
        let (since, until) = (since.as_millis(), until.as_millis());
        let mut out = crate::db::reporting(
            &mut client,
            &[
                ("SELECT epoch_ms(now()) AS now_ms", &[]),
                (
                    include_str!("../sql/history_days.sql"),
                    &[&since, &until, &source],
                ),
            ],
        )
        .await
        .map_err(PgError::db(CONTEXT))?;
        let rows = out.pop().unwrap_or_default();
        let now = out
            .pop()
            .and_then(|r| r.into_iter().next())
            .ok_or_else(|| row::unexpected(CONTEXT, "no now".to_owned()))?;
        let now = Timestamp::from_millis(row::get(&now, "now_ms", CONTEXT)?);
        let mut days = Vec::with_capacity(rows.len());
        for r in &rows {
            let name: &str = row::get(r, "source", CONTEXT)?;
            days.push(idemgate_core::HistoryDay {
                source: SourceName::new(name)
                    .map_err(|e| row::unexpected(CONTEXT, e.to_string()))?,
                start: Timestamp::from_millis(row::get(r, "day_ms", CONTEXT)?),
                rows: u64::try_from(row::get::<i64>(r, "n", CONTEXT)?).unwrap_or(0),
                partition: row::get::<&str>(r, "partition", CONTEXT)?.to_owned(),
            });
        }
        Ok(idemgate_core::HistoryDays { now, days })
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %source))]
    async fn history_rows(
        &self,
        source: &SourceName,
        from: Timestamp,
        until: Timestamp,
        after: Option<idemgate_core::HistoryCursor>,
        limit: NonZeroU32,
    ) -> Result<Vec<idemgate_core::HistoryRow>, StoreError> {
        const CONTEXT: &str = "reading history rows";
        let client = self.inner.db.client().await?;
        let after = after.unwrap_or(idemgate_core::HistoryCursor {
            position: from.as_millis().saturating_mul(1000),
            id: i64::MIN,
        });
        // Times as timestamptz parameters, exact to the microsecond.
        let at = |micros: i64| {
            std::time::SystemTime::UNIX_EPOCH
                + Duration::from_micros(u64::try_from(micros).unwrap_or(0))
        };
        let cursor = at(after.position);
        let start = at(from.as_millis().saturating_mul(1000)).max(cursor);
        let end = at(until.as_millis().saturating_mul(1000));
        let rows = client
            .query(
                include_str!("../sql/history_rows.sql"),
                &[
                    &source.as_str(),
                    &start,
                    &end,
                    &cursor,
                    &after.id,
                    &i64::from(limit.get()),
                ],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let event_id: &str = row::get(r, "event_id", CONTEXT)?;
            out.push(idemgate_core::HistoryRow {
                source: source.clone(),
                event_id: idemgate_core::EventId::new(event_id)
                    .map_err(|e| row::unexpected(CONTEXT, e.to_string()))?,
                entry: row::history_entry_of(r, CONTEXT)?,
                cursor: idemgate_core::HistoryCursor {
                    position: row::get(r, "position", CONTEXT)?,
                    id: row::get(r, "id", CONTEXT)?,
                },
            });
        }
        Ok(out)
    }

    async fn history_past(
        &self,
        retention: Duration,
    ) -> Result<Vec<idemgate_core::RetentionUnit>, StoreError> {
        Ok(self.inner.db.history_past(retention).await?)
    }

    async fn drop_history(
        &self,
        unit: &idemgate_core::RetentionUnit,
        retention: Duration,
        _batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        Ok(self
            .inner
            .db
            .drop_history_partition(&unit.name, retention)
            .await?)
    }
}

impl Timeline for PgStore {
    #[tracing::instrument(level = "debug", skip_all, fields(source = %source))]
    async fn recent(
        &self,
        source: &SourceName,
        limit: NonZeroU32,
    ) -> Result<Vec<idemgate_core::Recent>, StoreError> {
        const CONTEXT: &str = "reading recent history";
        let client = self.inner.db.client().await?;
        let rows = client
            .query(
                include_str!("../sql/recent.sql"),
                &[&source.as_str(), &i64::from(limit.get())],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        let mut recent = Vec::with_capacity(rows.len());
        for row in &rows {
            let outcome: &str = row::get(row, "outcome", CONTEXT)?;
            let event_id: &str = row::get(row, "event_id", CONTEXT)?;
            let attempt: Option<i32> = row::get(row, "attempt", CONTEXT)?;
            recent.push(idemgate_core::Recent {
                event_id: idemgate_core::EventId::new(event_id)
                    .map_err(|e| row::unexpected(CONTEXT, e.to_string()))?,
                outcome: HistoryOutcome::parse(outcome)
                    .ok_or_else(|| row::unexpected(CONTEXT, format!("outcome {outcome:?}")))?,
                at: Timestamp::from_millis(row::get(row, "at_ms", CONTEXT)?),
                attempt: attempt.and_then(|a| u32::try_from(a).ok()),
            });
        }
        Ok(recent)
    }

    #[tracing::instrument(level = "debug", skip_all, fields(source = %source))]
    async fn timeline(
        &self,
        source: &SourceName,
        bucket_secs: NonZeroU32,
        buckets: NonZeroU32,
    ) -> Result<TimelineCounts, StoreError> {
        const CONTEXT: &str = "counting history";
        let client = self.inner.db.client().await?;
        let width = i64::from(bucket_secs.get()) * 1_000;
        let rows = client
            .query(
                include_str!("../sql/timeline.sql"),
                &[&source.as_str(), &width, &i64::from(buckets.get())],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        let mut now = None;
        let mut counts = Vec::new();
        for row in &rows {
            now = Some(Timestamp::from_millis(row::get(row, "now_ms", CONTEXT)?));
            let bucket: Option<i64> = row::get(row, "bucket", CONTEXT)?;
            let outcome: Option<&str> = row::get(row, "outcome", CONTEXT)?;
            let n: Option<i64> = row::get(row, "n", CONTEXT)?;
            // Only known outcomes are ever stored; the one row of an empty window has none.
            if let (Some(bucket), Some(outcome), Some(n)) =
                (bucket, outcome.and_then(HistoryOutcome::parse), n)
            {
                counts.push((bucket, outcome, count(n)));
            }
        }
        let now = now.ok_or_else(|| row::unexpected(CONTEXT, "no row"))?;
        Ok(TimelineCounts::from_rows(now, bucket_secs, buckets, counts))
    }
}

impl HistoryRetention for PgStore {
    /// History lives in monthly partitions, dropped whole past `history_retention` by
    /// [`PgStore::maintain_partitions`]: nothing is deleted row by row here.
    async fn purge_history(
        &self,
        _retention: Duration,
        _batch: NonZeroU32,
    ) -> Result<u64, StoreError> {
        Ok(0)
    }
}

impl Stats for PgStore {
    #[tracing::instrument(level = "debug", skip_all)]
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        const CONTEXT: &str = "counting records";
        let mut client = self.inner.db.client().await?;
        let mut rows =
            crate::db::reporting(&mut client, &[(STATS_SOURCES, &[]), (STATS_TOTALS, &[])])
                .await
                .map_err(PgError::db(CONTEXT))?;
        let (totals, sources) = (
            rows.pop().unwrap_or_default(),
            rows.pop().unwrap_or_default(),
        );
        let totals = totals
            .first()
            .ok_or_else(|| row::unexpected(CONTEXT, "no totals row"))?;
        let per_source = sources
            .iter()
            .map(|row| row::source_stats_of(row, CONTEXT))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StoreStats {
            live: per_source.iter().map(|s| s.live).sum(),
            expired: per_source.iter().map(|s| s.expired).sum(),
            oldest: per_source.iter().filter_map(|s| s.oldest).min(),
            per_source,
            size_bytes: Some(count(row::get(totals, "size_bytes", CONTEXT)?)),
            history_rows: count(row::get(totals, "history_rows", CONTEXT)?),
        })
    }
}

impl idemgate_core::Capabilities for PgStore {
    fn engine(&self) -> &'static str {
        "postgres"
    }
    fn instances(&self) -> Option<&dyn idemgate_core::object::DynInstances> {
        Some(self)
    }
    fn sweep(&self) -> Option<&dyn idemgate_core::object::DynSweep> {
        Some(self)
    }
    fn history(&self) -> Option<&dyn idemgate_core::object::DynHistory> {
        Some(self)
    }
    fn stats(&self) -> Option<&dyn idemgate_core::object::DynStats> {
        Some(self)
    }
    fn timeline(&self) -> Option<&dyn idemgate_core::object::DynTimeline> {
        Some(self)
    }
    fn export(&self) -> Option<&dyn idemgate_core::object::DynHistoryExport> {
        Some(self)
    }
    fn inbox(&self) -> Option<&dyn idemgate_core::object::DynInbox> {
        Some(self)
    }
    fn schema_version(
        &self,
    ) -> idemgate_core::BoxFuture<'_, Result<Option<(i64, i64)>, StoreError>> {
        Box::pin(async {
            self.schema_version()
                .await
                .map(Some)
                .map_err(StoreError::from)
        })
    }
}
