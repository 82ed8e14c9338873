//! [`PrivatePg`]: a PostgreSQL cluster of one's own, for tests and harnesses that need a server
//! configured their way (TLS, restarts) and must not touch a shared one. `initdb` in a directory
//! the caller owns, `pg_ctl` on a free loopback port (Unix socket in that directory too), trust
//! authentication unless `pg_hba.conf` is replaced; stopped (immediately) when dropped.
//!
//! initdb and postgres refuse to run as root. When this process is root (as in CI here), the
//! cluster directory is handed to the `postgres` system user and every initdb / pg_ctl call runs
//! as that user through `runuser -u postgres --` (util-linux); run as anyone else, they run
//! directly. initdb gets `--no-sync` (a throwaway cluster need not be flushed at creation).
//!
//! [`FaultyLink`]: a TCP proxy that can stop forwarding, swallow answers and cut connections,
//! for a database that stops answering.

use std::path::{Path, PathBuf};

mod link;
pub use link::{FaultyLink, Mode as LinkMode};

/// Where PostgreSQL 15's programs are unless `IDEMGATE_TEST_PG_BIN` says otherwise.
pub const DEFAULT_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Why a private cluster could not be made or driven.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The programs are not there.
    #[error(
        "no initdb/pg_ctl in {} (install PostgreSQL 15's server package, or set IDEMGATE_TEST_PG_BIN to its bin directory)",
        bin.display()
    )]
    NoBinaries {
        /// The directory looked in.
        bin: PathBuf,
    },
    /// A file or directory could not be made, written or handed over.
    #[error("{what}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A program failed.
    #[error("{command} failed ({status}):\n{output}\n{log}")]
    Tool {
        /// What was run.
        command: String,
        /// How it ended.
        status: String,
        /// What it printed.
        output: String,
        /// The end of the server's log.
        log: String,
    },
}

/// A private PostgreSQL cluster; see the [module docs](self).
#[derive(Debug)]
pub struct PrivatePg {
    bin: PathBuf,
    dir: PathBuf,
    data: PathBuf,
    log: PathBuf,
    port: u16,
    user: String,
    options: String,
    /// `Some("postgres")` when this process is root.
    run_as: Option<String>,
    /// The `postgres` user's ids, when running as it.
    owner: Option<(u32, u32)>,
}

impl PrivatePg {
    /// The bin directory: `IDEMGATE_TEST_PG_BIN`, else [`DEFAULT_BIN`].
    pub fn bin_dir() -> PathBuf {
        std::env::var_os("IDEMGATE_TEST_PG_BIN").map_or_else(|| DEFAULT_BIN.into(), PathBuf::from)
    }

    /// `initdb` a cluster in `dir/data` whose superuser is `user`, on a free loopback port; not
    /// started yet ([`PrivatePg::configure`], [`PrivatePg::install`] and
    /// [`PrivatePg::set_hba`] first, then [`PrivatePg::start`]).
    ///
    /// # Errors
    /// [`ServerError::NoBinaries`] when `bin` lacks initdb or pg_ctl; otherwise what failed,
    /// with its output.
    pub async fn init(bin: &Path, dir: &Path, user: &str) -> Result<Self, ServerError> {
        let pg = Self::prepare(bin, dir, user).await?;
        let data = pg.data.to_string_lossy().into_owned();
        let args = [
            "-D",
            &data,
            "-U",
            user,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
        ];
        pg.run("initdb", &args).await?;
        Ok(pg)
    }

    /// Like [`PrivatePg::init`], but the data directory is a copy of one initdb made once and
    /// kept in `cache` (a test binary's `CARGO_TARGET_TMPDIR`): initdb is most of a private
    /// server's start-up, so tests that each start one share its work, across runs too.
    ///
    /// # Errors
    /// As [`PrivatePg::init`], and when the copy fails.
    pub async fn init_cached(
        bin: &Path,
        dir: &Path,
        user: &str,
        cache: &Path,
    ) -> Result<Self, ServerError> {
        let name: String = format!("{}-{user}", bin.display())
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let template = cache.join(format!("initdb{name}"));
        if !template.exists() {
            // Made aside and renamed into place, so a half-made template is never used; when
            // several tests race, one rename wins and the others' copies are removed.
            let unique = format!(
                "{}-{:x}",
                std::process::id(),
                idemgate_core::machine::nonce()
            );
            let scratch = std::env::temp_dir().join(format!("idemgate-initdb-{unique}"));
            let staging = cache.join(format!(".initdb{name}-{unique}"));
            let made = Self::init(bin, &scratch, user).await;
            let copied = match &made {
                Ok(made) => copy(&made.data, &staging).await,
                Err(_) => Ok(()),
            };
            drop(made);
            let _ = std::fs::remove_dir_all(&scratch);
            copied?;
            if std::fs::rename(&staging, &template).is_err() {
                let _ = std::fs::remove_dir_all(&staging);
            }
        }
        let pg = Self::prepare(bin, dir, user).await?;
        copy(&template, &pg.data).await?;
        Ok(pg)
    }

    /// `dir` made and handed over, a free port chosen; no data directory yet.
    async fn prepare(bin: &Path, dir: &Path, user: &str) -> Result<Self, ServerError> {
        if !bin.join("initdb").exists() || !bin.join("pg_ctl").exists() {
            return Err(ServerError::NoBinaries {
                bin: bin.to_owned(),
            });
        }
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
        let (run_as, owner) = if is_root() {
            let ids = user_ids("postgres").await?;
            (Some("postgres".to_owned()), Some(ids))
        } else {
            (None, None)
        };
        let port = free_port()?;
        let pg = Self {
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            data: dir.join("data"),
            log: dir.join("postgres.log"),
            port,
            user: user.to_owned(),
            options: format!(
                "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={}",
                dir.display()
            ),
            run_as,
            owner,
        };
        pg.hand_over(dir)?;
        Ok(pg)
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The superuser `initdb` created.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The cluster's directory (the data directory is `data` in it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `postgres://{user}@127.0.0.1:{port}/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{}@127.0.0.1:{}/postgres", self.user, self.port)
    }

    /// Adds `-c name=value` settings to every start (`fsync=on`, `max_connections=200`).
    pub fn options(&mut self, settings: &[(&str, &str)]) {
        for (name, value) in settings {
            self.options.push_str(&format!(" -c {name}={value}"));
        }
    }

    /// Appends `lines` to `postgresql.conf` (effective at the next start).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn configure(&self, lines: &str) -> Result<(), ServerError> {
        use std::io::Write as _;
        let path = self.data.join("postgresql.conf");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io(format!("opening {}", path.display())))?;
        writeln!(file, "\n{lines}").map_err(io(format!("writing {}", path.display())))
    }

    /// Replaces `pg_hba.conf` with `text` (effective at the next start).
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn set_hba(&self, text: &str) -> Result<(), ServerError> {
        let path = self.data.join("pg_hba.conf");
        std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))
    }

    /// Writes `contents` to `name` in the cluster directory, readable by the server's user
    /// only (as PostgreSQL insists for a key), and returns its path.
    ///
    /// # Errors
    /// When the file cannot be written or handed over.
    pub fn install(&self, name: &str, contents: &str) -> Result<PathBuf, ServerError> {
        use std::os::unix::fs::PermissionsExt as _;
        let path = self.dir.join(name);
        std::fs::write(&path, contents).map_err(io(format!("writing {}", path.display())))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io(format!("restricting {}", path.display())))?;
        self.hand_over(&path)?;
        Ok(path)
    }

    /// `pg_ctl start`, waiting until the server accepts connections.
    ///
    /// # Errors
    /// When the server does not start; the error has the end of its log.
    pub async fn start(&self) -> Result<(), ServerError> {
        let log = self.log.to_string_lossy();
        self.pg_ctl(&["-l", &log, "-o", &self.options], "start")
            .await
    }

    /// `pg_ctl restart -m fast`: sessions are disconnected, the server comes back.
    ///
    /// # Errors
    /// When pg_ctl fails.
    pub async fn restart_fast(&self) -> Result<(), ServerError> {
        let log = self.log.to_string_lossy();
        self.pg_ctl(&["-l", &log, "-o", &self.options, "-m", "fast"], "restart")
            .await
    }

    /// `pg_ctl stop -m fast`.
    ///
    /// # Errors
    /// When pg_ctl fails.
    pub async fn stop_fast(&self) -> Result<(), ServerError> {
        self.pg_ctl(&["-m", "fast"], "stop").await
    }

    /// `pg_ctl stop -m immediate`: nothing is kept.
    ///
    /// # Errors
    /// When pg_ctl fails (also when the server is not running).
    pub async fn stop_immediate(&self) -> Result<(), ServerError> {
        self.pg_ctl(&["-m", "immediate"], "stop").await
    }

    /// Runs SQL with psql as the superuser over the Unix socket (so a `pg_hba.conf` that
    /// insists on TLS for TCP needs only `local all all trust`); its unaligned output, trimmed.
    ///
    /// # Errors
    /// When psql fails.
    pub async fn psql(&self, sql: &str) -> Result<String, ServerError> {
        let port = self.port.to_string();
        let socket_dir = self.dir.to_string_lossy();
        let args = [
            "-X",
            "-q",
            "-At",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            &socket_dir,
            "-p",
            &port,
            "-U",
            &self.user,
            "-d",
            "postgres",
            "-c",
            sql,
        ];
        let program = self.bin.join("psql");
        let out = tokio::process::Command::new(&program)
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(io(format!("running {}", program.display())))?;
        if !out.status.success() {
            return Err(ServerError::Tool {
                command: format!("psql -c {sql:?}"),
                status: out.status.to_string(),
                output: String::from_utf8_lossy(&out.stderr).into_owned(),
                log: String::new(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// The command line (program first) that stops the server at once, whatever this process
    /// is doing: for a cleanup script that outlives it.
    pub fn stop_command(&self) -> Vec<std::ffi::OsString> {
        let cmd = self.immediate_stop();
        std::iter::once(cmd.get_program().to_owned())
            .chain(cmd.get_args().map(ToOwned::to_owned))
            .collect()
    }

    fn immediate_stop(&self) -> std::process::Command {
        let mut cmd = self.command("pg_ctl");
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"]);
        cmd
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// `pg_ctl -D data {args} -w -t 60 {action}`.
    async fn pg_ctl(&self, args: &[&str], action: &str) -> Result<(), ServerError> {
        let data = self.data.to_string_lossy();
        let mut all = vec!["-D", &data];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-w", "-t", "60", action]);
        self.run("pg_ctl", &all).await.map(drop)
    }

    fn command(&self, tool: &str) -> std::process::Command {
        let program = self.bin.join(tool);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut c = std::process::Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&program);
                c
            }
            None => std::process::Command::new(&program),
        };
        cmd.current_dir(&self.dir);
        cmd
    }

    async fn run(&self, tool: &str, args: &[&str]) -> Result<String, ServerError> {
        let mut cmd = tokio::process::Command::from(self.command(tool));
        cmd.args(args).kill_on_drop(true);
        let out = cmd
            .output()
            .await
            .map_err(io(format!("running {tool} (in {})", self.bin.display())))?;
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() {
            return Err(ServerError::Tool {
                command: format!("{tool} {}", args.join(" ")),
                status: out.status.to_string(),
                output,
                log: self.log_tail(15),
            });
        }
        Ok(output)
    }

    /// Gives `path` to the server's user, when running as root.
    fn hand_over(&self, path: &Path) -> Result<(), ServerError> {
        match self.owner {
            Some((uid, gid)) => std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(io(
                format!("handing {} to the postgres user", path.display()),
            )),
            None => Ok(()),
        }
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        // A Drop cannot await; pg_ctl returns as soon as the server is down. A server that never
        // started (or was stopped) makes pg_ctl fail, which is fine.
        let _ = self
            .immediate_stop()
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// `cp -a from to`: owners and modes kept (a data directory must stay its user's, mode 0700).
async fn copy(from: &Path, to: &Path) -> Result<(), ServerError> {
    let out = tokio::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .await
        .map_err(io("running cp".to_owned()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ServerError::Tool {
            command: format!("cp -a {} {}", from.display(), to.display()),
            status: out.status.to_string(),
            output: String::from_utf8_lossy(&out.stderr).into_owned(),
            log: String::new(),
        })
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> ServerError {
    move |source| ServerError::Io { what, source }
}

/// A loopback port free right now.
///
/// # Errors
/// When no port can be bound.
pub fn free_port() -> Result<u16, ServerError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(io("binding a free loopback port".to_owned()))?;
    let addr = listener
        .local_addr()
        .map_err(io("reading the bound port".to_owned()))?;
    Ok(addr.port())
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

async fn user_ids(user: &str) -> Result<(u32, u32), ServerError> {
    let id = |flag: &'static str| async move {
        let what = || {
            format!(
                "this process runs as root, and initdb refuses root: it needs the {user:?} system user to run as (id {flag} {user})"
            )
        };
        let out = tokio::process::Command::new("id")
            .arg(flag)
            .arg(user)
            .output()
            .await
            .map_err(io(what()))?;
        let text = String::from_utf8_lossy(&out.stdout);
        match text.trim().parse() {
            Ok(n) if out.status.success() => Ok(n),
            _ => Err(ServerError::Io {
                what: what(),
                source: std::io::Error::other(
                    String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                ),
            }),
        }
    };
    Ok((id("-u").await?, id("-g").await?))
}
