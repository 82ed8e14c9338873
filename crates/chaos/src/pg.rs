//! A private PostgreSQL 15 for the scenarios that restart the database or run several gateways
//! on one: initdb + pg_ctl in the run directory, on a free loopback port, trust auth, fsync on.
//! The shared server on 5432 is never touched.
//!
//! initdb and postgres refuse to run as root. When the harness is root (as in CI here), the
//! cluster directory is handed to the `postgres` system user and every pg_ctl / initdb call runs
//! as that user through `runuser -u postgres --` (util-linux); run as anyone else, they run
//! directly. initdb gets `--no-sync` (a throwaway cluster need not be flushed at creation); the
//! server itself runs with `fsync = on`, so a restart under load is a real crash-safe restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};

use crate::cleanup::{Registry, quote};

/// The superuser initdb creates; gateways connect as it.
const USER: &str = "chaos";

#[derive(Debug)]
pub struct PrivatePg {
    bin: PathBuf,
    dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
    pub port: u16,
    /// `Some("postgres")` when the harness is root.
    run_as: Option<String>,
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
        if !bin.join("initdb").exists() || !bin.join("pg_ctl").exists() {
            bail!(
                "no initdb/pg_ctl in {} (install PostgreSQL 15's server package, or pass --pg-bin)",
                bin.display()
            );
        }
        let dir = parent.join("pg");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let run_as = if is_root() {
            let (uid, gid) = user_ids("postgres").await.context(
                "the harness runs as root, and initdb refuses root: it needs the `postgres` system user to run them as",
            )?;
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("handing {} to the postgres user", dir.display()))?;
            Some("postgres".to_owned())
        } else {
            None
        };
        let port = crate::gateway::free_port()?;
        let data = dir.join("data");
        let log = dir.join("postgres.log");
        let pg = Self {
            bin: bin.to_owned(),
            dir,
            data,
            log,
            port,
            run_as,
            cleanup: 0,
            registry: registry.clone(),
        };
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data.to_string_lossy(),
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )
        .await?;
        let stop = format!(
            "{} {} -D {} stop -m immediate -w >/dev/null 2>&1",
            pg.prefix(),
            quote(pg.bin.join("pg_ctl")),
            quote(&pg.data)
        );
        let pg = Self {
            cleanup: registry.add(stop),
            ..pg
        };
        pg.pg_ctl_start().await?;
        Ok(pg)
    }

    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }

    fn prefix(&self) -> String {
        match &self.run_as {
            Some(user) => format!("runuser -u {user} --"),
            None => String::new(),
        }
    }

    fn options(&self) -> String {
        format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=on -c max_connections=200",
            self.port,
            self.dir.display()
        )
    }

    async fn run(&self, tool: &str, args: &[&str]) -> anyhow::Result<String> {
        let program = self.bin.join(tool);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut c = tokio::process::Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&program);
                c
            }
            None => tokio::process::Command::new(&program),
        };
        cmd.args(args).current_dir(&self.dir).kill_on_drop(true);
        let out = cmd
            .output()
            .await
            .with_context(|| format!("running {}", program.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            bail!(
                "{tool} {} failed ({}):\n{text}\n{}",
                args.join(" "),
                out.status,
                crate::gateway::tail(Some(&self.log), 15)
            );
        }
        Ok(text)
    }

    async fn pg_ctl_start(&self) -> anyhow::Result<()> {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-l",
                &self.log.to_string_lossy(),
                "-o",
                &self.options(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
        .await
        .map(drop)
    }

    /// `pg_ctl restart -m fast`: active sessions are disconnected, the server comes back.
    ///
    /// # Errors
    /// When pg_ctl fails.
    pub async fn restart_fast(&self) -> anyhow::Result<()> {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-l",
                &self.log.to_string_lossy(),
                "-o",
                &self.options(),
                "-m",
                "fast",
                "-w",
                "-t",
                "60",
                "restart",
            ],
        )
        .await
        .map(drop)
    }

    /// `pg_ctl stop -m fast`.
    ///
    /// # Errors
    /// When pg_ctl fails.
    pub async fn stop_fast(&self) -> anyhow::Result<()> {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data.to_string_lossy(),
                "-m",
                "fast",
                "-w",
                "stop",
            ],
        )
        .await
        .map(drop)
    }

    /// Starts it again after [`PrivatePg::stop_fast`].
    ///
    /// # Errors
    /// When pg_ctl fails.
    pub async fn start_again(&self) -> anyhow::Result<()> {
        self.pg_ctl_start().await
    }

    /// Runs SQL with psql (as the cluster's superuser); its unaligned output.
    ///
    /// # Errors
    /// When psql fails.
    pub async fn psql(&self, sql: &str) -> anyhow::Result<String> {
        let psql = self.bin.join("psql");
        let out = tokio::process::Command::new(&psql)
            .args([
                "-X",
                "-q",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", USER, "-d", "postgres", "-c", sql])
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("running {}", psql.display()))?;
        if !out.status.success() {
            bail!("psql -c {sql:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Stops the server (immediate: nothing to keep) and forgets it; the run directory goes
    /// with the registry.
    pub async fn remove(&self) {
        let _ = self
            .run(
                "pg_ctl",
                &[
                    "-D",
                    &self.data.to_string_lossy(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            )
            .await;
        self.registry.remove(self.cleanup);
    }
}

/// Whether this process runs as root (from /proc: no libc needed).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

async fn user_ids(user: &str) -> anyhow::Result<(u32, u32)> {
    let id = |flag: &'static str| {
        let user = user.to_owned();
        async move {
            let out = tokio::process::Command::new("id")
                .arg(flag)
                .arg(&user)
                .output()
                .await?;
            if !out.status.success() {
                bail!(
                    "id {flag} {user}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok::<u32, anyhow::Error>(String::from_utf8_lossy(&out.stdout).trim().parse()?)
        }
    };
    Ok((id("-u").await?, id("-g").await?))
}
