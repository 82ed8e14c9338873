//! What the PostgreSQL scenarios share: an admin connection, a tagged store, schema cleanup and
//! event ids.

use anyhow::Context;
use idemgate_postgres::{Expiry, PgConfig, PgStore};

/// The PostgreSQL a scenario runs against. Each run works in schemas of its own and drops them.
#[derive(Debug, clap::Args)]
pub struct Postgres {
    /// PostgreSQL URL (schemas of the run's own are created and dropped). Every connection of
    /// the run is plaintext unless the URL names an `sslmode`: see [`plaintext_unless_given`].
    #[arg(
        long = "postgres",
        env = "IDEMGATE_TEST_POSTGRES",
        default_value = "postgres://root@localhost/test",
        value_parser = plaintext_unless_given
    )]
    pub url: String,
}

/// `url` with `sslmode=disable` when it names no `sslmode`. The baselines (the plain statement,
/// the ceiling, the tutorial receiver's node-postgres) connect without TLS; an idemgate store
/// left at its default, `prefer` as libpq's, would use TLS wherever the server offers it (this
/// machine's does), and pay for it on every round trip (a lone claim: 0.33 ms against 0.30 ms
/// plaintext). So that every engine crosses the same transport, the run's connections are all
/// plaintext, or all as the URL says.
pub fn plaintext_unless_given(url: &str) -> Result<String, std::convert::Infallible> {
    if url.contains("sslmode") {
        return Ok(url.to_owned());
    }
    Ok(
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let sep = if url.contains('?') { '&' } else { '?' };
            format!("{url}{sep}sslmode=disable")
        } else {
            format!("{url} sslmode=disable")
        },
    )
}

/// A plain connection for setup, measurement queries and cleanup. A failure names the server
/// and says why in its first line (the OS's or the server's words), the whole chain below it.
pub async fn admin(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) = match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        Ok(pair) => pair,
        Err(e) => {
            let why = reasons(&e);
            return Err(anyhow::Error::new(e)
                .context(format!("cannot connect to PostgreSQL at {url}: {why}")));
        }
    };
    tokio::spawn(conn);
    Ok(client)
}

/// An error's own words and those of every source under it, joined by ": ", leaving out any
/// that say nothing (an empty Display would otherwise print as a blank "Caused by:" line).
pub fn reasons(e: &(dyn std::error::Error + 'static)) -> String {
    let mut words: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(e) = next {
        let said = e.to_string();
        if !said.trim().is_empty() && words.last() != Some(&said) {
            words.push(said);
        }
        next = e.source();
    }
    if words.is_empty() {
        format!("{e:?}")
    } else {
        words.join(": ")
    }
}

/// The server's connection slots and how many are taken, so a scenario can open no more than
/// are free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// `max_connections`.
    pub max: i64,
    /// Slots ordinary roles cannot take: `superuser_reserved_connections` (plus
    /// `reserved_connections` on PostgreSQL 16 and later).
    pub reserved: i64,
    /// Client backends connected now, this process's included.
    pub in_use: i64,
}

impl Slots {
    pub async fn read(admin: &tokio_postgres::Client) -> anyhow::Result<Self> {
        let row = admin
            .query_one(
                "SELECT current_setting('max_connections')::bigint,
                        current_setting('superuser_reserved_connections')::bigint
                          + coalesce(nullif(current_setting('reserved_connections', true), ''),
                                     '0')::bigint,
                        (SELECT count(*) FROM pg_stat_activity
                          WHERE backend_type = 'client backend')",
                &[],
            )
            .await
            .context("cannot read the server's max_connections and pg_stat_activity")?;
        Ok(Self {
            max: row.get(0),
            reserved: row.get(1),
            in_use: row.get(2),
        })
    }

    /// Connections free for ordinary roles, less `margin` left for everyone else (never below
    /// zero).
    pub fn free(&self, margin: i64) -> usize {
        usize::try_from(self.max - self.reserved - self.in_use - margin).unwrap_or(0)
    }
}

/// `url` with `application_name` set, so the scenario can pick its own backends out of
/// `pg_stat_activity` (in URL or key=value form).
pub fn with_app_name(url: &str, name: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}application_name={name}")
    } else {
        format!("{url} application_name={name}")
    }
}

/// An idemgate store in `schema` (created by its migrations), on `url`.
pub async fn store(url: &str, schema: &str, expiry: Expiry) -> anyhow::Result<PgStore> {
    let mut cfg = PgConfig::new(url);
    cfg.schema = schema.to_owned();
    cfg.expiry = expiry;
    PgStore::connect(cfg)
        .await
        .with_context(|| format!("cannot open an idemgate store in schema {schema}"))
}

pub async fn drop_schema(admin: &tokio_postgres::Client, schema: &str) -> anyhow::Result<()> {
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .with_context(|| format!("cannot drop schema {schema}"))
}

/// Whether a scenario stands in for autovacuum (VACUUM / ANALYZE of its own tables at set
/// points). A server without autovacuum never analyzes, and the claim statement then keeps plans
/// made against empty tables (in partitioned mode, against an empty current partition) that read
/// a whole table on every batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Maintenance {
    /// When the server's autovacuum is off.
    Auto,
    Always,
    Never,
}

impl Maintenance {
    /// The server's `autovacuum` setting and whether to stand in for it.
    pub async fn resolve(self, admin: &tokio_postgres::Client) -> anyhow::Result<(String, bool)> {
        let autovacuum: String = admin.query_one("SHOW autovacuum", &[]).await?.get(0);
        let stand_in = match self {
            Self::Auto => autovacuum != "on",
            Self::Always => true,
            Self::Never => false,
        };
        Ok((autovacuum, stand_in))
    }
}

/// Resolves on ctrl-c or SIGTERM, with the error to stop the scenario with (its schemas are
/// still dropped).
pub async fn interrupted() -> anyhow::Error {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
    anyhow::anyhow!("interrupted")
}

/// A distinct, random-looking event id for arrival `n` (like a sender's ids, which land all over
/// the unique index rather than at its right edge). splitmix64 is a bijection, so distinct `n`
/// give distinct ids.
pub fn event_id(n: u64) -> String {
    let mut z = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    format!("evt_{:016x}", z ^ (z >> 31))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_is_plaintext_unless_the_url_says_otherwise() {
        let plain = |url| plaintext_unless_given(url).unwrap();
        assert_eq!(
            plain("postgres://root@localhost/test"),
            "postgres://root@localhost/test?sslmode=disable"
        );
        assert_eq!(
            plain("postgresql://h/db?application_name=x"),
            "postgresql://h/db?application_name=x&sslmode=disable"
        );
        assert_eq!(
            plain("host=h dbname=db"),
            "host=h dbname=db sslmode=disable"
        );
        for given in [
            "postgres://h/db?sslmode=require",
            "host=h sslmode=verify-full",
        ] {
            assert_eq!(plain(given), given);
        }
        // Each form still parses.
        for url in ["postgres://root@localhost/test", "host=h dbname=db"] {
            plain(url).parse::<tokio_postgres::Config>().unwrap();
        }
    }

    #[test]
    fn app_name_goes_in_either_url_form() {
        assert_eq!(
            with_app_name("postgres://root@localhost/test", "b"),
            "postgres://root@localhost/test?application_name=b"
        );
        assert_eq!(
            with_app_name("postgres://h/db?sslmode=disable", "b"),
            "postgres://h/db?sslmode=disable&application_name=b"
        );
        assert_eq!(
            with_app_name("host=h user=u", "b"),
            "host=h user=u application_name=b"
        );
    }

    #[test]
    fn free_slots_leave_the_reserved_ones_and_a_margin() {
        let slots = Slots {
            max: 100,
            reserved: 3,
            in_use: 7,
        };
        assert_eq!(slots.free(10), 80);
        assert_eq!(slots.free(95), 0);
    }

    #[derive(Debug)]
    struct Mute(std::io::Error);

    impl std::fmt::Display for Mute {
        fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            Ok(())
        }
    }

    impl std::error::Error for Mute {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn reasons_skip_errors_that_say_nothing() {
        let e = Mute(std::io::Error::other("sorry, too many clients already"));
        assert_eq!(reasons(&e), "sorry, too many clients already");
        let silent = Mute(std::io::Error::other(""));
        assert!(
            reasons(&silent).starts_with("Mute("),
            "{}",
            reasons(&silent)
        );
    }

    #[tokio::test]
    async fn a_refused_connection_says_why_in_its_first_line() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let url = format!("postgres://root@127.0.0.1:{port}/test?connect_timeout=5");
        let err = admin(&url).await.expect_err("nothing listens there");
        let first = err.to_string();
        assert!(first.contains(&url), "{first}");
        assert!(
            first.contains("error connecting to server: ") && first.contains("refused"),
            "the first line should carry the OS's reason: {first}"
        );
    }

    #[test]
    fn event_ids_are_distinct_and_sender_sized() {
        let ids: std::collections::HashSet<_> = (0..10_000).map(event_id).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| id.len() == 20));
    }
}
