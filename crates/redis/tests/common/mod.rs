//! Helpers shared by the test binaries: the shared Redis's URL, per-test key prefixes cleaned up
//! on drop, and redis-server processes the tests start (and stop) themselves.
#![allow(dead_code)] // Each test binary uses its own share of these.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idemgate_core::testkit::{self, RealTimeHarness};
use idemgate_redis::{RedisConfig, RedisStore};

pub const WHAT_TO_START: &str =
    "start redis-server on 127.0.0.1:6379 or set IDEMGATE_TEST_REDIS to a Redis URL";

/// The shared Redis the tests may use (never flushed, never reconfigured by them).
pub fn redis_url() -> String {
    std::env::var("IDEMGATE_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A key prefix no other test (or run) uses.
pub fn unique_prefix() -> String {
    format!(
        "idemgate-test:{}:{:016x}:",
        std::process::id(),
        idemgate_core::machine::nonce()
    )
}

/// Deletes every key under `prefix` (SCAN + DEL) when dropped.
#[derive(Debug)]
pub struct Cleanup {
    pub url: String,
    pub prefix: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Err(e) = delete_prefix(&self.url, &self.prefix) {
            eprintln!("cleanup of {} on {} failed: {e}", self.prefix, self.url);
        }
    }
}

/// Deletes every key under `prefix` on one server (blocking: runs in `Drop`).
pub fn delete_prefix(url: &str, prefix: &str) -> redis::RedisResult<usize> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_connection_with_timeout(Duration::from_secs(2))?;
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)?;
        if !keys.is_empty() {
            deleted += keys.len();
            redis::cmd("DEL").arg(&keys).query::<()>(&mut con)?;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}

/// A store-mode harness on its own prefix, cleaned up when the case ends.
#[derive(Debug)]
pub struct PrefixHarness {
    pub inner: RealTimeHarness<RedisStore>,
    pub _cleanup: Option<Cleanup>,
}

impl testkit::Harness for PrefixHarness {
    type Store = RedisStore;
    fn store(&self) -> RedisStore {
        self.inner.store.clone()
    }
    async fn advance(&self, d: Duration) {
        self.inner.advance(d).await;
    }
}

/// A store-mode harness on the shared Redis, or `None` (skip) when it is unreachable outside CI.
pub async fn standalone_harness() -> Option<PrefixHarness> {
    let url = redis_url();
    let prefix = unique_prefix();
    let mut cfg = RedisConfig::new(url.clone());
    cfg.key_prefix = prefix.clone();
    let store = testkit::require_service(RedisStore::connect(cfg).await, WHAT_TO_START)?;
    Some(PrefixHarness {
        inner: RealTimeHarness { store },
        _cleanup: Some(Cleanup { url, prefix }),
    })
}

/// The function libraries loaded on one server (`FUNCTION LIST`), by name.
pub fn libraries(con: &mut redis::Connection) -> Vec<String> {
    let list: Vec<redis::Value> = redis::cmd("FUNCTION").arg("LIST").query(con).unwrap();
    list.into_iter()
        .filter_map(|lib| {
            let fields: Vec<redis::Value> = redis::from_redis_value(lib).ok()?;
            let at = fields.iter().position(|f| {
                redis::from_redis_value::<String>(f.clone()).ok().as_deref() == Some("library_name")
            })?;
            redis::from_redis_value(fields.get(at + 1)?.clone()).ok()
        })
        .collect()
}

/// Whether `redis-server` can be started here; `Err` says what to install.
pub fn redis_server_available() -> Result<(), String> {
    match Command::new("redis-server").arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("redis-server --version failed: {}", out.status)),
        Err(e) => Err(format!("cannot run redis-server: {e}")),
    }
}

pub const WHAT_TO_INSTALL: &str =
    "install redis-server and redis-cli (Debian: apt-get install redis-server)";

/// A port `p` on loopback with `p` and `p + 10000` (a Cluster node's bus port) free.
pub fn free_port() -> u16 {
    let seed = u64::from(std::process::id()) ^ idemgate_core::machine::nonce();
    for i in 0..2_000u64 {
        let port = 20_000 + ((seed.wrapping_add(i.wrapping_mul(7_919))) % 10_000) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free loopback port pair found in 20000..40000");
}

/// The TLS side of a test server (`--tls-port`): its certificate, the authority it trusts for
/// client certificates, whether it asks clients for one, and the client certificate the
/// helpers themselves present.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// `--tls-auth-clients yes`: a client without a certificate signed by `ca_file` is refused.
    pub auth_clients: bool,
    /// The host name (or address) the helpers connect by: one the server's certificate holds.
    pub host: String,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl ServerTls {
    /// What a client that trusts `ca_file` and presents the client certificate needs.
    pub fn certificates(&self) -> redis::TlsCertificates {
        let read = |path: &PathBuf| {
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        };
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: read(&self.client_cert),
                client_key: read(&self.client_key),
            }),
            root_cert: Some(read(&self.ca_file)),
        }
    }

    /// `redis-server` arguments serving TLS only, on `port`.
    fn server_args(&self, port: u16) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        let auth = if self.auth_clients { "yes" } else { "no" };
        vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            path(&self.cert_file),
            "--tls-key-file".into(),
            path(&self.key_file),
            "--tls-ca-cert-file".into(),
            path(&self.ca_file),
            "--tls-auth-clients".into(),
            auth.into(),
        ]
    }

    /// `redis-cli` arguments to reach such a server.
    fn cli_args(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        vec![
            "--tls".into(),
            "--cacert".into(),
            path(&self.ca_file),
            "--cert".into(),
            path(&self.client_cert),
            "--key".into(),
            path(&self.client_key),
        ]
    }
}

/// A redis-server this test started, on a free loopback port, keeping nothing on disk.
///
/// It runs under a small shell watchdog that stops it (and removes its directory) as soon as
/// the test process is gone, so a crashed or killed test run leaves no server behind. Dropping
/// it shuts the server down.
#[derive(Debug)]
pub struct TestServer {
    pub port: u16,
    /// Whether it serves TLS only (`rediss://`).
    tls: bool,
    /// The helpers' own client (trusting the server's authority and presenting a client
    /// certificate, for a TLS server).
    client: redis::Client,
    watchdog: Child,
    dir: PathBuf,
}

impl TestServer {
    /// Starts one with `extra` arguments (`--maxmemory 2mb`, `--cluster-enabled yes`, ...) and
    /// waits until it answers PING.
    pub fn start(extra: &[&str]) -> Result<Self, String> {
        Self::launch(None, extra)
    }

    /// Starts one serving TLS only (`--port 0 --tls-port ...`), with `extra` arguments.
    pub fn start_tls(tls: &ServerTls, extra: &[&str]) -> Result<Self, String> {
        Self::launch(Some(tls), extra)
    }

    fn launch(tls: Option<&ServerTls>, extra: &[&str]) -> Result<Self, String> {
        redis_server_available()?;
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "idemgate-redis-test-{}-{port}-{:08x}",
            std::process::id(),
            idemgate_core::machine::nonce() as u32
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let watchdog_script = r#"
parent="$1"; dir="$2"; shift 2
redis-server "$@" &
rs=$!
while kill -0 "$rs" 2>/dev/null && kill -0 "$parent" 2>/dev/null; do sleep 0.2; done
kill "$rs" 2>/dev/null
wait "$rs" 2>/dev/null
rm -rf "$dir"
"#;
        let port_args = match tls {
            Some(tls) => tls.server_args(port),
            None => vec!["--port".to_owned(), port.to_string()],
        };
        let dir_s = dir.display().to_string();
        let mut args: Vec<&str> = port_args.iter().map(String::as_str).collect();
        args.extend([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            &dir_s,
            "--logfile",
            "redis.log",
        ]);
        args.extend_from_slice(extra);
        let client = match tls {
            Some(tls) => redis::Client::build_with_tls(
                format!("rediss://{}:{port}", tls.host),
                tls.certificates(),
            ),
            None => redis::Client::open(format!("redis://127.0.0.1:{port}")),
        }
        .map_err(|e| format!("a client for the test server: {e}"))?;
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(watchdog_script)
            .arg("sh")
            .arg(std::process::id().to_string())
            .arg(&dir_s)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawning redis-server: {e}"))?;
        let server = Self {
            port,
            tls: tls.is_some(),
            client,
            watchdog,
            dir,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ping = self
                .client
                .get_connection_with_timeout(Duration::from_millis(200))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            match ping {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    let log =
                        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                    return Err(format!(
                        "redis-server on port {} did not answer: {e}\n{log}",
                        self.port
                    ));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// A blocking connection, for test set-up and assertions.
    pub fn sync_conn(&self) -> redis::Connection {
        self.client
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connect to the test server")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // The watchdog sees the server gone, and removes its directory.
        if let Ok(mut con) = self
            .client
            .get_connection_with_timeout(Duration::from_secs(1))
        {
            let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut con);
        }
        // A server that could not be told (it never answered) is left to the watchdog, which
        // stops it when the test process is gone.
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.watchdog.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A 3-master Redis Cluster on loopback, started by the tests. Lives until the test process
/// exits (the watchdogs stop it then).
#[derive(Debug)]
pub struct TestCluster {
    pub nodes: Vec<TestServer>,
}

impl TestCluster {
    pub fn start() -> Result<Self, String> {
        Self::launch(None)
    }

    /// Three nodes serving TLS only, their cluster bus too (`--tls-cluster yes`).
    pub fn start_tls(tls: &ServerTls) -> Result<Self, String> {
        Self::launch(Some(tls))
    }

    fn launch(tls: Option<&ServerTls>) -> Result<Self, String> {
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ];
        if tls.is_some() {
            args.extend(["--tls-cluster", "yes"]);
        }
        let mut nodes = Vec::new();
        for _ in 0..3 {
            nodes.push(TestServer::launch(tls, &args)?);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(tls.map(ServerTls::cli_args).unwrap_or_default())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running redis-cli --cluster create: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cluster = Self { nodes };
        cluster.wait_ok()?;
        Ok(cluster)
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(TestServer::url).collect()
    }

    fn wait_ok(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &self.nodes {
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut node.sync_conn())
                    .map_err(|e| e.to_string())?;
                if info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384") {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("the cluster never became ok:\n{info}"));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

/// Cases on any store-mode harness beyond the conformance suite.
pub mod cases {
    use idemgate_core::HistoryRetention;
    use std::num::NonZeroU32;
    use std::time::Duration;

    use idemgate_core::testkit::Harness;
    use idemgate_core::{
        ClaimOutcome, ClaimRequest, ClaimStore, HistoryOutcome, HistoryQuery, Key, Stats,
    };

    fn key(source: &str, i: usize) -> Key {
        Key::parse(source, &format!("evt-{i}")).unwrap()
    }

    async fn claim<S: ClaimStore>(store: &S, key: Key, ttl: Duration) -> idemgate_core::ClaimToken {
        match store
            .claim(ClaimRequest::new(key, Duration::from_secs(60), ttl))
            .await
            .unwrap()
        {
            ClaimOutcome::Claimed { token, .. } => token,
            other => panic!("expected Claimed, got {other:?}"),
        }
    }

    /// Stats count live and expired records per source, and the history rows kept.
    pub async fn stats_count_records_and_history(
        h: &impl Harness<Store = idemgate_redis::RedisStore>,
    ) {
        let store = h.store();
        let long = Duration::from_secs(600);
        let empty = store.stats().await.unwrap();
        assert_eq!((empty.live, empty.expired, empty.history_rows), (0, 0, 0));
        assert!(empty.per_source.is_empty() && empty.oldest.is_none());

        for i in 0..3 {
            let token = claim(&store, key("counted", i), long).await;
            if i == 0 {
                store.complete(&token).await.unwrap();
            }
        }
        claim(&store, key("counted", 3), Duration::from_millis(300)).await;
        claim(&store, key("other", 0), long).await;
        // A duplicate adds a row, not a record.
        store
            .claim(ClaimRequest::new(
                key("other", 0),
                Duration::from_secs(60),
                long,
            ))
            .await
            .unwrap();
        h.advance(Duration::from_millis(400)).await;

        let stats = store.stats().await.unwrap();
        assert_eq!((stats.live, stats.expired), (4, 1), "{stats:?}");
        assert_eq!(stats.history_rows, 7, "5 claims, 1 completion, 1 duplicate");
        assert!(stats.oldest.is_some());
        let sources: Vec<_> = stats
            .per_source
            .iter()
            .map(|s| (s.source.as_str(), s.live, s.expired))
            .collect();
        assert_eq!(sources, [("counted", 3, 1), ("other", 1, 0)]);
    }

    /// The advisor's view comes from the source streams; purging trims them in bounded batches
    /// and leaves each event's own history alone.
    pub async fn streams_feed_observe_and_purge_trims_them(
        h: &impl Harness<Store = idemgate_redis::RedisStore>,
    ) {
        let store = h.store();
        let long = Duration::from_secs(600);
        for i in 0..3 {
            let token = claim(&store, key("streamed", i), long).await;
            store.complete(&token).await.unwrap();
        }
        h.advance(Duration::from_millis(150)).await;
        let dup = store
            .claim(ClaimRequest::new(
                key("streamed", 0),
                Duration::from_secs(60),
                long,
            ))
            .await
            .unwrap();
        assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");

        let obs = store.observe(Duration::from_secs(3_600)).await.unwrap();
        assert_eq!(obs.len(), 1, "{obs:?}");
        assert_eq!((obs[0].first_receipts, obs[0].deliveries), (3, 4));
        assert_eq!(obs[0].gaps.len(), 1);
        assert!(
            obs[0].gaps[0] >= Duration::from_millis(150),
            "{:?}",
            obs[0].gaps
        );

        // 6 entries (claims and completions) are older than 100 ms; the duplicate is not.
        let batch = NonZeroU32::new(4).unwrap();
        let retention = Duration::from_millis(100);
        assert_eq!(store.purge_history(retention, batch).await.unwrap(), 4);
        assert_eq!(store.purge_history(retention, batch).await.unwrap(), 2);
        assert_eq!(store.purge_history(retention, batch).await.unwrap(), 0);
        let obs = store.observe(Duration::from_secs(3_600)).await.unwrap();
        assert_eq!(
            (obs[0].first_receipts, obs[0].deliveries),
            (0, 1),
            "{obs:?}"
        );

        let view = store.lookup(&key("streamed", 0)).await.unwrap();
        let outcomes: Vec<_> = view.history.iter().map(|r| r.outcome).collect();
        assert_eq!(
            outcomes,
            [
                HistoryOutcome::Claimed,
                HistoryOutcome::Completed,
                HistoryOutcome::Duplicate
            ]
        );
    }
}
