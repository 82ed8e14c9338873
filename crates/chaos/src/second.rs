//! A second `idemgate serve` on a running gateway's own config (its instance name, its store):
//! an operator's typo, a supervisor too eager. Started on the same listen address, it must fail
//! at bind, before it touches the store; on another port, it must be refused by the store
//! (the instance name is held by a live process, whose liveness lease it sees renewed) and exit
//! non-zero, freeing nothing. Either way it must never serve.

use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;

use crate::cleanup::quote;
use crate::clock::Clock;
use crate::gateway::Gateway;
use crate::http::{self, Client};

/// How one second start ended.
#[derive(Debug, Clone)]
pub struct SecondStart {
    /// What it was ("on g1's address", "on another port").
    pub what: &'static str,
    pub listen: SocketAddr,
    /// When it was started and when it was gone (run microseconds).
    pub started: u64,
    pub ended: u64,
    /// How it exited: `None` if it was still running at the deadline and had to be killed.
    pub exit: Option<ExitStatus>,
    /// It answered `/healthz` on its own port, or was still running at the deadline.
    pub served: bool,
    /// What it wrote to stderr (at `info`).
    pub log: String,
}

impl SecondStart {
    /// It exited by itself, non-zero, and never served.
    pub fn refused(&self) -> bool {
        !self.served && self.exit.is_some_and(|s| !s.success())
    }

    /// The first line of its log that says `needle`, if any.
    pub fn said(&self, needle: &str) -> Option<&str> {
        self.log.lines().find(|l| l.contains(needle))
    }

    /// Its last log line (the error it exited with).
    pub fn last_words(&self) -> &str {
        self.log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(nothing)")
    }

    pub fn took(&self) -> Duration {
        Duration::from_micros(self.ended.saturating_sub(self.started))
    }
}

/// Starts `idemgate serve` on `of`'s current config, listening on `listen` when given (another
/// port: `--listen`), else on `of`'s own address; waits until it exits, or `deadline` passes
/// (then it is killed and counted as serving). Its stderr goes to `{name}.log` in the
/// scenario's directory.
///
/// # Errors
/// When it cannot be started.
pub async fn start(
    of: &Gateway,
    name: &str,
    what: &'static str,
    listen: Option<SocketAddr>,
    deadline: Duration,
    clock: Clock,
    client: &Client,
) -> anyhow::Result<SecondStart> {
    let config = of.config_path();
    let log_path = config.with_file_name(format!("{name}.log"));
    let log_file = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut cmd = of.command();
    cmd.arg("serve").arg("--config").arg(&config);
    if let Some(addr) = listen {
        cmd.arg("--listen").arg(addr.to_string());
    }
    cmd.stdout(Stdio::null())
        .stderr(Stdio::from(log_file))
        .process_group(0)
        .env("IDEMGATE_LOG", "info");
    cmd.envs(of.extra_env.iter().map(|(k, v)| (k, v)));
    let started = clock.now();
    let mut child = cmd.spawn().context("starting a second idemgate serve")?;
    let pid = child.id().unwrap_or_default();
    // Matched by its pid and its config path, as a gateway is: the line can only ever touch
    // this process.
    let cleanup = of.registry().add(format!(
        "p={pid}; tr '\\0' ' ' 2>/dev/null < /proc/$p/cmdline | grep -qF {} && kill -9 $p; true",
        quote(&config)
    ));
    let listen = listen.unwrap_or_else(|| of.addr());
    let own_port = listen != of.addr();
    let url = format!("http://{listen}/healthz");
    let until = tokio::time::Instant::now() + deadline;
    let mut served = false;
    let exit = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if own_port && let Ok((200, _)) = http::get(client, &url, Duration::from_millis(300)).await
        {
            served = true;
        }
        if served || tokio::time::Instant::now() >= until {
            served = true;
            let _ = child.start_kill();
            let _ = child.wait().await;
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ended = clock.now();
    of.registry().remove(cleanup);
    Ok(SecondStart {
        what,
        listen,
        started,
        ended,
        exit,
        served,
        log: std::fs::read_to_string(&log_path).unwrap_or_default(),
    })
}
