//! A private PostgreSQL 15 for the scenarios that restart the database or run several gateways
//! on one: idemgate-postgres's [`testing::PrivatePg`] (initdb + pg_ctl in the run directory, on
//! a free loopback port, trust auth, run as the `postgres` user when the harness is root) with
//! `fsync = on`, so a restart under load is a real crash-safe restart, and its stop registered
//! with the run's cleanup. The shared server on 5432 is never touched.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use idemgate_postgres::testing;

use crate::cleanup::{Registry, quote};

/// The superuser initdb creates; gateways connect as it.
const USER: &str = "chaos";

#[derive(Debug)]
pub struct PrivatePg {
    server: testing::PrivatePg,
    pub port: u16,
    registry: Arc<Registry>,
    cleanup: u64,
}

impl PrivatePg {
    /// initdb and start a cluster in `parent/pg`.
    ///
    /// # Errors
    /// When the binaries are missing, initdb fails, or the server does not start; the message
    /// says what was run and includes its output.
    pub async fn start(bin: &Path, parent: &Path, registry: Arc<Registry>) -> anyhow::Result<Self> {
        let mut server = testing::PrivatePg::init(bin, &parent.join("pg"), USER)
            .await
            .with_context(|| format!("a private PostgreSQL from {} (--pg-bin)", bin.display()))?;
        server.options(&[("fsync", "on"), ("max_connections", "200")]);
        let stop = server
            .stop_command()
            .iter()
            .map(quote)
            .collect::<Vec<_>>()
            .join(" ");
        let cleanup = registry.add(format!("{stop} >/dev/null 2>&1"));
        server.start().await?;
        Ok(Self {
            port: server.port(),
            server,
            registry,
            cleanup,
        })
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The URL of the cluster reached through `addr` (a [`testing::FaultyLink`] in front of it).
    pub fn url_via(&self, addr: std::net::SocketAddr) -> String {
        format!("postgres://{USER}@{addr}/postgres")
    }

    /// `pg_ctl restart -m fast`: active sessions are disconnected, the server comes back.
    ///
    /// # Errors
    /// When pg_ctl fails.
    pub async fn restart_fast(&self) -> anyhow::Result<()> {
        Ok(self.server.restart_fast().await?)
    }

    /// `pg_ctl stop -m fast`.
    ///
    /// # Errors
    /// When pg_ctl fails.
    pub async fn stop_fast(&self) -> anyhow::Result<()> {
        Ok(self.server.stop_fast().await?)
    }

    /// Starts it again after [`PrivatePg::stop_fast`].
    ///
    /// # Errors
    /// When pg_ctl fails.
    pub async fn start_again(&self) -> anyhow::Result<()> {
        Ok(self.server.start().await?)
    }

    /// Runs SQL with psql (as the cluster's superuser); its unaligned output.
    ///
    /// # Errors
    /// When psql fails.
    pub async fn psql(&self, sql: &str) -> anyhow::Result<String> {
        Ok(self.server.psql(sql).await?)
    }

    /// Stops the server (immediate: nothing to keep) and forgets it; the run directory goes
    /// with the registry.
    pub async fn remove(&self) {
        let _ = self.server.stop_immediate().await;
        self.registry.remove(self.cleanup);
    }
}
