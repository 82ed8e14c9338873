//! [`ConfigError`]: a PostgreSQL setting that cannot work, naming its key.

use std::time::Duration;

/// A configuration value that cannot work. Each names its key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("postgres.url: does not parse as a PostgreSQL connection URL")]
    Url {
        #[source]
        source: tokio_postgres::Error,
    },
    #[error(
        "postgres.schema: {schema:?} is not a plain schema name (expected [a-z_][a-z0-9_]*, at most 63 characters, not starting with pg_)"
    )]
    Schema { schema: String },
    #[error("postgres.batch_linger: {linger:?} is longer than the 1 s limit")]
    BatchLinger { linger: Duration },
    #[error("postgres.history_retention: {retention:?} is shorter than one day")]
    HistoryRetention { retention: Duration },
    #[error(
        "postgres.expiry.width: {width:?} does not divide a day evenly (use whole seconds that divide 24h, such as 1h, 6h or 1d)"
    )]
    PartitionWidth { width: Duration },
    #[error(
        "postgres.url: sslmode={value:?} is not an sslmode libpq knows (disable, prefer, require, verify-ca or verify-full)"
    )]
    SslMode { value: String },
    #[error("postgres.url: does not parse as a PostgreSQL connection URL: {what}")]
    UrlSyntax { what: String },
    #[error(
        "postgres.url says {url_key}={url_value}, but postgres.tls.{settings_key} = {settings_value}; set it in one place"
    )]
    TlsConflict {
        url_key: &'static str,
        url_value: String,
        settings_key: &'static str,
        settings_value: String,
    },
    #[error("{key}: is set, but sslmode is disable, which never uses it")]
    TlsUnused { key: &'static str },
    #[error("{key}: not set, and {other} needs it: a client certificate goes with its key")]
    HalfIdentity {
        key: &'static str,
        other: &'static str,
    },
    #[error(
        "{key}: not set, and sslmode=verify-ca checks the server's certificate against a CA file (use verify-full for a server whose certificate a system authority signs)"
    )]
    NeedsCa { key: &'static str },
    #[error(
        "{key}: sslrootcert=system trusts every authority the system does, which protects only with sslmode=verify-full, not {mode}"
    )]
    SystemRoots {
        key: &'static str,
        /// The sslmode, as libpq spells it.
        mode: &'static str,
    },
    #[error("{key}: the file cannot be used")]
    TlsFile {
        key: &'static str,
        #[source]
        source: idemgate_tls::TlsError,
    },
}
