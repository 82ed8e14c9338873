//! What the PostgreSQL scenarios share: an admin connection, a tagged store, schema cleanup and
//! event ids.

use anyhow::Context;
use idemgate_postgres::{Expiry, PgConfig, PgStore};

/// The PostgreSQL a scenario runs against. Each run works in schemas of its own and drops them.
#[derive(Debug, clap::Args)]
pub struct Postgres {
    /// PostgreSQL URL (schemas of the run's own are created and dropped).
    #[arg(
        long = "postgres",
        env = "IDEMGATE_TEST_POSTGRES",
        default_value = "postgres://root@localhost/test"
    )]
    pub url: String,
}

/// A plain connection for setup, measurement queries and cleanup.
pub async fn admin(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {url}"))?;
    tokio::spawn(conn);
    Ok(client)
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
    fn event_ids_are_distinct_and_sender_sized() {
        let ids: std::collections::HashSet<_> = (0..10_000).map(event_id).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| id.len() == 20));
    }
}
