//! [`Db`]: the pool and the configuration the store and its batcher share, and the partitions
//! rows need (created ahead, dropped past their time).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::PoolError;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use idemgate_core::sweep::ClaimLatency;

use crate::config::{Expiry, PgConfig};
use crate::error::PgError;
use crate::row::{self, millis};

const ENSURE_PARTITIONS: &str = include_str!("../sql/ensure_partitions.sql");
const DROP_PARTITIONS: &str = include_str!("../sql/drop_partitions.sql");

/// How far ahead history partitions exist: this month and the next.
const HISTORY_AHEAD: Duration = Duration::from_secs(40 * 86_400);
/// How many dedup partition widths exist ahead of now, at least.
const DEDUP_AHEAD_WIDTHS: u32 = 8;
/// Partition DDL waits at most this long for a lock, so it never queues claims behind it for long.
const DDL_LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '5s'";

/// Warns, once per store, when `sslmode` was left at `prefer` for a server reached over a
/// network: the connections then go in plaintext whenever the server offers no TLS, and the
/// server's certificate is not checked.
fn warn_if_plaintext_may_be_used(cfg: &PgConfig) {
    let (Ok(plan), Ok(pg)) = (cfg.tls_plan(), cfg.connection_config()) else {
        return;
    };
    let remote = pg.get_hosts().iter().any(|host| match host {
        tokio_postgres::config::Host::Tcp(name) => {
            let loopback = name
                .parse::<std::net::IpAddr>()
                .map_or(name == "localhost", |ip| ip.is_loopback());
            !loopback
        }
        #[cfg(unix)]
        tokio_postgres::config::Host::Unix(_) => false,
    });
    if remote && !plan.mode_given {
        tracing::warn!(
            target = %cfg.target(),
            "sslmode is not set, so it is prefer: plaintext whenever the server offers no TLS, and the server's certificate is not checked; set sslmode=verify-full (and postgres.tls.ca_file) for a server reached over a network"
        );
    }
}

/// What the store and its batcher share: the pool and the configuration.
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) pool: Pool,
    pub(crate) cfg: Arc<PgConfig>,
    /// The longest TTL claimed so far (ms): how far ahead dedup partitions must reach.
    pub(crate) max_ttl_ms: Arc<AtomicU64>,
    /// Each claim batch's round trip, recorded by the batcher, which the sweeper paces itself by.
    pub(crate) claim_latency: Arc<ClaimLatency>,
}

impl Db {
    /// A pool of `cfg.pool_size` connections to `cfg.url`, with idemgate's session settings.
    pub(crate) fn connect(cfg: PgConfig) -> Result<Self, PgError> {
        warn_if_plaintext_may_be_used(&cfg);
        let manager = Manager::from_config(
            cfg.connection_config()?,
            cfg.tls_connector()?,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(cfg.pool_size.get())
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(Duration::from_secs(10)))
            .wait_timeout(Some(Duration::from_secs(30)))
            .build()
            .map_err(|source| PgError::PoolBuild { source })?;
        Ok(Self::new(pool, cfg))
    }

    /// On a pool built elsewhere.
    pub(crate) fn new(pool: Pool, cfg: PgConfig) -> Self {
        Self {
            pool,
            cfg: Arc::new(cfg),
            max_ttl_ms: Arc::new(AtomicU64::new(0)),
            claim_latency: Arc::default(),
        }
    }

    pub(crate) async fn client(&self) -> Result<Object, PgError> {
        self.pool.get().await.map_err(|source| match source {
            // A new connection that failed at TLS says why as a direct connection would.
            PoolError::Backend(e) => match PgError::connect(&self.cfg, e) {
                PgError::Connect { source, .. } => PgError::Pool {
                    source: PoolError::Backend(source),
                },
                tls => tls,
            },
            source => PgError::Pool { source },
        })
    }

    /// Runs `op`; when it needed a partition that does not exist yet, creates the partitions
    /// (`ttl_ms` ahead for dedup rows) and runs it once more.
    pub(crate) async fn with_partitions<T, F, Fut>(&self, ttl_ms: u64, op: F) -> Result<T, PgError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, PgError>>,
    {
        match op().await {
            Err(e) if e.is_missing_partition() => {
                tracing::info!(schema = %self.cfg.schema, "a row needed a partition not yet created; creating partitions");
                self.ensure_partitions(ttl_ms).await?;
                op().await
            }
            other => other,
        }
    }

    /// Creates the partitions rows need: history this month and next, dedup (partitioned mode)
    /// far enough ahead for the longest TTL seen (and `ttl_ms`). Returns the names created.
    pub(crate) async fn ensure_partitions(&self, ttl_ms: u64) -> Result<Vec<String>, PgError> {
        const CONTEXT: &str = "creating partitions ahead";
        let dedup_ahead = match self.cfg.expiry {
            Expiry::Batched { .. } => Duration::ZERO,
            Expiry::Partitioned { width } => {
                let seen = self.max_ttl_ms.load(Ordering::Relaxed).max(ttl_ms);
                (width * DEDUP_AHEAD_WIDTHS).max(Duration::from_millis(seen)) + width
            }
        };
        let created = self
            .partition_ddl(
                ENSURE_PARTITIONS,
                &[&millis(HISTORY_AHEAD), &millis(dedup_ahead)],
                "created",
                CONTEXT,
            )
            .await?;
        if !created.is_empty() {
            tracing::info!(schema = %self.cfg.schema, ?created, "created partitions");
        }
        Ok(created)
    }

    /// Drops the partitions past their time (dedup once expired, history past the retention).
    /// Returns the names dropped.
    pub(crate) async fn drop_partitions(&self) -> Result<Vec<String>, PgError> {
        const CONTEXT: &str = "dropping expired partitions";
        let dropped = self
            .partition_ddl(
                DROP_PARTITIONS,
                // Archived history is dropped by the retention job, once the archive holds it.
                &[&(!self.cfg.history_archived).then(|| millis(self.cfg.history_retention))],
                "dropped",
                CONTEXT,
            )
            .await?;
        if !dropped.is_empty() {
            tracing::info!(schema = %self.cfg.schema, ?dropped, "dropped partitions");
        }
        Ok(dropped)
    }

    /// History's partitions wholly past the retention, oldest first.
    pub(crate) async fn history_past(
        &self,
        retention: Duration,
    ) -> Result<Vec<idemgate_core::RetentionUnit>, PgError> {
        const CONTEXT: &str = "listing history partitions past the retention";
        let client = self.client().await?;
        let rows = client
            .query(
                include_str!("../sql/history_past.sql"),
                &[&millis(retention)],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        rows.iter()
            .map(|r| {
                Ok(idemgate_core::RetentionUnit {
                    name: row::get::<String>(r, "name", CONTEXT)?,
                    from: idemgate_core::Timestamp::from_millis(row::get(r, "from_ms", CONTEXT)?),
                    until: idemgate_core::Timestamp::from_millis(row::get(r, "until_ms", CONTEXT)?),
                })
            })
            .collect()
    }

    /// Drops history partition `name` if it is one and wholly past `retention` (checked under
    /// the partition lock, in the transaction that drops it); the rows it held.
    pub(crate) async fn drop_history_partition(
        &self,
        name: &str,
        retention: Duration,
    ) -> Result<u64, PgError> {
        const CONTEXT: &str = "dropping an archived history partition";
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(PgError::db(CONTEXT))?;
        tx.batch_execute(DDL_LOCK_TIMEOUT)
            .await
            .map_err(PgError::db(CONTEXT))?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('idemgate:partitions:' || current_schema(), 0))",
            &[],
        )
        .await
        .map_err(PgError::db(CONTEXT))?;
        let past = tx
            .query(
                include_str!("../sql/history_past.sql"),
                &[&millis(retention)],
            )
            .await
            .map_err(PgError::db(CONTEXT))?;
        let known = past
            .iter()
            .any(|r| r.try_get::<_, String>("name").is_ok_and(|n| n == name));
        if !known {
            return Ok(0);
        }
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        tx.batch_execute("SET LOCAL enable_seqscan = on")
            .await
            .map_err(PgError::db(CONTEXT))?;
        let n: i64 = tx
            .query_one(&format!("SELECT count(*) AS n FROM {quoted}"), &[])
            .await
            .map_err(PgError::db(CONTEXT))?
            .get("n");
        tx.batch_execute(&format!("DROP TABLE {quoted}"))
            .await
            .map_err(PgError::db(CONTEXT))?;
        tx.commit().await.map_err(PgError::db(CONTEXT))?;
        tracing::info!(schema = %self.cfg.schema, partition = name, rows = n, "dropped an archived history partition");
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Runs one partition function in its own transaction under [`DDL_LOCK_TIMEOUT`]; the
    /// partition names it answers in `column`.
    async fn partition_ddl(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        column: &'static str,
        context: &'static str,
    ) -> Result<Vec<String>, PgError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(PgError::db(context))?;
        tx.batch_execute(DDL_LOCK_TIMEOUT)
            .await
            .map_err(PgError::db(context))?;
        let rows = tx.query(sql, params).await.map_err(PgError::db(context))?;
        tx.commit().await.map_err(PgError::db(context))?;
        rows.iter().map(|r| row::get(r, column, context)).collect()
    }
}

/// Runs `statements` (each with its parameters) in one transaction that turns sequential scans
/// and hash and merge joins back on for itself; their rows, in order. For the statements that
/// aggregate whole tables (the dashboard's counts, the advisor's window, inbox stats), which a
/// scan serves better than the index lookups the store's session settings leave the hot path.
pub(crate) async fn reporting(
    client: &mut Object,
    statements: &[(&str, &[&(dyn tokio_postgres::types::ToSql + Sync)])],
) -> Result<Vec<Vec<tokio_postgres::Row>>, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.batch_execute(
        "SET LOCAL enable_seqscan = on; SET LOCAL enable_hashjoin = on; \
         SET LOCAL enable_mergejoin = on",
    )
    .await?;
    let mut out = Vec::with_capacity(statements.len());
    for (sql, params) in statements {
        out.push(tx.query(*sql, params).await?);
    }
    tx.commit().await?;
    Ok(out)
}
