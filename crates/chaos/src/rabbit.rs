//! A private RabbitMQ node (its own node name, AMQP and distribution ports on loopback, its
//! Mnesia and message store in the run directory), not a vhost of the shared node: a scenario
//! stops and restarts it, which the shared `rabbit@localhost` must never see. When the harness is
//! root the node runs as the `rabbitmq` system user (`runuser -u rabbitmq --`), with its own
//! directory handed to that user; run as any other user, it runs as that user. It registers with
//! the host's epmd as any node does; epmd itself is never touched.
//!
//! A restart starts it again on the same directory, which keeps durable queues and persistent
//! messages. It is stopped with SIGTERM to its `beam.smp`, found by its node name.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use lapin::options::{BasicGetOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};

use crate::broker::Message;
use crate::cleanup::{Registry, quote};

/// The node's start script (Debian's rabbitmq-server package), run directly: the `/usr/sbin`
/// wrapper would switch to the shared node's settings.
const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// The system user a root harness runs the node as.
const USER: &str = "rabbitmq";

/// Whether a private node can run here; the error says what is missing.
pub async fn available() -> anyhow::Result<()> {
    if !Path::new(SERVER).exists() {
        bail!(
            "cannot run rabbitmq-server: {SERVER} not found (Debian: apt-get install rabbitmq-server)"
        );
    }
    if idemgate_postgres::testing::is_root() {
        let runuser = tokio::process::Command::new("runuser")
            .arg("--version")
            .output()
            .await;
        if !runuser.is_ok_and(|o| o.status.success()) {
            bail!("cannot run rabbitmq-server as the {USER} user: runuser not found (util-linux)");
        }
        ids(USER).await?;
    }
    Ok(())
}

/// The uid and gid of `user`.
async fn ids(user: &str) -> anyhow::Result<(u32, u32)> {
    let id = |flag: &'static str| async move {
        let out = tokio::process::Command::new("id")
            .arg(flag)
            .arg(user)
            .output()
            .await
            .context("running id")?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() {
            bail!(
                "cannot run rabbitmq-server as the {user:?} system user: there is none (id {flag} {user})"
            );
        }
        text.parse::<u32>()
            .with_context(|| format!("id {flag} {user} said {text:?}"))
    };
    Ok((id("-u").await?, id("-g").await?))
}

#[derive(Debug)]
pub struct PrivateRabbit {
    pub port: u16,
    dist_port: u16,
    /// `chaos-{pid}-{nonce}@localhost`.
    pub node: String,
    dir: PathBuf,
    /// Root: the user the node runs as.
    user: Option<&'static str>,
    child: Option<tokio::process::Child>,
    cleanup: Option<u64>,
    registry: Arc<Registry>,
    starts: u32,
}

impl PrivateRabbit {
    /// Starts a node in `parent/rabbit` and waits until it takes AMQP connections.
    ///
    /// # Errors
    /// When it cannot be started or does not answer within 90 s.
    pub async fn start(
        parent: &Path,
        nonce: &str,
        registry: Arc<Registry>,
    ) -> anyhow::Result<Self> {
        let dir = parent.join("rabbit");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(dir.join("plugins"), "[].\n").context("writing the plugins file")?;
        let user = if idemgate_postgres::testing::is_root() {
            let (uid, gid) = ids(USER).await?;
            for path in [dir.clone(), dir.join("plugins")] {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                    .with_context(|| format!("handing {} to {USER}", path.display()))?;
            }
            Some(USER)
        } else {
            None
        };
        let mut node = Self {
            port: crate::gateway::free_port()?,
            dist_port: crate::gateway::free_port()?,
            node: format!("chaos-{}-{nonce}@localhost", std::process::id()),
            dir,
            user,
            child: None,
            cleanup: None,
            registry,
            starts: 0,
        };
        // Matched by its node name (in its environment): the line can only ever touch this
        // node's beam.smp, never the shared rabbit@localhost.
        node.cleanup = Some(node.registry.add(format!(
            "for d in /proc/[0-9]*; do [ \"$(cat $d/comm 2>/dev/null)\" = beam.smp ] && tr '\\0' '\\n' 2>/dev/null < $d/environ | grep -qxF {} && kill -9 \"${{d#/proc/}}\"; done; true",
            quote(format!("RABBITMQ_NODENAME={}", node.node))
        )));
        node.spawn().await?;
        Ok(node)
    }

    /// The AMQP URL of its default vhost, as guest (allowed on loopback).
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2F", self.port)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn log(&self) -> PathBuf {
        self.dir.join(format!("rabbit-{}.log", self.starts))
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        let dir = &self.dir;
        let _ = std::fs::remove_file(dir.join("pid"));
        let log = std::fs::File::create(self.log())
            .with_context(|| format!("creating {}", self.log().display()))?;
        let env = [
            ("HOME", dir.display().to_string()),
            ("RABBITMQ_NODENAME", self.node.clone()),
            ("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1".to_owned()),
            ("RABBITMQ_NODE_PORT", self.port.to_string()),
            ("RABBITMQ_DIST_PORT", self.dist_port.to_string()),
            (
                "RABBITMQ_MNESIA_BASE",
                dir.join("mnesia").display().to_string(),
            ),
            ("RABBITMQ_LOG_BASE", dir.join("log").display().to_string()),
            (
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                dir.join("plugins").display().to_string(),
            ),
            (
                "RABBITMQ_CONFIG_FILE",
                dir.join("rabbitmq").display().to_string(),
            ),
            ("RABBITMQ_PID_FILE", dir.join("pid").display().to_string()),
            ("RABBITMQ_LOGS", "-".to_owned()),
        ];
        let mut cmd = match self.user {
            Some(user) => {
                let mut cmd = tokio::process::Command::new("runuser");
                cmd.args(["-u", user, "--", "env"])
                    .args(env.iter().map(|(k, v)| format!("{k}={v}")))
                    .arg(SERVER);
                cmd
            }
            None => {
                let mut cmd = tokio::process::Command::new(SERVER);
                cmd.envs(env.iter().map(|(k, v)| (k, v)));
                cmd
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {SERVER}"))?;
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(Ok(c)) = tokio::time::timeout(
                Duration::from_secs(5),
                lapin::Connection::connect(&self.url(), lapin::ConnectionProperties::default()),
            )
            .await
            {
                let _ = c.close(200, "ready".into()).await;
                return Ok(());
            }
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!(
                    "the private RabbitMQ node {} exited with {status}:\n{}",
                    self.node,
                    crate::gateway::tail(Some(&self.log()), 20)
                );
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the private RabbitMQ node {} did not take connections on {} within 90 s:\n{}",
                    self.node,
                    self.port,
                    crate::gateway::tail(Some(&self.log()), 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The node's `beam.smp`: the process with this node's name in its environment.
    fn beam(&self) -> Option<u32> {
        let wanted = format!("RABBITMQ_NODENAME={}", self.node);
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
                if comm.trim_end() != "beam.smp" {
                    return None;
                }
                let environ = std::fs::read(entry.path().join("environ")).ok()?;
                environ
                    .split(|&b| b == 0)
                    .any(|var| var == wanted.as_bytes())
                    .then_some(pid)
            })
    }

    /// Stops it with SIGTERM to its beam.smp (SIGKILL if it lingers for 30 s) and waits until it
    /// is gone.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let beam = self.beam();
        if let Some(pid) = beam {
            let _ = tokio::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
        }
        if beam.is_none()
            || tokio::time::timeout(Duration::from_secs(30), child.wait())
                .await
                .is_err()
        {
            if let Some(pid) = self.beam() {
                let _ = tokio::process::Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .status()
                    .await;
            }
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// Sends `signal` to its beam.smp (`STOP` to freeze it: it takes nothing in and confirms
    /// nothing until `CONT`).
    pub async fn signal(&self, signal: &str) {
        if self.child.is_some()
            && let Some(pid) = self.beam()
        {
            crate::broker::signal(pid, signal).await;
        }
    }

    /// Starts it again on the same directory (durable queues and persistent messages kept), if
    /// it is not running.
    ///
    /// # Errors
    /// When it does not come back.
    pub async fn ensure(&mut self) -> anyhow::Result<()> {
        if self.child.is_none() {
            self.spawn().await?;
        }
        Ok(())
    }

    /// Stops it for good: the cleanup line is no longer needed.
    pub async fn remove(&mut self) {
        self.stop().await;
        if let Some(id) = self.cleanup.take() {
            self.registry.remove(id);
        }
    }

    /// An AMQP connection of the harness's own.
    ///
    /// # Errors
    /// When the node does not answer.
    pub async fn connect(&self) -> anyhow::Result<lapin::Connection> {
        lapin::Connection::connect(&self.url(), lapin::ConnectionProperties::default())
            .await
            .with_context(|| format!("connecting to the private RabbitMQ node {}", self.node))
    }
}

/// A durable queue `queue` bound to `amq.topic` with `binding`.
///
/// # Errors
/// When the node refuses it.
pub async fn declare_queue(
    connection: &lapin::Connection,
    queue: &str,
    binding: &str,
) -> anyhow::Result<()> {
    let channel = connection.create_channel().await?;
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("declaring the queue {queue}"))?;
    channel
        .queue_bind(
            queue.into(),
            "amq.topic".into(),
            binding.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("binding the queue {queue} to amq.topic"))?;
    let _ = channel.close(200, "declared".into()).await;
    Ok(())
}

/// Every message queue `queue` holds, in order (taken off it).
///
/// # Errors
/// When the queue cannot be read.
pub async fn read_queue(
    connection: &lapin::Connection,
    queue: &str,
) -> anyhow::Result<Vec<Message>> {
    let channel = connection.create_channel().await?;
    let mut out = Vec::new();
    while let Some(got) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .with_context(|| format!("reading the queue {queue}"))?
    {
        let d = got.delivery;
        let p = &d.properties;
        let headers = p
            .headers()
            .as_ref()
            .map(|h| {
                h.inner()
                    .iter()
                    .filter_map(|(k, v)| match v {
                        AMQPValue::LongString(s) => Some((k.to_string(), s.to_string())),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(Message {
            key: d.routing_key.to_string(),
            id: p.message_id().as_ref().map(|s| s.to_string()),
            headers,
            body: d.data,
            content_type: p.content_type().as_ref().map(|s| s.to_string()),
            position: out.len() as u64 + 1,
            at: None,
            persistent: Some(*p.delivery_mode() == Some(2)),
        });
    }
    let _ = channel.close(200, "read".into()).await;
    Ok(out)
}
