//! Private redis-servers (one standalone, or a 3-master Cluster) on free loopback ports, keeping
//! nothing on disk, driven with `redis-cli` (FLUSHALL, CONFIG SET, SHUTDOWN) so the harness needs
//! no Redis client library.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use crate::cleanup::{Registry, quote};

#[derive(Debug)]
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    child: Option<tokio::process::Child>,
    cleanup: Option<u64>,
    registry: Arc<Registry>,
}

/// Whether redis-server and redis-cli can run here; the error says what to install.
pub async fn available() -> anyhow::Result<()> {
    for tool in ["redis-server", "redis-cli"] {
        let out = tokio::process::Command::new(tool)
            .arg("--version")
            .output()
            .await
            .with_context(|| {
                format!("cannot run {tool}: install redis-server and redis-cli (Debian: apt-get install redis-server)")
            })?;
        if !out.status.success() {
            bail!("{tool} --version failed: {}", out.status);
        }
    }
    Ok(())
}

impl RedisServer {
    /// Starts one in `parent/{name}` with `extra` arguments and waits until it answers PING.
    ///
    /// # Errors
    /// When it cannot be started or does not answer within 10 s.
    pub async fn start(
        parent: &Path,
        name: &str,
        extra: &[&str],
        registry: Arc<Registry>,
    ) -> anyhow::Result<Self> {
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut server = Self {
            port: cluster_port()?,
            dir,
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            child: None,
            cleanup: None,
            registry,
        };
        server.spawn().await?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let child = tokio::process::Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "redis.log"])
            .args(&self.extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server")?;
        let pid = child.id().context("redis-server exited at once")?;
        // redis-server runs in its --dir: that is how the watchdog knows the pid is still ours.
        self.cleanup = Some(self.registry.add(format!(
            "p={pid}; [ \"$(readlink /proc/$p/cwd 2>/dev/null)\" = {} ] && kill -9 $p; true",
            quote(&self.dir)
        )));
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if self.cli(&["PING"]).await.is_ok_and(|r| r == "PONG") {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                bail!(
                    "redis-server on port {} did not answer PING:\n{log}",
                    self.port
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `redis-cli -p PORT args...`: its output, trimmed.
    ///
    /// # Errors
    /// When redis-cli fails or the server answers an error.
    pub async fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = tokio::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .context("running redis-cli")?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !out.status.success() || text.starts_with("ERR") || text.starts_with("(error)") {
            bail!(
                "redis-cli {}: {text} {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(text)
    }

    /// Stops the server (SHUTDOWN NOSAVE, SIGKILL if it lingers).
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = self.cli(&["SHUTDOWN", "NOSAVE"]).await;
        if tokio::time::timeout(Duration::from_secs(5), child.wait())
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

    /// Stops it, leaves it down for `down_for`, starts it again on the same port (empty).
    ///
    /// # Errors
    /// When it does not come back.
    pub async fn restart(&mut self, down_for: Duration) -> anyhow::Result<()> {
        self.stop().await;
        tokio::time::sleep(down_for).await;
        self.spawn().await
    }
}

/// A 3-master Redis Cluster, no replicas.
#[derive(Debug)]
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    /// Starts three cluster-enabled servers, joins them, and waits for `cluster_state:ok`.
    ///
    /// # Errors
    /// When a node does not start or the cluster does not form within 20 s.
    pub async fn start(parent: &Path, registry: Arc<Registry>) -> anyhow::Result<Self> {
        let mut nodes = Vec::new();
        for i in 0..3 {
            nodes.push(
                RedisServer::start(
                    parent,
                    &format!("redis-node{i}"),
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "5000",
                    ],
                    registry.clone(),
                )
                .await?,
            );
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = tokio::process::Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .context("running redis-cli --cluster create")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            loop {
                let info = node.cli(&["CLUSTER", "INFO"]).await.unwrap_or_default();
                if info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384") {
                    break;
                }
                if tokio::time::Instant::now() > deadline {
                    bail!("the Redis Cluster never became ok:\n{info}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(Self { nodes })
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub async fn stop(&mut self) {
        for node in &mut self.nodes {
            node.stop().await;
        }
    }
}

/// A port `p` with `p + 10000` (a Cluster node's bus port) also free, in 20000..30000.
fn cluster_port() -> anyhow::Result<u16> {
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let mut rng = crate::rng::Rng::new(
        u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos() as u64,
    );
    for _ in 0..2_000 {
        let port = 20_000 + rng.below(10_000) as u16;
        if free(port) && free(port + 10_000) {
            return Ok(port);
        }
    }
    bail!("no free loopback port pair found in 20000..30000")
}
