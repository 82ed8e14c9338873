//! [`PgConfig`]: where the store lives and how it batches and expires, validated once; and
//! [`PgSettings`], the part of it a configuration file's `[store.postgres]` table holds.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use idemgate_core::sweep::Pacing;
use serde::Deserialize;

pub use crate::config_error::ConfigError;
use crate::connector::MakeRustls;
use crate::tls::{self, PgTls, SslMode, TlsPlan};

/// Rows per batch of the batched sweep, by default.
const SWEEP_BATCH: NonZeroU32 = NonZeroU32::new(5_000).expect("non-zero");
/// The pause between batches of the batched sweep, by default.
const SWEEP_PAUSE: Duration = Duration::from_millis(50);
/// The width of a dedup partition in partitioned mode, by default.
const PARTITION_WIDTH: Duration = Duration::from_secs(86_400);

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
            batch: SWEEP_BATCH,
            pause: SWEEP_PAUSE,
        }
    }

    /// Partitioned mode with the default width of one day.
    pub const fn partitioned() -> Self {
        Self::Partitioned {
            width: PARTITION_WIDTH,
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

/// The expiry mode alone, as `[store.postgres] expiry` names it: `batched` or `partitioned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExpiryMode {
    /// [`Expiry::Batched`].
    #[default]
    Batched,
    /// [`Expiry::Partitioned`].
    Partitioned,
}

/// `[store.postgres]`: the store's settings as a configuration file writes them, everything but
/// the URL and the history retention (the `[store]` table's `url` and `history_retention`).
///
/// Every key may be left out, for its default; an unknown key is refused. Durations are written
/// as text with a unit (`200us`, `50ms`, `1d`); a count of 0 is refused with its key named, never
/// replaced by a default. [`PgConfig::from_settings`] makes the store's configuration of it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PgSettings {
    /// The schema holding idemgate's tables; created by the migrations. Default `idemgate`.
    pub schema: String,
    /// Most claims group-committed into one statement. Default 256.
    pub batch_max: NonZeroUsize,
    /// How long a batch waits for more claims while another batch is in flight. Default 200 µs.
    #[serde(with = "humantime_serde")]
    pub batch_linger: Duration,
    /// Connections in the pool. Default 16.
    pub pool_size: NonZeroUsize,
    /// How expired dedup records leave; fixed when the schema is created. Default `batched`.
    pub expiry: ExpiryMode,
    /// Rows per sweep batch. Default 5000.
    pub sweep_batch: NonZeroU32,
    /// The pause between sweep batches. Default 50 ms.
    #[serde(with = "humantime_serde")]
    pub sweep_pause: Duration,
    /// `adaptive` (the default): a sweep run backs off (shorter batches, longer pauses) while
    /// claims are slower than their baseline; `fixed`: always `sweep_batch` and `sweep_pause`.
    pub sweep_pacing: Pacing,
    /// The width of a dedup partition (`partitioned` expiry); must divide a day evenly. Default
    /// one day.
    #[serde(with = "humantime_serde")]
    pub partition_width: Duration,
    /// `[store.postgres.tls]`: TLS for the connections (or the same keys in the URL).
    pub tls: PgTls,
}

impl Default for PgSettings {
    fn default() -> Self {
        Self {
            schema: "idemgate".to_owned(),
            batch_max: NonZeroUsize::new(256).expect("non-zero"),
            batch_linger: Duration::from_micros(200),
            pool_size: NonZeroUsize::new(16).expect("non-zero"),
            expiry: ExpiryMode::default(),
            sweep_batch: SWEEP_BATCH,
            sweep_pause: SWEEP_PAUSE,
            sweep_pacing: Pacing::default(),
            partition_width: PARTITION_WIDTH,
            tls: PgTls::default(),
        }
    }
}

impl PgSettings {
    /// The expiry these settings describe: `sweep_batch` and `sweep_pause` in batched mode,
    /// `partition_width` in partitioned mode.
    pub fn expiry(&self) -> Expiry {
        match self.expiry {
            ExpiryMode::Batched => Expiry::Batched {
                batch: self.sweep_batch,
                pause: self.sweep_pause,
            },
            ExpiryMode::Partitioned => Expiry::Partitioned {
                width: self.partition_width,
            },
        }
    }
}

/// The PostgreSQL store's configuration.
///
/// Build one with [`PgConfig::new`] (or [`PgConfig::from_settings`]) and adjust the public
/// fields; [`PgConfig::validate`] (run by [`crate::PgStore::connect`] and [`crate::migrate()`])
/// names the key of anything wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgConfig {
    /// `postgres://user@host:port/db?sslmode=verify-full&sslrootcert=/etc/idemgate/db-ca.pem`,
    /// or the key=value form (`host=db user=app sslmode=verify-full`). libpq's `sslmode`
    /// (all five), `sslrootcert`, `sslcert` and `sslkey` are understood here, as [`tls`] may
    /// also give them; without either, `sslmode` is `prefer` (see [`SslMode`]). Other libpq TLS
    /// parameters (`sslcrl`, `sslpassword`, ...) are refused as unknown.
    ///
    /// [`tls`]: Self::tls
    pub url: String,
    /// TLS settings besides (never against) what the URL says.
    pub tls: PgTls,
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
    /// How a batched sweep run paces its batches (see [`idemgate_core::sweep::pace`]). Default
    /// adaptive.
    pub sweep_pacing: Pacing,
    /// How long history is kept before its monthly partition is dropped. Default 400 days.
    pub history_retention: Duration,
    /// History is archived before it is dropped: sweep runs keep history partitions, and
    /// [`HistoryExport::drop_history`](idemgate_core::HistoryExport::drop_history) drops each once
    /// the archive holds it. Default false.
    pub history_archived: bool,
}

impl PgConfig {
    /// The defaults, on `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self::from_settings(url, &PgSettings::default())
    }

    /// `settings` on `url`, with the default `batch_inflight` and `history_retention`.
    pub fn from_settings(url: impl Into<String>, settings: &PgSettings) -> Self {
        Self {
            url: url.into(),
            tls: settings.tls.clone(),
            schema: settings.schema.clone(),
            pool_size: settings.pool_size,
            batch_max: settings.batch_max,
            batch_linger: settings.batch_linger,
            batch_inflight: NonZeroUsize::new(2).expect("non-zero"),
            expiry: settings.expiry(),
            sweep_pacing: settings.sweep_pacing,
            history_retention: Duration::from_secs(400 * 86_400),
            history_archived: false,
        }
    }

    /// Checks every key.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first key that is wrong.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.connection_config()?;
        self.tls_connector()?;
        self.validate_settings()
    }

    /// Checks every key but the URL (for a store on a pool built elsewhere).
    pub(crate) fn validate_settings(&self) -> Result<(), ConfigError> {
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

    /// The parsed URL, with idemgate's session settings added: `search_path` the schema (the
    /// store's statements name its tables unqualified), `TimeZone` UTC, generic plans, plans
    /// that do not depend on statistics (`enable_seqscan`, `enable_hashjoin`,
    /// `enable_mergejoin` and `jit` off: every hot statement is a key's index lookup, whatever
    /// the planner believes of the tables' size), and unless the URL says otherwise the
    /// application name `idemgate` and the bounds that keep a database that stops answering
    /// (packets dropped, not refused) from holding the gateway:
    ///
    /// - a 5 s connect timeout;
    /// - `tcp_user_timeout` 8 s: a connection whose sent data goes unacknowledged that long is
    ///   closed by the kernel, so a query on a blackholed connection fails in seconds instead of
    ///   waiting out TCP's retransmission backoff (minutes), and the pool replaces it;
    /// - TCP keepalives after 10 s idle, every 2 s, 3 probes: an idle pooled connection to a
    ///   server that went away is found dead before it is handed out again;
    /// - `statement_timeout` 15 s (and 60 s idle in a transaction) on the server: a statement
    ///   that waits (a lock, a server in trouble) ends with an error rather than never. Migrations
    ///   lift it for their own transaction.
    ///
    /// A URL that sets any of these (`connect_timeout=`, `tcp_user_timeout=`, `keepalives_idle=`,
    /// `options=-c statement_timeout=...`) keeps its own.
    /// What [`crate::PgStore::connect`] builds its pool from; build yours from it for
    /// [`crate::PgStore::from_pool`].
    ///
    /// TLS is as `sslmode` says (the URL's or [`tls`](Self::tls)'s), once the connection is
    /// made with [`PgConfig::tls_connector`].
    ///
    /// # Errors
    /// [`ConfigError::Url`] when the URL does not parse, and the TLS settings' errors
    /// ([`PgConfig::tls_connector`]) but those about the files.
    pub fn connection_config(&self) -> Result<tokio_postgres::Config, ConfigError> {
        let split = tls::split_url(&self.url)?;
        let mut pg: tokio_postgres::Config = split
            .rest
            .parse()
            .map_err(|source| ConfigError::Url { source })?;
        pg.ssl_mode(self.tls.plan(split.tls)?.mode.wire());
        // The schema name is validated as a plain identifier, so it needs no quoting here.
        let mut options = pg.get_options().map(str::to_owned).unwrap_or_default();
        if !options.is_empty() {
            options.push(' ');
        }
        // Generic plans: the claim functions' statements are planned once per connection, not on
        // every call (their array parameters make custom plans no better). Plans that hold
        // whatever the statistics say: every statement of the hot path is a key's lookup with
        // an index to serve it, and with sequential scans, hash and merge joins priced out that
        // lookup is the one plan left, however small the tables looked when it was made (a new
        // store, never analyzed). JIT off: a plan priced with a disabled node can cross
        // jit_above_cost and be compiled on every call, and never pays on a handful of rows.
        // Statements that aggregate turn them back on for themselves (`reporting`).
        let own = |setting: &str| options.contains(setting);
        let mut added = format!(
            "-c search_path={} -c TimeZone=UTC -c plan_cache_mode=force_generic_plan",
            self.schema
        );
        for setting in [
            "enable_seqscan",
            "enable_hashjoin",
            "enable_mergejoin",
            "jit",
        ] {
            if !own(setting) {
                added.push_str(&format!(" -c {setting}=off"));
            }
        }
        if !own("statement_timeout") {
            added.push_str(" -c statement_timeout=15s");
        }
        if !own("idle_in_transaction_session_timeout") {
            added.push_str(" -c idle_in_transaction_session_timeout=60s");
        }
        options.push_str(&added);
        pg.options(&options);
        if pg.get_application_name().is_none() {
            pg.application_name("idemgate");
        }
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(Duration::from_secs(5));
        }
        // Whether the URL named a TCP setting (the parsed config cannot tell a default from one
        // written out).
        let named = |key: &str| split.rest.contains(&format!("{key}="));
        if !named("tcp_user_timeout") {
            pg.tcp_user_timeout(Duration::from_secs(8));
        }
        if !named("keepalives_idle") {
            pg.keepalives_idle(Duration::from_secs(10));
        }
        if !named("keepalives_interval") {
            pg.keepalives_interval(Duration::from_secs(2));
        }
        if !named("keepalives_retries") {
            pg.keepalives_retries(3);
        }
        Ok(pg)
    }

    /// What TLS the connections use, settled from the URL and [`tls`](Self::tls).
    pub(crate) fn tls_plan(&self) -> Result<TlsPlan, ConfigError> {
        self.tls.plan(tls::split_url(&self.url)?.tls)
    }

    /// The `sslmode` the connections use.
    pub fn sslmode(&self) -> Result<SslMode, ConfigError> {
        Ok(self.tls_plan()?.mode)
    }

    /// The TLS connector for [`connection_config`](Self::connection_config)'s connections
    /// (rustls with *ring*), the CA file and client certificate read. What
    /// [`crate::PgStore::connect`] connects with; give it to your pool's manager for
    /// [`crate::PgStore::from_pool`].
    ///
    /// # Errors
    /// [`ConfigError`] naming the key: values the URL and the settings give differently, an
    /// unknown `sslmode`, `verify-ca` without a CA file, a client certificate without its key,
    /// and a file that cannot be read or holds nothing usable ([`ConfigError::TlsFile`]).
    pub fn tls_connector(&self) -> Result<MakeRustls, ConfigError> {
        let plan = self.tls_plan()?;
        let config = plan
            .client
            .config()
            .map_err(|source| ConfigError::TlsFile {
                key: tls::key_of(&source),
                source,
            })?;
        Ok(MakeRustls::new(config))
    }

    /// `host:port/dbname` of the URL, for error messages (never the password).
    pub(crate) fn target(&self) -> String {
        let Ok(pg) = tls::split_url(&self.url).and_then(|split| {
            split
                .rest
                .parse::<tokio_postgres::Config>()
                .map_err(|source| ConfigError::Url { source })
        }) else {
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

    /// `[store.postgres]` as a configuration file writes it (JSON stands in for TOML here).
    fn settings(json: &str) -> Result<PgSettings, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn an_empty_settings_table_is_the_defaults() {
        let s = settings("{}").unwrap();
        assert_eq!(s, PgSettings::default());
        assert_eq!(
            PgConfig::from_settings("postgres://x", &s),
            PgConfig::new("postgres://x")
        );
        assert_eq!(s.pool_size.get(), 16);
        assert_eq!(s.batch_max.get(), 256);
        assert_eq!(s.batch_linger, Duration::from_micros(200));
        assert_eq!(s.expiry(), Expiry::batched());
        assert_eq!(s.sweep_pacing, Pacing::Adaptive);
    }

    #[test]
    fn every_key_is_read() {
        let s = settings(
            r#"{"schema": "s", "batch_max": 8, "batch_linger": "1ms", "pool_size": 3,
                "expiry": "partitioned", "sweep_batch": 10, "sweep_pause": "2s",
                "sweep_pacing": "fixed", "partition_width": "6h",
                "tls": {"sslmode": "verify-full", "ca_file": "/ca.pem",
                        "client_cert": "/c.pem", "client_key": "/k.pem"}}"#,
        )
        .unwrap();
        let cfg = PgConfig::from_settings("postgres://x", &s);
        assert_eq!(cfg.schema, "s");
        assert_eq!(
            cfg.tls,
            PgTls {
                sslmode: Some(SslMode::VerifyFull),
                ca_file: Some("/ca.pem".into()),
                client_cert: Some("/c.pem".into()),
                client_key: Some("/k.pem".into()),
            }
        );
        assert_eq!(cfg.sslmode().unwrap(), SslMode::VerifyFull);
        assert_eq!(cfg.batch_max.get(), 8);
        assert_eq!(cfg.batch_linger, Duration::from_millis(1));
        assert_eq!(cfg.pool_size.get(), 3);
        assert_eq!(cfg.sweep_pacing, Pacing::Fixed);
        assert_eq!(
            cfg.expiry,
            Expiry::Partitioned {
                width: Duration::from_secs(6 * 3_600)
            }
        );
        let s = PgSettings {
            expiry: ExpiryMode::Batched,
            ..s
        };
        assert_eq!(
            s.expiry(),
            Expiry::Batched {
                batch: NonZeroU32::new(10).unwrap(),
                pause: Duration::from_secs(2)
            }
        );
    }

    #[test]
    fn zero_counts_unknown_keys_and_bad_durations_are_refused() {
        for key in ["pool_size", "batch_max", "sweep_batch"] {
            let err = settings(&format!(r#"{{"{key}": 0}}"#)).unwrap_err();
            assert!(err.to_string().contains("nonzero"), "{key}: {err}");
        }
        let err = settings(r#"{"pool_sise": 4}"#).unwrap_err();
        assert!(err.to_string().contains("pool_sise"), "{err}");
        let err = settings(r#"{"sweep_pause": "soon"}"#).unwrap_err();
        assert!(err.to_string().contains("soon"), "{err}");
        let err = settings(r#"{"expiry": "never"}"#).unwrap_err();
        assert!(err.to_string().contains("never"), "{err}");
        let err = settings(r#"{"sweep_pacing": "gentle"}"#).unwrap_err();
        assert!(
            err.to_string().contains("gentle") && err.to_string().contains("adaptive"),
            "{err}"
        );
    }

    #[test]
    fn tls_settings_refuse_unknown_keys_and_modes() {
        let err = settings(r#"{"tls": {"sslmode": "verify_full"}}"#).unwrap_err();
        assert!(err.to_string().contains("verify_full"), "{err}");
        let err = settings(r#"{"tls": {"ca": "/ca.pem"}}"#).unwrap_err();
        assert!(err.to_string().contains("`ca`"), "{err}");
    }

    #[test]
    fn target_hides_the_password() {
        let cfg = PgConfig::new("postgres://u:secret@db.example:6543/app");
        assert_eq!(cfg.target(), "db.example:6543/app");
        // libpq's modes tokio-postgres does not know do not hide the target.
        let cfg = PgConfig::new("postgres://u@db.example/app?sslmode=verify-full");
        assert_eq!(cfg.target(), "db.example:5432/app");
    }

    #[test]
    fn the_url_reaches_tokio_postgres_without_the_tls_keys() {
        let cfg = PgConfig::new(
            "postgres://u@db.example/app?sslmode=verify-full&application_name=billing",
        );
        let pg = cfg.connection_config().unwrap();
        assert_eq!(pg.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        assert_eq!(pg.get_application_name(), Some("billing"));
        let pg = PgConfig::new("host=db user=u sslmode=disable")
            .connection_config()
            .unwrap();
        assert_eq!(pg.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
        let pg = PgConfig::new("host=db user=u").connection_config().unwrap();
        assert_eq!(pg.get_ssl_mode(), tokio_postgres::config::SslMode::Prefer);
    }

    #[test]
    fn sessions_plan_without_scans_hashes_merges_or_jit_unless_the_url_says_otherwise() {
        let pg = PgConfig::new("postgres://u@db.example/app")
            .connection_config()
            .unwrap();
        let options = pg.get_options().unwrap();
        for setting in [
            "-c enable_seqscan=off",
            "-c enable_hashjoin=off",
            "-c enable_mergejoin=off",
            "-c jit=off",
        ] {
            assert!(
                options.contains(setting),
                "{setting} missing from {options}"
            );
        }
        let pg = PgConfig::new(
            "postgres://u@db.example/app?options=-c%20enable_seqscan%3Don%20-c%20jit%3Don",
        )
        .connection_config()
        .unwrap();
        let options = pg.get_options().unwrap();
        assert!(
            options.contains("enable_seqscan=on") && !options.contains("enable_seqscan=off"),
            "{options}"
        );
        assert!(!options.contains("jit=off"), "{options}");
        assert!(options.contains("-c enable_hashjoin=off"), "{options}");
    }

    #[test]
    fn connections_are_bounded_against_a_database_that_stops_answering() {
        let pg = PgConfig::new("postgres://u@db.example/app")
            .connection_config()
            .unwrap();
        assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(5)));
        assert_eq!(pg.get_tcp_user_timeout(), Some(&Duration::from_secs(8)));
        assert!(pg.get_keepalives());
        assert_eq!(pg.get_keepalives_idle(), Duration::from_secs(10));
        assert_eq!(pg.get_keepalives_interval(), Some(Duration::from_secs(2)));
        assert_eq!(pg.get_keepalives_retries(), Some(3));
        let options = pg.get_options().unwrap();
        assert!(
            options.contains("-c statement_timeout=15s")
                && options.contains("-c idle_in_transaction_session_timeout=60s"),
            "{options}"
        );
        // The URL's own settings win.
        let pg = PgConfig::new(
            "postgres://u@db.example/app?connect_timeout=2&tcp_user_timeout=30&keepalives_idle=60&options=-c%20statement_timeout%3D2min",
        )
        .connection_config()
        .unwrap();
        assert_eq!(pg.get_connect_timeout(), Some(&Duration::from_secs(2)));
        assert_eq!(pg.get_tcp_user_timeout(), Some(&Duration::from_secs(30)));
        assert_eq!(pg.get_keepalives_idle(), Duration::from_secs(60));
        let options = pg.get_options().unwrap();
        assert!(
            options.contains("statement_timeout=2min")
                && !options.contains("statement_timeout=15s"),
            "{options}"
        );
    }

    #[test]
    fn tls_files_that_cannot_be_read_name_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let mut cfg = PgConfig::new("postgres://u@db.example/app?sslmode=verify-full");
        cfg.tls.ca_file = Some(missing.clone());
        let err = cfg.validate().unwrap_err();
        assert!(matches!(err, ConfigError::TlsFile { .. }), "{err}");
        assert!(err.to_string().starts_with("postgres.tls.ca_file"), "{err}");
        let cause = std::error::Error::source(&err).unwrap().to_string();
        assert!(cause.contains(&missing.display().to_string()), "{cause}");

        let not_pem = dir.path().join("ca.pem");
        std::fs::write(&not_pem, "hello").unwrap();
        cfg.tls.ca_file = Some(not_pem);
        let err = cfg.validate().unwrap_err();
        assert!(err.to_string().starts_with("postgres.tls.ca_file"), "{err}");

        let ca = idemgate_tls::testing::TestCa::new("config test CA");
        let (cert, _) = ca.issue(&["idemgate"]).write(dir.path(), "client");
        let cfg = PgConfig::new(format!(
            "postgres://u@db.example/app?sslmode=require&sslcert={}&sslkey={}",
            cert.display(),
            dir.path().join("client.missing").display()
        ));
        let err = cfg.validate().unwrap_err();
        assert!(
            err.to_string().starts_with("postgres.tls.client_key"),
            "{err}"
        );
    }
}
