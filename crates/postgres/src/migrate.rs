//! Versioned migrations: `.sql` files applied in one transaction under an advisory lock.
//!
//! Two processes migrating at once serialize on the lock; the second finds the work done. A
//! schema migrated by a newer idemgate is refused before anything is changed, and a failing
//! migration rolls back whole: PostgreSQL's DDL is transactional, so nothing is ever
//! half-migrated.

use std::collections::HashMap;

use tokio_postgres::Client;

use crate::config::PgConfig;
use crate::error::PgError;
use crate::row;

/// One migration: a version and the SQL that brings the schema to it.
#[derive(Debug)]
struct Migration {
    version: i64,
    name: &'static str,
    sql: &'static str,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../sql/migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "holders",
        sql: include_str!("../sql/migrations/0002_holders.sql"),
    },
    Migration {
        version: 3,
        name: "inbox",
        sql: include_str!("../sql/migrations/0003_inbox.sql"),
    },
    Migration {
        version: 4,
        name: "finish_batch",
        sql: include_str!("../sql/migrations/0004_finish_batch.sql"),
    },
    Migration {
        version: 5,
        name: "history by source and time",
        sql: include_str!("../sql/migrations/0005_history_by_source_time.sql"),
    },
    Migration {
        version: 6,
        name: "finish_batch by key",
        sql: include_str!("../sql/migrations/0006_finish_batch_by_key.sql"),
    },
    Migration {
        version: 7,
        name: "completed records",
        sql: include_str!("../sql/migrations/0007_completed.sql"),
    },
    Migration {
        version: 8,
        name: "boot leases",
        sql: include_str!("../sql/migrations/0008_boot_leases.sql"),
    },
    Migration {
        version: 9,
        name: "plan-proof hot path, late-duplicate horizon",
        sql: include_str!("../sql/migrations/0009_plan_proof.sql"),
    },
    Migration {
        version: 10,
        name: "inbox attempts in history, queue items by key, the expiry index out of keys' reach",
        sql: include_str!("../sql/migrations/0010_inbox_story_and_expiry_index.sql"),
    },
    Migration {
        version: 11,
        name: "stored results",
        sql: include_str!("../sql/migrations/0011_stored_results.sql"),
    },
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i64 = 11;

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateReport {
    /// The schema migrated.
    pub schema: String,
    /// Versions applied by this call, oldest first (empty when the schema was up to date).
    pub applied: Vec<i64>,
    /// The schema's version now.
    pub version: i64,
}

/// Brings `cfg.schema` up to [`SCHEMA_VERSION`], creating the schema if needed.
///
/// Safe to run from several processes at once and to run again.
///
/// # Errors
/// [`PgError::Config`] for a bad configuration, [`PgError::Connect`] when the server cannot be
/// reached or refuses the connection, [`PgError::Tls`] when TLS fails, [`PgError::NewerSchema`] when a newer idemgate migrated the schema (nothing changed),
/// [`PgError::ModeMismatch`] when the schema was created for the other expiry mode, and
/// [`PgError::Db`] when a statement fails (the migration rolled back).
pub async fn migrate(cfg: &PgConfig) -> Result<MigrateReport, PgError> {
    cfg.validate()?;
    let mut client = connect_one(cfg).await?;
    migrate_on(&mut client, cfg).await
}

/// Checks, without changing anything, that `cfg.schema` exists at [`SCHEMA_VERSION`], and
/// adopts the expiry mode it was created with (so that read-only tools need not be told it).
///
/// # Errors
/// [`PgError::NoSchema`] when there is no idemgate schema of that name, [`PgError::OlderSchema`]
/// when it needs `idemgate migrate`, [`PgError::NewerSchema`], [`PgError::Connect`],
/// [`PgError::Db`].
pub async fn check_existing(cfg: &mut PgConfig) -> Result<(), PgError> {
    cfg.validate()?;
    let client = connect_one(cfg).await?;
    let schema = cfg.schema.clone();
    let migrations = format!("{schema}.schema_migrations");
    const LOOKING: &str = "looking for the schema";
    let row = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL AS found",
            &[&migrations],
        )
        .await
        .map_err(PgError::db(LOOKING))?;
    let exists: bool = row::get(&row, "found", LOOKING)?;
    if !exists {
        return Err(PgError::NoSchema {
            schema,
            target: cfg.target(),
        });
    }
    let found = schema_version(&client).await?;
    if found > SCHEMA_VERSION {
        return Err(PgError::NewerSchema {
            schema,
            found,
            known: SCHEMA_VERSION,
        });
    }
    if found < SCHEMA_VERSION {
        return Err(PgError::OlderSchema {
            schema,
            target: cfg.target(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    let meta = expiry_meta(&client).await?;
    let get = |k: &str| meta.get(k).cloned().unwrap_or_default();
    if get("dedup_mode") == "partitioned" {
        let secs: u64 = get("partition_width_s")
            .parse()
            .map_err(|_| PgError::Unexpected {
                context: "reading the schema's expiry mode",
                what: format!("partition width {:?}", get("partition_width_s")),
            })?;
        cfg.expiry = crate::Expiry::Partitioned {
            width: std::time::Duration::from_secs(secs),
        };
    } else if matches!(cfg.expiry, crate::Expiry::Partitioned { .. }) {
        cfg.expiry = crate::Expiry::batched();
    }
    Ok(())
}

/// One connection outside the pool, its driver task spawned.
pub(crate) async fn connect_one(cfg: &PgConfig) -> Result<Client, PgError> {
    let pg = cfg.connection_config()?;
    let (client, connection) = pg
        .connect(cfg.tls_connector()?)
        .await
        .map_err(|source| PgError::connect(cfg, source))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "migration connection closed");
        }
    });
    Ok(client)
}

/// Brings the schema up to date on `client` (which must look in `cfg.schema` first), in one
/// transaction under the migration lock.
pub(crate) async fn migrate_on(
    client: &mut Client,
    cfg: &PgConfig,
) -> Result<MigrateReport, PgError> {
    let tx = client
        .transaction()
        .await
        .map_err(PgError::db("starting the migration transaction"))?;
    match migrate_in(&tx, cfg).await {
        Ok(report) => {
            tx.commit()
                .await
                .map_err(PgError::db("committing the migration"))?;
            Ok(report)
        }
        Err(e) => {
            // Roll back now rather than on drop, so the locks are gone when we return.
            if let Err(rollback) = tx.rollback().await {
                tracing::debug!(error = %rollback, "rolling the migration back");
            }
            Err(e)
        }
    }
}

async fn migrate_in(
    tx: &tokio_postgres::Transaction<'_>,
    cfg: &PgConfig,
) -> Result<MigrateReport, PgError> {
    let schema = cfg.schema.as_str();
    // A migration may rewrite or index a large table: the connections' statement timeout, meant
    // for the hot path, does not bound it. The migration lock is waited for the same way.
    tx.batch_execute("SET LOCAL statement_timeout = 0")
        .await
        .map_err(PgError::db(
            "lifting the statement timeout for the migration",
        ))?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('idemgate:migrate:' || $1::text, 0))",
        &[&schema],
    )
    .await
    .map_err(PgError::db("taking the migration lock"))?;
    // The schema name is a validated plain identifier.
    tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\""))
        .await
        .map_err(PgError::db("creating the schema"))?;
    tx.batch_execute(include_str!("../sql/schema_migrations.sql"))
        .await
        .map_err(PgError::db("creating the migrations table"))?;
    let found = schema_version(tx).await?;
    if found > SCHEMA_VERSION {
        // The caller rolls back: nothing was changed.
        return Err(PgError::NewerSchema {
            schema: schema.to_owned(),
            found,
            known: SCHEMA_VERSION,
        });
    }

    let width = cfg
        .expiry
        .width_secs()
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > found) {
        tx.execute(
            "SELECT set_config('idemgate.dedup_mode', $1, true), \
                    set_config('idemgate.partition_width_s', $2, true)",
            &[&cfg.expiry.mode(), &width],
        )
        .await
        .map_err(PgError::db("setting the migration's parameters"))?;
        tx.batch_execute(m.sql)
            .await
            .map_err(PgError::db("applying a migration"))?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            &[&m.version, &m.name],
        )
        .await
        .map_err(PgError::db("recording a migration"))?;
        tracing::info!(
            schema,
            version = m.version,
            name = m.name,
            "applied migration"
        );
        applied.push(m.version);
    }

    check_mode(tx, cfg).await?;
    Ok(MigrateReport {
        schema: schema.to_owned(),
        applied,
        version: SCHEMA_VERSION,
    })
}

/// Refuses a schema created for another expiry mode or partition width.
async fn check_mode(
    client: &impl tokio_postgres::GenericClient,
    cfg: &PgConfig,
) -> Result<(), PgError> {
    let meta = expiry_meta(client).await?;
    let get = |k: &str| meta.get(k).cloned().unwrap_or_default();
    let describe = |mode: &str, width: &str| match mode {
        "partitioned" => format!("in partitioned mode ({width} s partitions)"),
        other => format!("in {other} mode"),
    };
    let stored = describe(&get("dedup_mode"), &get("partition_width_s"));
    let configured = describe(
        cfg.expiry.mode(),
        &cfg.expiry
            .width_secs()
            .map(|s| s.to_string())
            .unwrap_or_default(),
    );
    if stored == configured {
        Ok(())
    } else {
        Err(PgError::ModeMismatch {
            schema: cfg.schema.clone(),
            stored,
            configured,
        })
    }
}

/// The newest migration applied (0 for none).
pub(crate) async fn schema_version(
    client: &impl tokio_postgres::GenericClient,
) -> Result<i64, PgError> {
    const CONTEXT: &str = "reading the schema version";
    let row = client
        .query_one(
            "SELECT coalesce(max(version), 0)::bigint AS version FROM schema_migrations",
            &[],
        )
        .await
        .map_err(PgError::db(CONTEXT))?;
    row::get(&row, "version", CONTEXT)
}

/// The `meta` rows that say how the schema expires dedup records.
async fn expiry_meta(
    client: &impl tokio_postgres::GenericClient,
) -> Result<HashMap<String, String>, PgError> {
    const CONTEXT: &str = "reading the schema's expiry mode";
    let rows = client
        .query(
            "SELECT key, value FROM meta WHERE key IN ('dedup_mode', 'partition_width_s')",
            &[],
        )
        .await
        .map_err(PgError::db(CONTEXT))?;
    rows.iter()
        .map(|r| Ok((row::get(r, "key", CONTEXT)?, row::get(r, "value", CONTEXT)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{MIGRATIONS, SCHEMA_VERSION};

    #[test]
    fn versions_grow_and_end_at_the_schema_version() {
        assert!(MIGRATIONS.windows(2).all(|w| w[0].version < w[1].version));
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(SCHEMA_VERSION));
    }
}
