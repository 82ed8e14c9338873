//! [`PgError`]: what can go wrong in this crate, and how it becomes core's [`StoreError`].

use idemgate_core::StoreError;
use tokio_postgres::error::SqlState;

use crate::config::PgConfig;
use crate::config_error::ConfigError;
use crate::tls::SslMode;

/// Why a PostgreSQL store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The server could not be reached or refused the connection (the cause says why: the
    /// operating system's error, or the server's own message).
    #[error("cannot connect to PostgreSQL at {target}")]
    Connect {
        target: String,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The connection failed at TLS: the server's certificate was refused (`reason` says why:
    /// an unknown issuer, a name it is not valid for, ...), a client certificate was, or the
    /// server offers no TLS where `sslmode` requires it.
    #[error("cannot connect to PostgreSQL at {target} with sslmode={sslmode}: {reason}")]
    Tls {
        target: String,
        sslmode: SslMode,
        reason: String,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The schema was migrated by a newer idemgate. Nothing was changed.
    #[error(
        "schema {schema:?} was migrated by a newer idemgate (schema version {found}, this build knows up to {known}); upgrade idemgate"
    )]
    NewerSchema {
        schema: String,
        found: i64,
        known: i64,
    },
    /// There is no idemgate schema of that name (a read-only command does not create one).
    #[error("no idemgate schema {schema:?} at {target}; run idemgate migrate")]
    NoSchema { schema: String, target: String },
    /// The schema is older than this build: it needs `idemgate migrate` first.
    #[error(
        "idemgate schema {schema:?} at {target} is at version {found}, this build needs {known}; run idemgate migrate"
    )]
    OlderSchema {
        schema: String,
        target: String,
        found: i64,
        known: i64,
    },
    /// The schema was created for the other expiry mode (or another partition width).
    #[error(
        "schema {schema:?} keeps dedup records {stored}, but the configuration keeps them {configured}; use another schema or the mode it was created with"
    )]
    ModeMismatch {
        schema: String,
        stored: String,
        configured: String,
    },
    /// A connection of a pool given to [`crate::PgStore::from_pool`] does not look in the
    /// store's schema first.
    #[error(
        "the pool's connections run with search_path {found:?}, but the store's statements need schema {schema:?} first; build the pool from PgConfig::connection_config, or set search_path"
    )]
    SearchPath { schema: String, found: String },
    /// A connection could not be had from the pool.
    #[error("getting a PostgreSQL connection from the pool")]
    Pool {
        #[source]
        source: deadpool_postgres::PoolError,
    },
    /// The pool could not be built.
    #[error("building the PostgreSQL connection pool")]
    PoolBuild {
        #[source]
        source: deadpool_postgres::BuildError,
    },
    /// A statement failed; `context` says which.
    #[error("PostgreSQL failed while {context}")]
    Db {
        context: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    /// A column of an answer is missing, or not of the type this build reads it as.
    #[error("unexpected answer from PostgreSQL while {context}: cannot read column {column:?}")]
    Column {
        context: &'static str,
        column: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The database answered something this build does not understand.
    #[error("unexpected answer from PostgreSQL while {context}: {what}")]
    Unexpected { context: &'static str, what: String },
    /// A sweep batch failed.
    #[error("sweeping expired records")]
    Sweep {
        #[source]
        source: StoreError,
    },
    /// The store is shut down.
    #[error("the store is closed")]
    Closed,
}

impl PgError {
    /// Wraps a statement error with what was being done.
    pub(crate) fn db(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> Self {
        move |source| Self::Db { context, source }
    }

    /// A connection to `cfg`'s server that failed: [`PgError::Tls`] when it failed at TLS,
    /// else [`PgError::Connect`].
    pub(crate) fn connect(cfg: &PgConfig, source: tokio_postgres::Error) -> Self {
        let target = cfg.target();
        // tokio-postgres has no accessor for its error kinds; this is how it words Kind::Tls,
        // the handshake's failure and "server does not support TLS" alike (tests/tls.rs fails
        // should that change).
        if source.to_string() == "error performing TLS handshake" {
            let reason = std::error::Error::source(&source)
                .map_or_else(|| source.to_string(), idemgate_tls::explain);
            Self::Tls {
                target,
                sslmode: cfg.sslmode().unwrap_or(SslMode::Prefer),
                reason,
                source,
            }
        } else {
            Self::Connect { target, source }
        }
    }

    fn db_source(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Self::Db { source, .. } => Some(source),
            Self::Pool {
                source: deadpool_postgres::PoolError::Backend(source),
            } => Some(source),
            _ => None,
        }
    }

    /// A row needed a partition that does not exist yet (history at a month boundary, dedup
    /// beyond the partitions created ahead).
    pub(crate) fn is_missing_partition(&self) -> bool {
        self.db_source()
            .and_then(tokio_postgres::Error::as_db_error)
            .is_some_and(|db| {
                *db.code() == SqlState::CHECK_VIOLATION
                    && db.message().starts_with("no partition of relation")
            })
    }

    /// A statement that was sent but whose answer never came: the connection broke under it
    /// (closed, reset, a TCP user timeout on a database that stopped answering). It may have
    /// committed or not. A statement the server refused (any error it answered) rolled back.
    pub(crate) fn is_ambiguous(&self) -> bool {
        matches!(self, Self::Db { source, .. } if source.as_db_error().is_none())
    }

    /// A deadlock PostgreSQL broke by aborting us; running the batch again is safe.
    pub(crate) fn is_deadlock(&self) -> bool {
        self.db_source()
            .and_then(tokio_postgres::Error::code)
            .is_some_and(|code| *code == SqlState::T_R_DEADLOCK_DETECTED)
    }
}

impl From<PgError> for StoreError {
    fn from(e: PgError) -> Self {
        match e {
            PgError::NewerSchema { found, known, .. } => StoreError::NewerSchema { found, known },
            PgError::Closed => StoreError::Closed,
            PgError::Sweep { source } => source,
            other => StoreError::backend("the PostgreSQL store", other),
        }
    }
}
