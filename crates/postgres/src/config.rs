//! [`PgConfig`]: where the store lives and how it batches and expires, validated once.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

/// How expired dedup records leave the table. Chosen when the schema is created; a store refuses
/// to open a schema created in the other mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// A plain table; the sweeper deletes expired rows in bounded batches (`batch` rows per short
    /// transaction, `pause` between batches), never with one unbounded `DELETE`.
    Batched { batch: NonZeroU32, pause: Duration },
    /// Rows range-partitioned on `expires_at`, `width` per partition (a width that divides a day
    /// evenly); the sweeper drops a partition whole once its upper bound has passed.
    Partitioned { width: Duration },
}

impl Expiry {
    /// The default batched mode: 5000 rows per batch, 50 ms between batches.
    pub const fn batched() -> Self {
        Self::Batched {
            batch: NonZeroU32::new(5_000).expect("non-zero"),
            pause: Duration::from_millis(50),
        }
    }

    /// Partitioned mode with the default width of one day.
    pub const fn partitioned() -> Self {
        Self::Partitioned {
            width: Duration::from_secs(86_400),
        }
    }

    /// `batched` or `partitioned`, as the schema's `meta` table records it.
    pub fn mode(&self) -> &'static str {
        match self {
            Self::Batched { .. } => "batched",
            Self::Partitioned { .. } => "partitioned",
        }
    }

    /// The partition width in whole seconds (`None` in batched mode).
    pub(crate) fn width_secs(&self) -> Option<u64> {
        match self {
            Self::Batched { .. } => None,
            Self::Partitioned { width } => Some(width.as_secs()),
        }
    }
}

impl Default for Expiry {
    fn default() -> Self {
        Self::batched()
    }
}

/// The PostgreSQL store's configuration.
///
/// Build one with [`PgConfig::new`] and adjust the public fields; [`PgConfig::validate`] (run by
/// [`crate::PgStore::connect`] and [`crate::migrate()`]) names the key of anything wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgConfig {
    /// `postgres://user@host:port/db` (or key=value form). TLS is not supported.
    pub url: String,
    /// The schema holding idemgate's tables; created by the migrations. Default `idemgate`.
    pub schema: String,
    /// Connections in the pool. Default 16.
    pub pool_size: NonZeroUsize,
    /// Most claims group-committed into one statement. Default 256.
    pub batch_max: NonZeroUsize,
    /// How long a batch waits for more claims while another batch is in flight. Default 200 µs.
    pub batch_linger: Duration,
    /// Claim batches in flight at once (each on its own connection). Default 2: fewer batches
    /// in flight means larger batches and fewer commits.
    pub batch_inflight: NonZeroUsize,
    /// How expired dedup records leave.
    pub expiry: Expiry,
    /// How long history is kept before its monthly partition is dropped. Default 400 days.
    pub history_retention: Duration,
}

impl PgConfig {
    /// The defaults, on `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "idemgate".to_owned(),
            pool_size: NonZeroUsize::new(16).expect("non-zero"),
            batch_max: NonZeroUsize::new(256).expect("non-zero"),
            batch_linger: Duration::from_micros(200),
            batch_inflight: NonZeroUsize::new(2).expect("non-zero"),
            expiry: Expiry::default(),
            history_retention: Duration::from_secs(400 * 86_400),
        }
    }

    /// Checks every key.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first key that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.pg_config()?;
        validate_schema(&self.schema)?;
        if self.batch_linger > Duration::from_secs(1) {
            return Err(ConfigError::BatchLinger {
                linger: self.batch_linger,
            });
        }
        if self.history_retention < Duration::from_secs(86_400) {
            return Err(ConfigError::HistoryRetention {
                retention: self.history_retention,
            });
        }
        if let Expiry::Partitioned { width } = self.expiry {
            let day = 86_400;
            let whole = width.subsec_nanos() == 0;
            let secs = width.as_secs();
            if !whole || secs == 0 || secs > day || day % secs != 0 {
                return Err(ConfigError::PartitionWidth { width });
            }
        }
        Ok(())
    }

    /// The parsed URL, with idemgate's session settings added.
    pub(crate) fn pg_config(&self) -> Result<tokio_postgres::Config, ConfigError> {
        let mut pg: tokio_postgres::Config = self
            .url
            .parse()
            .map_err(|source| ConfigError::Url { source })?;
        // The schema name is validated as a plain identifier, so it needs no quoting here.
        let mut options = pg.get_options().map(str::to_owned).unwrap_or_default();
        if !options.is_empty() {
            options.push(' ');
        }
        // Generic plans: the claim functions' statements are planned once per connection, not on
        // every call (their array parameters make custom plans no better).
        options.push_str(&format!(
            "-c search_path={} -c TimeZone=UTC -c plan_cache_mode=force_generic_plan",
            self.schema
        ));
        pg.options(&options);
        if pg.get_application_name().is_none() {
            pg.application_name("idemgate");
        }
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(Duration::from_secs(10));
        }
        Ok(pg)
    }

    /// `host:port/dbname` of the URL, for error messages (never the password).
    pub(crate) fn target(&self) -> String {
        let Ok(pg) = self.url.parse::<tokio_postgres::Config>() else {
            return "<unparsable url>".to_owned();
        };
        let host = pg
            .get_hosts()
            .first()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".to_owned());
        let port = pg.get_ports().first().copied().unwrap_or(5432);
        let db = pg.get_dbname().unwrap_or("");
        format!("{host}:{port}/{db}")
    }
}

fn validate_schema(schema: &str) -> Result<(), ConfigError> {
    let mut bytes = schema.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if first_ok && rest_ok && schema.len() <= 63 && !schema.starts_with("pg_") {
        Ok(())
    } else {
        Err(ConfigError::Schema {
            schema: schema.to_owned(),
        })
    }
}

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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        PgConfig::new("postgres://root@localhost/test")
            .validate()
            .unwrap();
    }

    #[test]
    fn partition_width_must_divide_a_day() {
        let mut cfg = PgConfig::new("postgres://root@localhost/test");
        for ok in [1, 60, 3_600, 6 * 3_600, 86_400] {
            cfg.expiry = Expiry::Partitioned {
                width: Duration::from_secs(ok),
            };
            cfg.validate().unwrap();
        }
        for bad in [
            Duration::ZERO,
            Duration::from_secs(7 * 3_600),
            Duration::from_secs(2 * 86_400),
            Duration::from_millis(1_500),
        ] {
            cfg.expiry = Expiry::Partitioned { width: bad };
            let err = cfg.validate().unwrap_err();
            assert!(matches!(err, ConfigError::PartitionWidth { .. }), "{err}");
            assert!(err.to_string().contains("postgres.expiry.width"), "{err}");
        }
    }

    #[test]
    fn schema_names_are_plain_identifiers() {
        let mut cfg = PgConfig::new("postgres://root@localhost/test");
        for bad in ["", "Idemgate", "a-b", "pg_x", "x;drop", "1abc"] {
            cfg.schema = bad.to_owned();
            assert!(
                matches!(cfg.validate(), Err(ConfigError::Schema { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn url_errors_name_the_key() {
        let err = PgConfig::new("postgres://root@localhost:notaport/test")
            .validate()
            .unwrap_err();
        assert!(err.to_string().starts_with("postgres.url"), "{err}");
    }

    #[test]
    fn target_hides_the_password() {
        let cfg = PgConfig::new("postgres://u:secret@db.example:6543/app");
        assert_eq!(cfg.target(), "db.example:6543/app");
    }
}
