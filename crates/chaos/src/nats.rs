//! A private `nats-server -js` on a free loopback port, its JetStream file store in the run
//! directory (so a restart keeps the streams, their messages and their dedup state), stopped
//! with SIGTERM as an operator stops it; and the streams the scenarios publish into, read back
//! once the gateways are stopped. The shared nats-server on 4222 is never touched.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use async_nats::jetstream;

use crate::broker::Message;
use crate::cleanup::{Registry, quote};
use crate::clock::Clock;

const BIN: &str = "nats-server";

/// Whether nats-server can run here; the error says what to install.
pub async fn available() -> anyhow::Result<()> {
    let out = tokio::process::Command::new(BIN)
        .arg("--version")
        .output()
        .await
        .context("cannot run nats-server: install it (Debian: apt-get install nats-server)")?;
    if !out.status.success() {
        bail!(
            "cannot run nats-server: --version failed with {}",
            out.status
        );
    }
    Ok(())
}

#[derive(Debug)]
pub struct PrivateNats {
    pub port: u16,
    dir: PathBuf,
    child: Option<tokio::process::Child>,
    cleanup: Option<u64>,
    registry: Arc<Registry>,
    starts: u32,
}

impl PrivateNats {
    /// Starts one in `parent/nats` and waits until it answers.
    ///
    /// # Errors
    /// When it cannot be started or does not answer within 20 s.
    pub async fn start(parent: &Path, registry: Arc<Registry>) -> anyhow::Result<Self> {
        let dir = parent.join("nats");
        std::fs::create_dir_all(dir.join("store"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let mut server = Self {
            port: crate::gateway::free_port()?,
            dir,
            child: None,
            cleanup: None,
            registry,
            starts: 0,
        };
        server.spawn().await?;
        Ok(server)
    }

    /// `host:port`, as a `nats://` URL takes it.
    pub fn server(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        let store = self.dir.join("store");
        let log = self.dir.join(format!("nats-{}.log", self.starts));
        let child = tokio::process::Command::new(BIN)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(&store)
            .arg("-l")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("cannot run nats-server: install it (Debian: apt-get install nats-server)")?;
        let pid = child.id().context("nats-server exited at once")?;
        // Its store directory is on its command line: that is how the watchdog knows the pid is
        // still this server.
        self.cleanup = Some(self.registry.add(format!(
            "p={pid}; tr '\\0' ' ' 2>/dev/null < /proc/$p/cmdline | grep -qF -- {} && kill -9 $p; true",
            quote(&store)
        )));
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(client) = async_nats::connect(self.server()).await {
                // JetStream answers once its store is recovered. (Asked raw: async-nats's
                // `query_account` cannot parse this nats-server version's account info.)
                let ready = tokio::time::timeout(
                    Duration::from_secs(2),
                    client.request("$JS.API.INFO", bytes::Bytes::new()),
                )
                .await
                .is_ok_and(|r| r.is_ok_and(|m| !m.payload.is_empty()));
                let _ = client.drain().await;
                if ready {
                    return Ok(());
                }
            }
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!(
                    "nats-server exited with {status}:\n{}",
                    crate::gateway::tail(Some(&log), 15)
                );
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "nats-server on port {} did not answer within 20 s:\n{}",
                    self.port,
                    crate::gateway::tail(Some(&log), 15)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops it with SIGTERM (SIGKILL if it lingers for 10 s) and waits until it is gone.
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
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
        if let Some(id) = self.cleanup.take() {
            self.registry.remove(id);
        }
    }

    /// Sends `signal` (`STOP` to freeze it: it takes nothing in and answers nothing until
    /// `CONT`).
    pub async fn signal(&self, signal: &str) {
        if let Some(pid) = self.child.as_ref().and_then(tokio::process::Child::id) {
            crate::broker::signal(pid, signal).await;
        }
    }

    /// Starts it again on the same port and store, if it is not running.
    ///
    /// # Errors
    /// When it does not come back.
    pub async fn ensure(&mut self) -> anyhow::Result<()> {
        if self.child.is_none() {
            self.spawn().await?;
        }
        Ok(())
    }

    /// A JetStream client of its own.
    ///
    /// # Errors
    /// When it does not answer.
    pub async fn jetstream(&self) -> anyhow::Result<jetstream::Context> {
        let client = async_nats::connect(self.server())
            .await
            .with_context(|| format!("connecting to the private nats-server {}", self.server()))?;
        Ok(jetstream::new(client))
    }
}

/// A stream `name` on file storage, capturing `subjects`, deduplicating for `window`.
///
/// # Errors
/// When JetStream refuses it.
pub async fn create_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: Vec<String>,
    window: Duration,
) -> anyhow::Result<()> {
    js.create_stream(jetstream::stream::Config {
        name: name.to_owned(),
        subjects,
        duplicate_window: window,
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await
    .with_context(|| format!("creating the JetStream stream {name}"))?;
    Ok(())
}

/// Sets stream `name`'s duplicate window to `window`.
///
/// # Errors
/// When JetStream refuses it.
pub async fn set_window(
    js: &jetstream::Context,
    name: &str,
    window: Duration,
) -> anyhow::Result<()> {
    let mut stream = js
        .get_stream(name)
        .await
        .with_context(|| format!("reading the stream {name}"))?;
    let mut config = stream.info().await?.config.clone();
    config.duplicate_window = window;
    js.update_stream(config)
        .await
        .with_context(|| format!("updating the stream {name}"))?;
    Ok(())
}

/// Every message stream `name` holds, in order, with the time JetStream stored it.
///
/// # Errors
/// When the stream cannot be read.
pub async fn read_stream(
    js: &jetstream::Context,
    name: &str,
    clock: Clock,
) -> anyhow::Result<Vec<Message>> {
    let mut stream = js
        .get_stream(name)
        .await
        .with_context(|| format!("reading the stream {name}"))?;
    let state = stream.info().await?.state.clone();
    let mut out = Vec::with_capacity(state.messages as usize);
    if state.messages == 0 {
        return Ok(out);
    }
    for seq in state.first_sequence..=state.last_sequence {
        let m = stream
            .get_raw_message(seq)
            .await
            .with_context(|| format!("reading message {seq} of the stream {name}"))?;
        let headers = m
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.first()?.as_str().to_owned())))
            .collect::<std::collections::BTreeMap<_, _>>();
        out.push(Message {
            key: m.subject.to_string(),
            id: headers.get("Nats-Msg-Id").cloned(),
            content_type: headers.get("Content-Type").cloned(),
            headers,
            body: m.payload.to_vec(),
            position: m.sequence,
            at: Some(clock.at_wall(std::time::SystemTime::from(m.time))),
            persistent: None,
        });
    }
    Ok(out)
}
