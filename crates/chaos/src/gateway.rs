//! `idemgate serve` processes: configured, started, killed, restarted and stopped.
//!
//! Each gateway keeps its index, instance name (`g{index}`) and listen port across restarts; each
//! start is a new incarnation with its own forward path (`/hook/g{index}/r{incarnation}`) and its
//! own log file. The environment's `IDEMGATE_*` variables are not passed on (they would override
//! the config), except the log filter.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::cleanup::{Registry, quote};
use crate::clock::Clock;
use crate::downstream::Via;
use crate::http::{self, Client};

/// The source every scenario uses, and its test signing secret.
pub const SOURCE: &str = "chaos";
pub const SECRET: &str = "whsec_chaos_suite_test_secret";

/// What a scenario sets on the source.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    pub lease: Duration,
    pub forward_timeout: Duration,
    /// The TTL: the retry window, with queue lag, clock skew and replay margin at zero.
    pub ttl: Duration,
    /// Inbox mode: the source queues and its dispatcher delivers (`None`: forward mode).
    pub inbox: Option<InboxSpec>,
}

/// An inbox source's `[source.dispatch]`. Its `timeout` is the source's `forward_timeout` and its
/// `max_age` the TTL: with `queue_lag = "0s"` the default `max_age` would dead-letter every
/// item at its first failure.
#[derive(Debug, Clone)]
pub struct InboxSpec {
    /// Deliveries in flight at once, per gateway.
    pub concurrency: u32,
    /// `dispatch.max_attempts` (the gateway's default, 12, when `None`): a broker down for long
    /// takes more attempts than that at the suite's short backoff.
    pub max_attempts: Option<u32>,
}

impl InboxSpec {
    /// The dispatcher's lease on an item it takes: as `idemgate_gateway::dispatch` computes it
    /// from the delivery timeout.
    pub fn lease(timeout: Duration) -> Duration {
        timeout.saturating_mul(2) + Duration::from_secs(5)
    }
}

/// A SIGKILL: which process, when it was sent and when the process was gone (run
/// microseconds), and when the gateway's next incarnation was started, if it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kill {
    pub via: Via,
    pub at: u64,
    pub dead: u64,
    pub restarted: Option<u64>,
}

#[derive(Debug)]
pub struct Gateway {
    pub index: u8,
    pub port: u16,
    incarnation: u16,
    store_toml: String,
    source: SourceSpec,
    bin: PathBuf,
    dir: PathBuf,
    downstream: SocketAddr,
    /// `IDEMGATE_LOG` for every incarnation.
    pub log_filter: String,
    child: Option<tokio::process::Child>,
    cleanup: Option<u64>,
    logs: Vec<PathBuf>,
    registry: Arc<Registry>,
    clock: Clock,
    client: Client,
    /// Top-level config lines of the scenario's own (`instance_lease = "3s"`), in every
    /// incarnation's config after `instance`.
    pub extra_toml: String,
    /// Environment variables of the scenario's own (libfaketime's), for every incarnation.
    pub extra_env: Vec<(String, String)>,
    /// The source's `forward_url` instead of the downstream's path, with `{g}` and `{r}` standing
    /// for the gateway's index and the incarnation (a broker subject or routing key per process).
    pub destination: Option<String>,
    /// Lines of the scenario's own in the `[[source]]` table (`on_short_window = "refuse"`).
    pub source_toml: String,
}

/// Where a gateway runs and what it needs.
#[derive(Debug, Clone)]
pub struct Env {
    pub bin: PathBuf,
    /// The scenario's directory (configs, logs, SQLite data).
    pub dir: PathBuf,
    pub downstream: SocketAddr,
    pub registry: Arc<Registry>,
    pub clock: Clock,
    pub client: Client,
    /// `IDEMGATE_LOG` for the gateways.
    pub log_filter: String,
}

impl Gateway {
    /// A gateway not started yet. `store_toml` is the whole `[store]` section (with its
    /// subsections).
    ///
    /// # Errors
    /// When no free port is found.
    pub fn new(
        env: &Env,
        index: u8,
        store_toml: String,
        source: SourceSpec,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            index,
            port: free_port()?,
            incarnation: 0,
            store_toml,
            source,
            bin: env.bin.clone(),
            dir: env.dir.clone(),
            downstream: env.downstream,
            log_filter: env.log_filter.clone(),
            child: None,
            cleanup: None,
            logs: Vec::new(),
            registry: env.registry.clone(),
            clock: env.clock,
            client: env.client.clone(),
            extra_toml: String::new(),
            extra_env: Vec::new(),
            destination: None,
            source_toml: String::new(),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The current (or last) incarnation.
    pub fn via(&self) -> Via {
        Via {
            gateway: self.index,
            incarnation: self.incarnation,
        }
    }

    /// The run's cleanup registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    pub fn logs(&self) -> &[PathBuf] {
        &self.logs
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn config(&self) -> String {
        let h = |d: Duration| humantime::format_duration(d).to_string();
        let inbox = match &self.source.inbox {
            None => String::new(),
            Some(i) => format!(
                r#"mode = "inbox"

[source.dispatch]
concurrency = {concurrency}
timeout = "{timeout}"
max_age = "{ttl}"
backoff = "100ms"
max_backoff = "1s"
{attempts}"#,
                concurrency = i.concurrency,
                timeout = h(self.source.forward_timeout),
                ttl = h(self.source.ttl),
                attempts = i
                    .max_attempts
                    .map(|n| format!("max_attempts = {n}\n"))
                    .unwrap_or_default(),
            ),
        };
        let forward_url = match &self.destination {
            Some(template) => template
                .replace("{g}", &self.index.to_string())
                .replace("{r}", &self.incarnation.to_string()),
            None => format!(
                "http://{}/hook/g{}/r{}",
                self.downstream, self.index, self.incarnation
            ),
        };
        format!(
            r#"listen = "127.0.0.1:{port}"
instance = "g{index}"
{extra}
{store}

[limits]
shutdown_grace = "2s"

[[source]]
name = "{SOURCE}"
provider = "stripe"
secrets = ["{SECRET}"]
forward_url = {forward_url:?}
forward_timeout = "{timeout}"
lease = "{lease}"
retry_window = "{ttl}"
queue_lag = "0s"
clock_skew = "0s"
replay_margin = "0s"
late_duplicates = "flag"
{source}{inbox}"#,
            port = self.port,
            index = self.index,
            extra = self.extra_toml,
            store = self.store_toml,
            source = self.source_toml,
            timeout = h(self.source.forward_timeout),
            lease = h(self.source.lease),
            ttl = h(self.source.ttl),
        )
    }

    /// The config of the current (or last) incarnation.
    pub fn config_path(&self) -> PathBuf {
        self.dir
            .join(format!("g{}-r{}.toml", self.index, self.incarnation))
    }

    /// Writes the next incarnation's config without starting it (for an `idemgate serve` the
    /// scenario runs itself, expecting it to refuse to start); returns its path.
    ///
    /// # Errors
    /// When it cannot be written.
    pub fn write_next_config(&mut self) -> anyhow::Result<PathBuf> {
        self.incarnation += 1;
        let config = self.config_path();
        std::fs::write(&config, self.config())
            .with_context(|| format!("writing {}", config.display()))?;
        Ok(config)
    }

    /// `idemgate`, run in the scenario's directory, without the environment's `IDEMGATE_*`
    /// variables, killed if dropped.
    pub fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.current_dir(&self.dir)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("IDEMGATE_") {
                cmd.env_remove(key);
            }
        }
        cmd
    }

    /// Runs `idemgate {args} --config {the last incarnation's config}` and returns its stdout.
    ///
    /// # Errors
    /// When it cannot run or exits non-zero (with its stderr).
    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut cmd = self.command();
        cmd.args(args).arg("--config").arg(self.config_path());
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .context("idemgate did not exit within 30 s")?
            .with_context(|| format!("running {}", self.bin.display()))?;
        if !out.status.success() {
            bail!(
                "idemgate {} exited with {}: {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts a new incarnation without waiting for it.
    ///
    /// # Errors
    /// When it is already running, or the config or the process cannot be created.
    pub fn launch(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("gateway g{} is already running", self.index);
        }
        self.incarnation += 1;
        let name = format!("g{}-r{}", self.index, self.incarnation);
        let config = self.config_path();
        std::fs::write(&config, self.config())
            .with_context(|| format!("writing {}", config.display()))?;
        let log = self.dir.join(format!("{name}.log"));
        let log_file =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = self.command();
        cmd.arg("serve")
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file))
            .process_group(0);
        cmd.env("IDEMGATE_LOG", &self.log_filter);
        cmd.envs(self.extra_env.iter().map(|(k, v)| (k, v)));
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", self.bin.display()))?;
        let pid = child.id().context("the gateway exited at once")?;
        self.cleanup = Some(self.registry.add(format!(
            "p={pid}; tr '\\0' ' ' 2>/dev/null < /proc/$p/cmdline | grep -qF {} && kill -9 $p; true",
            quote(&config)
        )));
        self.child = Some(child);
        self.logs.push(log);
        Ok(())
    }

    /// Waits until `/healthz` answers 200; returns when (run microseconds).
    ///
    /// # Errors
    /// When the process exits first, or `timeout` passes.
    pub async fn ready(&mut self, timeout: Duration) -> anyhow::Result<u64> {
        let url = format!("http://{}/healthz", self.addr());
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Ok((200, _)) = http::get(&self.client, &url, Duration::from_millis(500)).await {
                return Ok(self.clock.now());
            }
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!(
                    "gateway g{} exited with {status} before answering /healthz:\n{}",
                    self.index,
                    tail(self.logs.last(), 20)
                );
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "gateway g{} did not answer /healthz within {timeout:?}:\n{}",
                    self.index,
                    tail(self.logs.last(), 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts a new incarnation and waits until it is ready; returns when it was.
    ///
    /// # Errors
    /// As [`Gateway::launch`] and [`Gateway::ready`].
    pub async fn start(&mut self) -> anyhow::Result<u64> {
        self.launch()?;
        self.ready(Duration::from_secs(60)).await
    }

    /// SIGKILL, now. Returns what was killed and when.
    pub async fn kill(&mut self) -> Option<Kill> {
        let mut child = self.child.take()?;
        let at = self.clock.now();
        let _ = child.start_kill();
        let _ = child.wait().await;
        let dead = self.clock.now();
        if let Some(id) = self.cleanup.take() {
            self.registry.remove(id);
        }
        Some(Kill {
            via: self.via(),
            at,
            dead,
            restarted: None,
        })
    }

    /// SIGTERM, then SIGKILL if it has not exited within 10 s.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id() {
            let _ = tokio::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
        if tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .is_err()
        {
            eprintln!(
                "gateway g{} ignored SIGTERM for 10 s; killing it",
                self.index
            );
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        if let Some(id) = self.cleanup.take() {
            self.registry.remove(id);
        }
    }

    /// The gateway's `/metrics` text, if it answers.
    pub async fn metrics(&self) -> Option<String> {
        let url = format!("http://{}/metrics", self.addr());
        match http::get(&self.client, &url, Duration::from_secs(5)).await {
            Ok((200, text)) => Some(text),
            _ => None,
        }
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// The last `n` lines of a log file, for error messages.
pub fn tail(path: Option<&PathBuf>, n: usize) -> String {
    let Some(path) = path else {
        return String::new();
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What the gateways' logs say, across every incarnation.
#[derive(Debug, Default, Clone)]
pub struct LogSummary {
    /// Warnings and errors by message, with a count.
    pub warnings: std::collections::BTreeMap<String, u64>,
    pub sweep_runs: u64,
    pub swept_rows: u64,
    pub sweep_failures: u64,
    /// The longest sweep run, in milliseconds (its `elapsed_ms`).
    pub longest_sweep_ms: u64,
    pub partitions_dropped: u64,
}

impl LogSummary {
    pub fn read(paths: &[PathBuf]) -> Self {
        let mut s = Self::default();
        for path in paths {
            s.add(path);
        }
        s
    }

    fn add(&mut self, path: &Path) {
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        for line in text.lines() {
            let level = if line.contains(" WARN ") {
                Some("WARN")
            } else if line.contains(" ERROR ") {
                Some("ERROR")
            } else {
                None
            };
            let message = message_of(line);
            if message.starts_with("sweep run failed") {
                self.sweep_failures += 1;
            } else if message.starts_with("sweep run") {
                self.sweep_runs += 1;
                self.swept_rows += field(line, "rows").unwrap_or(0);
                self.longest_sweep_ms = self
                    .longest_sweep_ms
                    .max(field(line, "elapsed_ms").unwrap_or(0));
            } else if message.starts_with("dropped partitions") {
                self.partitions_dropped += line.matches("\"dedup_").count() as u64;
            }
            if let Some(level) = level {
                *self
                    .warnings
                    .entry(format!("{level} {message}"))
                    .or_default() += 1;
            }
        }
    }
}

/// The message of a tracing fmt line: after `target: `, up to the first `name=value` field.
fn message_of(line: &str) -> String {
    let after = line.split_once(": ").map_or(line, |(_, rest)| rest);
    let mut words = Vec::new();
    for word in after.split(' ') {
        if let Some((name, _)) = word.split_once('=')
            && !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        {
            break;
        }
        words.push(word);
    }
    words.join(" ")
}

/// The number in field `name=` of a log line.
fn field(line: &str, name: &str) -> Option<u64> {
    let pat = format!(" {name}=");
    let at = line.find(&pat)? + pat.len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_summarized() {
        let dir = std::env::temp_dir().join(format!("chaos-log-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("g1-r1.log");
        std::fs::write(
            &log,
            "2026-12-01T10:00:00.000001Z  INFO idemgate_gateway::admin: sweep run store=\"sqlite\" rows=12 elapsed_ms=3\n\
             2026-12-01T10:00:01.000001Z  INFO idemgate_gateway::admin: sweep run store=\"sqlite\" rows=0 elapsed_ms=1\n\
             2026-12-01T10:00:02.000001Z  WARN idemgate_gateway::admin: sweep run failed store=\"postgres\" error=boom\n\
             2026-12-01T10:00:03.000001Z  INFO idemgate_postgres::sweeper: dropped partitions schema=s dropped=[\"dedup_p20261201t100000\", \"dedup_p20261201t100002\"]\n\
             2026-12-01T10:00:04.000001Z  WARN idemgate_gateway::ingest: forwarded, but the claim could not be completed key=chaos error=x\n\
             2026-12-01T10:00:05.000001Z  WARN idemgate_gateway::ingest: forwarded, but the claim could not be completed key=chaos error=y\n",
        )
        .unwrap();
        let s = LogSummary::read(&[log]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!((s.sweep_runs, s.swept_rows, s.sweep_failures), (2, 12, 1));
        assert_eq!(s.longest_sweep_ms, 3);
        assert_eq!(s.partitions_dropped, 2);
        assert_eq!(
            s.warnings
                .get("WARN forwarded, but the claim could not be completed"),
            Some(&2)
        );
        assert_eq!(s.warnings.get("WARN sweep run failed"), Some(&1));
    }
}
