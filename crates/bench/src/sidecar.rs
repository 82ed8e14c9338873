//! The `sidecar` scenario: what the `Idempotency-Key` sidecar (`[[api]]` of `idemgate serve`)
//! adds to a call of the API behind it, beside the same API called directly and behind
//! express-idempotency, same run, same upstream; and whether concurrent copies of one key create
//! one payment or more.
//!
//! - The upstream, in this process: `POST /v1/payments` answers 201 with a small JSON body after
//!   `--service-ms` (1 ms by default: a create that does some work, so that a key's copies race
//!   a request really in flight, not one already answered), and counts creations per
//!   `Idempotency-Key` it sees (each proxy forwards the client's key), and marks each answer it
//!   creates with `X-Created` (a kept answer given back to a retry has none).
//! - Three paths, each `--connections` (64) keep-alive HTTP/1.1 clients, each request a fresh key
//!   (a bare token, as stripe-node sends), `--requests` per path: (a) straight to the upstream;
//!   (b) `idemgate serve` with one `[[api]]` for the route, on a fresh SQLite store (a temporary
//!   data dir, the server's default settings; with `--store postgres`, a fresh schema of
//!   `--postgres` instead, dropped after), `--idemgate` or the release build beside this
//!   binary; (c) Express with express-idempotency's middleware and its default in-memory adapter,
//!   as its README sets it up, proxying the keyed POST to the same upstream
//!   (`tests/sidecar/express_proxy.mjs`, on the machine's `node`; `npm ci` on first use; one
//!   process unless `--express-workers`). With `--passthrough`, also (d) a second `idemgate
//!   serve` whose `[[api]]` does not key the route, so every request streams through it
//!   untouched: what the proxy hop costs without the store. Each path takes `--warmup` requests of their own
//!   first, unmeasured. With `--rate`, the requests are sent on a schedule instead (request i
//!   due i / rate seconds into the round) and each is timed from when it was due, so what the
//!   path adds is seen below its ceiling, a stall counted in full. `--rounds` (3) runs the
//!   paths in turn that many times; the table
//!   quotes each figure's median over the rounds, and every round is printed below it.
//! - Concurrency, same run: `--race-keys` keys (500), each sent by `--copies` (8) concurrent
//!   copies at once (each copy on a connection of its own), through (b) and (c): keys the
//!   upstream created more than once ("double creations"), and how the copies were answered
//!   (first answer: the upstream's own; replay: a kept answer; 409; other).
//!
//! Printed: the table, the rounds, the concurrency table, whether the targets are met (sidecar
//! p99 at most 2 ms over a direct call at 64 connections; no double creation), and
//! `sidecar.svg` in `--out`.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use bytes::Bytes;
use clap::ValueEnum;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use idemgate_chart::{BarLayout, Bars, Frame, Mark, Series};
use tokio::io::AsyncBufReadExt;

use crate::gateway::{
    free_port, idemgate_binary, node_version, npm_ci, parent, serve, stack, tree_peak_rss_kib,
};
use crate::report::{Latency, ms, table};

/// The target: the sidecar's p99 at most this much over a direct call, at 64 connections.
const P99_OVERHEAD: Duration = Duration::from_millis(2);
const TARGET_CONNECTIONS: usize = 64;
/// The keyed route.
const ROUTE: &str = "/v1/payments";
/// Every request's body (a key's copies are the same request).
const BODY: &str =
    r#"{"amount":4200,"currency":"eur","customer":"cus_bench","description":"bench"}"#;
/// The upstream's mark on an answer it created.
const CREATED: HeaderName = HeaderName::from_static("x-created");
/// How long the Express proxy may take to say it is ready.
const EXPRESS_READY: Duration = Duration::from_secs(30);

/// The store the sidecar keeps its keys in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SidecarStore {
    /// A fresh SQLite store in a temporary data dir (`--data-dir`).
    Sqlite,
    /// A fresh schema of `--postgres`, dropped after the run.
    Postgres,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Express {
    /// Run the express-idempotency path (skipped, with a note, when there is no node).
    On,
    /// Skip it.
    Off,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Concurrent keep-alive connections per path.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Requests per path and round, each with a new key.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Send at this many requests a second in all, on a schedule (request i is due i / rate
    /// seconds after the round starts, whether or not the one before was answered), and time
    /// each from when it was due, so a stall is counted in full; default: each connection sends
    /// its next request when the last is answered (as fast as the path goes).
    #[arg(long)]
    rate: Option<u32>,
    /// Rounds: the paths in turn, this many times; figures are the rounds' medians.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Requests each path takes first, unmeasured (connection pools, a JIT, the store's pages).
    #[arg(long, default_value_t = 2_000)]
    warmup: usize,
    /// The upstream's service time per create, in ms (0: it answers at once).
    #[arg(long, default_value_t = 1)]
    service_ms: u64,
    /// Keys sent by concurrent copies, through the sidecar and through express-idempotency.
    #[arg(long, default_value_t = 500)]
    race_keys: usize,
    /// Concurrent copies of each raced key, each on a connection of its own.
    #[arg(long, default_value_t = 8)]
    copies: usize,
    /// The idemgate binary (default: next to this one; build it with
    /// `cargo build --release -p idemgate-cli`).
    #[arg(long)]
    idemgate: Option<PathBuf>,
    /// The express-idempotency path.
    #[arg(long, value_enum, default_value = "on")]
    express: Express,
    /// Cluster workers of the Express proxy, each with its own in-memory adapter (what the
    /// default adapter amounts to on more than one core).
    #[arg(long, default_value_t = 1)]
    express_workers: usize,
    /// The node binary the Express proxy runs on (`npm` is taken from PATH).
    #[arg(long, default_value = "node")]
    node: PathBuf,
    /// Where the sidecar's fresh data dir is made (default: the system's temporary dir, on
    /// disk here; a tmpfs such as `/dev/shm` takes the disk's flushes out of the figures).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Also measure a second sidecar whose `[[api]]` does not key the route, so every request
    /// streams through it untouched: what the proxy hop alone costs, without the store.
    #[arg(long)]
    passthrough: bool,
    /// The sidecar's store.
    #[arg(long, value_enum, default_value = "sqlite")]
    store: SidecarStore,
    #[command(flatten)]
    postgres: crate::pg::Postgres,
    /// Where the chart goes.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

/// A path to the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Via {
    Direct,
    Sidecar,
    /// `idemgate serve` with an `[[api]]` whose routes do not name the route: every request
    /// streams through untouched (the proxy hop alone, no store).
    Passthrough,
    Express,
}

impl Via {
    fn label(self, args: &Args) -> String {
        match self {
            Self::Direct => "direct to the upstream".to_owned(),
            Self::Sidecar => format!(
                "idemgate serve [[api]], {}",
                match args.store {
                    SidecarStore::Sqlite => "SQLite",
                    SidecarStore::Postgres => "PostgreSQL",
                }
            ),
            Self::Passthrough => {
                "idemgate serve [[api]], route not keyed (proxy hop only)".to_owned()
            }
            Self::Express => format!(
                "Express + express-idempotency (in-memory), {} process{}",
                args.express_workers,
                if args.express_workers == 1 { "" } else { "es" }
            ),
        }
    }

    fn short(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Sidecar => "idemgate sidecar",
            Self::Passthrough => "sidecar, not keyed",
            Self::Express => "express-idempotency",
        }
    }

    /// The prefix of the keys sent through it.
    fn tag(self) -> &'static str {
        match self {
            Self::Direct => "direct",
            Self::Sidecar => "sidecar",
            Self::Passthrough => "passthrough",
            Self::Express => "express",
        }
    }
}

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Answer {
    /// The upstream's own answer (it created a payment for it).
    First,
    /// A kept answer, marked `Idempotent-Replayed: true`.
    Replay,
    /// A kept answer without that mark (express-idempotency sends none).
    UnmarkedReplay,
    /// 409: the key's first request still running.
    InFlight,
    /// Any other status.
    Status(u16),
    /// No answer: the connection failed.
    Failed,
}

impl Answer {
    fn of(status: u16, created: bool, replayed: bool) -> Self {
        match status {
            200..=299 if created => Self::First,
            200..=299 if replayed => Self::Replay,
            200..=299 => Self::UnmarkedReplay,
            409 => Self::InFlight,
            other => Self::Status(other),
        }
    }

    fn name(self) -> String {
        match self {
            Self::First => "first answer".to_owned(),
            Self::Replay => "replay".to_owned(),
            Self::UnmarkedReplay => "replay (unmarked)".to_owned(),
            Self::InFlight => "409".to_owned(),
            Self::Status(s) => format!("HTTP {s}"),
            Self::Failed => "connection failed".to_owned(),
        }
    }
}

/// Answers counted by kind.
type Answers = BTreeMap<Answer, usize>;

fn describe(answers: &Answers) -> String {
    answers
        .iter()
        .map(|(a, n)| format!("{} {n}", a.name()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The upstream's count of what it created, per key.
#[derive(Debug, Default)]
struct Upstream {
    per_key: Mutex<HashMap<String, u32>>,
    created: AtomicU64,
    /// TCP connections it accepted.
    connections: AtomicU64,
}

/// What the upstream created for the keys of one prefix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Created {
    /// Keys created at least once.
    keys: usize,
    /// Creations, repeats included.
    creations: usize,
    /// Keys created more than once: double creations.
    doubled: usize,
    /// The most creations of one key.
    most: u32,
}

impl Created {
    fn describe(&self, sent: usize) -> String {
        let mut words = vec![format!("{} of {sent} keys", self.keys)];
        if self.doubled == 0 {
            words.push("none twice".to_owned());
        } else {
            words.push(format!(
                "{} more than once (up to {} times; {} creations)",
                self.doubled, self.most, self.creations
            ));
        }
        words.join(", ")
    }
}

impl Upstream {
    /// Counts a creation for `key`; its number.
    fn create(&self, key: &str) -> u64 {
        *self
            .per_key
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default() += 1;
        self.created.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn created(&self, prefix: &str) -> Created {
        let per_key = self
            .per_key
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut c = Created::default();
        for &n in per_key
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
        {
            c.keys += 1;
            c.creations += n as usize;
            c.doubled += usize::from(n > 1);
            c.most = c.most.max(n);
        }
        c
    }
}

/// The upstream: `POST /v1/payments` creates a payment after `service`, 201.
async fn upstream(service: Duration) -> anyhow::Result<(SocketAddr, Arc<Upstream>)> {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let up = Arc::new(Upstream::default());
    let listener = listener.tap_io({
        let up = up.clone();
        move |tcp| {
            let _ = tcp.set_nodelay(true);
            up.connections.fetch_add(1, Ordering::Relaxed);
        }
    });
    let app = axum::Router::new().route(
        ROUTE,
        axum::routing::post({
            let up = up.clone();
            move |headers: HeaderMap, _body: Bytes| {
                let up = up.clone();
                async move {
                    let key = headers
                        .get("idempotency-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    let n = up.create(key);
                    if !service.is_zero() {
                        tokio::time::sleep(service).await;
                    }
                    (
                        StatusCode::CREATED,
                        [
                            (header::CONTENT_TYPE, HeaderValue::from_static("application/json")),
                            (CREATED, HeaderValue::from(n)),
                        ],
                        format!(
                            r#"{{"id":"pay_{n}","object":"payment","amount":4200,"currency":"eur","status":"succeeded"}}"#
                        ),
                    )
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, up))
}

/// One keep-alive HTTP/1.1 connection of a client.
struct Client {
    addr: SocketAddr,
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Client {
    async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Self { addr, sender })
    }

    async fn try_post(&mut self, key: &str) -> anyhow::Result<Answer> {
        let req = Request::post(ROUTE)
            .header(header::HOST, "bench")
            .header(header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let created = resp.headers().contains_key(CREATED);
        let replayed = resp
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v.as_bytes() == b"true");
        resp.into_body().collect().await?;
        Ok(Answer::of(status, created, replayed))
    }

    /// POSTs `BODY` under `key`; a connection that fails is counted and opened again.
    async fn post(&mut self, key: &str) -> anyhow::Result<Answer> {
        match self.try_post(key).await {
            Ok(answer) => Ok(answer),
            Err(_) => {
                *self = Self::open(self.addr)
                    .await
                    .context("opening a connection again after one failed")?;
                Ok(Answer::Failed)
            }
        }
    }
}

/// What one path was sent in one round, and how it answered.
#[derive(Debug, Clone)]
struct Sent {
    rps: f64,
    latency: Latency,
    answers: Answers,
    /// CPU time per request, µs: of the proxy's processes, and of this one (the clients and the
    /// upstream).
    cpu: Cpu,
    /// TCP connections the upstream accepted meanwhile.
    upstream_connections: u64,
}

/// CPU time per request, µs.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    proxy: Option<f64>,
    bench: f64,
}

/// CPU time (user + system) of `pid`, and of its children when `children`, so far, in ticks of
/// 10 ms (`USER_HZ`).
fn cpu_ticks(pid: u32, children: bool) -> u64 {
    let own = |pid: u32| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
                // utime and stime, fields 14 and 15 of the whole line.
                Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
            })
            .unwrap_or(0)
    };
    let mut ticks = own(pid);
    if !children {
        return ticks;
    }
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            if let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok())
                && parent(child) == Some(pid)
            {
                ticks += own(child);
            }
        }
    }
    ticks
}

/// `n` requests, each under a new key `{prefix}{i}`, over `connections` connections, to a
/// proxy whose process is `proxy` (none: the upstream itself); at `rate` a second on a
/// schedule, each timed from when it was due, or each connection's next when its last is
/// answered.
async fn load(
    addr: SocketAddr,
    proxy: Option<u32>,
    prefix: &str,
    n: usize,
    connections: usize,
    rate: Option<u32>,
) -> anyhow::Result<Sent> {
    let next = Arc::new(AtomicUsize::new(0));
    let cpu_before = (
        proxy.map(|pid| cpu_ticks(pid, true)),
        // Not its children: the proxies are.
        cpu_ticks(std::process::id(), false),
    );
    // The connections first, so that the schedule starts with every one open.
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        clients.push(Client::open(addr).await?);
    }
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let (next, prefix) = (next.clone(), prefix.to_owned());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, anyhow::Error>(seen);
                    }
                    let key = format!("{prefix}{i}");
                    let from = match rate {
                        Some(rate) => {
                            let due = started + Duration::from_secs_f64(i as f64 / f64::from(rate));
                            tokio::time::sleep_until(due.into()).await;
                            due
                        }
                        None => Instant::now(),
                    };
                    let answer = client.post(&key).await?;
                    seen.push((from.elapsed(), answer));
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(n);
    let mut answers = Answers::new();
    for t in tasks {
        for (latency, answer) in t.await?? {
            latencies.push(latency);
            *answers.entry(answer).or_default() += 1;
        }
    }
    let took = started.elapsed();
    // Ticks of 10 ms, per request, in µs.
    let per_request = |ticks: u64| ticks as f64 * 10_000.0 / n as f64;
    let cpu = Cpu {
        proxy: proxy
            .zip(cpu_before.0)
            .map(|(pid, before)| per_request(cpu_ticks(pid, true).saturating_sub(before))),
        bench: per_request(cpu_ticks(std::process::id(), false).saturating_sub(cpu_before.1)),
    };
    Ok(Sent {
        rps: n as f64 / took.as_secs_f64(),
        latency: Latency::of(&mut latencies),
        answers,
        cpu,
        upstream_connections: 0,
    })
}

/// `keys` keys `{prefix}{i}`, each sent by `copies` concurrent copies at once, each on a
/// connection of its own; `connections / copies` keys at a time.
async fn race(
    addr: SocketAddr,
    prefix: &str,
    keys: usize,
    copies: usize,
    connections: usize,
) -> anyhow::Result<Answers> {
    let next = Arc::new(AtomicUsize::new(0));
    let groups = (connections / copies).max(1);
    let tasks: Vec<_> = (0..groups)
        .map(|_| {
            let (next, prefix) = (next.clone(), prefix.to_owned());
            tokio::spawn(async move {
                let mut clients = Vec::with_capacity(copies);
                for _ in 0..copies {
                    clients.push(Client::open(addr).await?);
                }
                let mut answers = Answers::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= keys {
                        return Ok::<_, anyhow::Error>(answers);
                    }
                    let key: Arc<str> = format!("{prefix}{i}").into();
                    let mut set = tokio::task::JoinSet::new();
                    for mut client in clients.drain(..) {
                        let key = key.clone();
                        set.spawn(async move {
                            let answer = client.post(&key).await;
                            (client, answer)
                        });
                    }
                    while let Some(joined) = set.join_next().await {
                        let (client, answer) = joined?;
                        clients.push(client);
                        *answers.entry(answer?).or_default() += 1;
                    }
                }
            })
        })
        .collect();
    let mut answers = Answers::new();
    for t in tasks {
        for (a, n) in t.await?? {
            *answers.entry(a).or_default() += n;
        }
    }
    Ok(answers)
}

/// A proxy in its own process.
struct Proxy {
    via: Via,
    addr: SocketAddr,
    child: tokio::process::Child,
    pid: u32,
    /// Keeps the sidecar's data dir until the end.
    _dir: Option<tempfile::TempDir>,
}

impl Proxy {
    fn peak_rss(&self) -> (u64, usize) {
        tree_peak_rss_kib(self.pid)
    }

    async fn stop(mut self) {
        // End of input: the Express proxy exits; the gateway is killed.
        drop(self.child.stdin.take());
        if self.via == Via::Express
            && tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .is_ok()
        {
            return;
        }
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// `idemgate serve` with one `[[api]]` for the route in front of `up`, on a fresh store: SQLite,
/// or `pg_schema` of the `--postgres` server. With `keyed` false its routes name another route,
/// so the measured one streams through.
async fn sidecar(
    bin: &Path,
    up: SocketAddr,
    args: &Args,
    pg_schema: Option<&str>,
    keyed: bool,
) -> anyhow::Result<Proxy> {
    let dir = match args.data_dir.as_deref() {
        Some(parent) => tempfile::tempdir_in(parent)
            .with_context(|| format!("a data dir in {}", parent.display()))?,
        None => tempfile::tempdir()?,
    };
    let (listen, api) = (free_port()?, free_port()?);
    let store = match pg_schema {
        None => format!(
            "[store]\nkind = \"sqlite\"\npath = {:?}\n",
            dir.path().join("data").display().to_string()
        ),
        Some(schema) => format!(
            "[store]\nkind = \"postgres\"\nurl = {:?}\n[store.postgres]\nschema = {schema:?}\n",
            args.postgres.url
        ),
    };
    let config = format!(
        "listen = \"{listen}\"\n{store}\n\
         [[api]]\nname = \"payments\"\nlisten = \"{api}\"\nupstream = \"http://{up}\"\n\
         routes = [\"POST {route}\"]\nretry_window = \"24h\"\n",
        route = if keyed { ROUTE } else { "/v1/not-this-one" },
    );
    let path = dir.path().join("idemgate.toml");
    std::fs::write(&path, config)?;
    let child = serve(bin, &path, listen).await?;
    let pid = child.id().context("the gateway exited at once")?;
    let listening = async {
        while tokio::net::TcpStream::connect(api).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), listening)
        .await
        .with_context(|| format!("the sidecar did not listen on {api} within 20 s"))?;
    Ok(Proxy {
        via: if keyed {
            Via::Sidecar
        } else {
            Via::Passthrough
        },
        addr: api,
        child,
        pid,
        _dir: Some(dir),
    })
}

/// The Node harness's directory, in the repository's source tree.
fn harness_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/sidecar")
}

/// The Express proxy (`express_proxy.mjs`) in front of `up`.
async fn express(args: &Args, up: SocketAddr) -> anyhow::Result<Proxy> {
    let dir = harness_dir();
    npm_ci(
        &dir,
        "to install express-idempotency",
        "--express off skips express-idempotency",
    )
    .await?;
    let addr = free_port()?;
    let mut child = tokio::process::Command::new(&args.node)
        .arg("express_proxy.mjs")
        .arg(format!("http://{up}"))
        .arg(addr.port().to_string())
        .arg(args.express_workers.to_string())
        .current_dir(&dir)
        .env("NODE_ENV", "production")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {} express_proxy.mjs", args.node.display()))?;
    let pid = child.id().context("the Express proxy exited at once")?;
    let stdout = child.stdout.take().context("the Express proxy's stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let ready = async {
        while let Some(line) = lines.next_line().await? {
            if line.starts_with("ready") {
                return Ok(());
            }
        }
        bail!("the Express proxy exited before it was ready (its words are above)")
    };
    tokio::time::timeout(EXPRESS_READY, ready)
        .await
        .with_context(|| {
            format!(
                "the Express proxy did not say it was ready within {} s",
                EXPRESS_READY.as_secs()
            )
        })??;
    Ok(Proxy {
        via: Via::Express,
        addr,
        child,
        pid,
        _dir: None,
    })
}

/// One path's results over the whole run.
#[derive(Debug)]
struct PathRun {
    via: Via,
    rounds: Vec<Sent>,
    answers: Answers,
    /// What the upstream created for its measured keys.
    created: Created,
    /// Peak RSS of its proxy (summed over its processes), and how many processes.
    peak_rss: Option<(u64, usize)>,
    /// The concurrency test: its answers, and what the upstream created.
    race: Option<(Answers, Created)>,
}

/// The median of `xs` (the lower middle one of an even count).
fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get((xs.len().max(1) - 1) / 2).copied().unwrap_or(0.0)
}

fn median_ms(xs: impl Iterator<Item = Duration>) -> f64 {
    median(xs.map(|d| d.as_secs_f64() * 1000.0).collect())
}

impl PathRun {
    fn rps(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.rps).collect())
    }

    fn cpu_proxy(&self) -> Option<f64> {
        let xs: Vec<f64> = self.rounds.iter().filter_map(|r| r.cpu.proxy).collect();
        (!xs.is_empty()).then(|| median(xs))
    }

    fn cpu_bench(&self) -> f64 {
        median(self.rounds.iter().map(|r| r.cpu.bench).collect())
    }

    fn at(&self, q: impl Fn(&Latency) -> Duration) -> f64 {
        median_ms(self.rounds.iter().map(|r| q(&r.latency)))
    }

    /// Its p-quantile over the direct path's, round by round: the median difference (ms) and
    /// the median ratio.
    fn over(&self, direct: &PathRun, q: impl Fn(&Latency) -> Duration) -> (f64, f64) {
        let pairs = self.rounds.iter().zip(&direct.rounds);
        let diff = median(
            pairs
                .clone()
                .map(|(a, b)| (q(&a.latency).as_secs_f64() - q(&b.latency).as_secs_f64()) * 1e3)
                .collect(),
        );
        let ratio = median(
            pairs
                .map(|(a, b)| q(&a.latency).as_secs_f64() / q(&b.latency).as_secs_f64().max(1e-9))
                .collect(),
        );
        (diff, ratio)
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.connections > 0, "--connections must be at least 1");
    anyhow::ensure!(args.requests > 0, "--requests must be at least 1");
    anyhow::ensure!(args.rounds > 0, "--rounds must be at least 1");
    anyhow::ensure!(
        args.rate != Some(0),
        "--rate must be at least 1 request a second"
    );
    anyhow::ensure!(args.copies > 1, "--copies must be at least 2");
    anyhow::ensure!(
        args.express_workers > 0,
        "--express-workers must be at least 1"
    );
    let bin = idemgate_binary(args.idemgate.as_deref())?;
    let service = Duration::from_millis(args.service_ms);
    let (up, upstream) = upstream(service).await?;
    eprintln!(
        "sidecar: the upstream on {up}, {} ms a create",
        args.service_ms
    );

    // A fresh schema per sidecar on PostgreSQL, dropped at the end.
    let schemas: Vec<String> = match args.store {
        SidecarStore::Sqlite => Vec::new(),
        SidecarStore::Postgres => ["bench_sidecar", "bench_passthrough"]
            .iter()
            .map(|p| crate::gateway::schema(p))
            .collect(),
    };
    let result = with_proxies(&args, &bin, up, &upstream, &schemas).await;
    for schema in &schemas {
        if let Err(e) = crate::gateway::drop_schema(&args.postgres.url, schema).await {
            eprintln!("sidecar: could not drop schema {schema}: {e:#}");
        }
    }
    result
}

/// Starts the proxies, measures every path through them, stops them, and prints.
async fn with_proxies(
    args: &Args,
    bin: &Path,
    up: SocketAddr,
    upstream: &Upstream,
    schemas: &[String],
) -> anyhow::Result<()> {
    let schema = |i: usize| schemas.get(i).map(String::as_str);
    let mut proxies = vec![sidecar(bin, up, args, schema(0), true).await?];
    if args.passthrough {
        proxies.push(sidecar(bin, up, args, schema(1), false).await?);
    }
    let skipped = match args.express {
        Express::Off => Some("skipped (--express off)".to_owned()),
        Express::On => match node_version(&args.node).await {
            None => Some(format!(
                "skipped: no node to run it ({} --version did not answer)",
                args.node.display()
            )),
            Some(version) => {
                eprintln!("sidecar: express-idempotency on node {version}");
                proxies.push(express(args, up).await?);
                None
            }
        },
    };
    let mut paths: Vec<(Via, SocketAddr, Option<u32>)> = vec![(Via::Direct, up, None)];
    paths.extend(proxies.iter().map(|p| (p.via, p.addr, Some(p.pid))));

    let result = measure(args, &paths, upstream).await;
    let mut runs = match result {
        Ok(runs) => runs,
        Err(e) => {
            for p in proxies {
                p.stop().await;
            }
            return Err(e);
        }
    };
    for p in proxies {
        if let Some(run) = runs.iter_mut().find(|r| r.via == p.via) {
            run.peak_rss = Some(p.peak_rss());
        }
        p.stop().await;
    }
    print(args, &runs, skipped.as_deref());
    std::fs::create_dir_all(&args.out)?;
    let chart = args.out.join("sidecar.svg");
    std::fs::write(&chart, draw(&runs, args)?)?;
    println!("\nchart: {}", chart.display());
    Ok(())
}

/// Warm-up, the rounds, then the concurrency test through each proxy.
async fn measure(
    args: &Args,
    paths: &[(Via, SocketAddr, Option<u32>)],
    upstream: &Upstream,
) -> anyhow::Result<Vec<PathRun>> {
    for &(via, addr, pid) in paths {
        eprintln!(
            "sidecar: warming {} up ({} requests)",
            via.short(),
            args.warmup
        );
        load(
            addr,
            pid,
            &format!("{}-warm-", via.tag()),
            args.warmup,
            args.connections,
            None,
        )
        .await
        .with_context(|| format!("warming {} up", via.short()))?;
    }
    let mut runs: Vec<PathRun> = paths
        .iter()
        .map(|&(via, _, _)| PathRun {
            via,
            rounds: Vec::new(),
            answers: Answers::new(),
            created: Created::default(),
            peak_rss: None,
            race: None,
        })
        .collect();
    for round in 0..args.rounds {
        for (&(via, addr, pid), run) in paths.iter().zip(runs.iter_mut()) {
            let opened = upstream.connections.load(Ordering::Relaxed);
            let mut sent = load(
                addr,
                pid,
                &format!("{}-r{round}-", via.tag()),
                args.requests,
                args.connections,
                args.rate,
            )
            .await
            .with_context(|| format!("round {} through {}", round + 1, via.short()))?;
            sent.upstream_connections = upstream.connections.load(Ordering::Relaxed) - opened;
            eprintln!(
                "sidecar: round {}/{} {}: {:.0} req/s, p50 {} ms, p99 {} ms",
                round + 1,
                args.rounds,
                via.short(),
                sent.rps,
                ms(sent.latency.p50),
                ms(sent.latency.p99)
            );
            for (a, n) in &sent.answers {
                *run.answers.entry(*a).or_default() += n;
            }
            run.rounds.push(sent);
        }
    }
    for (&(via, addr, _), run) in paths.iter().zip(runs.iter_mut()) {
        // Every measured key once: the rounds' prefixes are `{tag}-r`.
        run.created = upstream.created(&format!("{}-r", via.tag()));
        if matches!(via, Via::Direct | Via::Passthrough) {
            continue;
        }
        eprintln!(
            "sidecar: {} keys x {} concurrent copies through {}",
            args.race_keys,
            args.copies,
            via.short()
        );
        let prefix = format!("race-{}-", via.tag());
        let answers = race(addr, &prefix, args.race_keys, args.copies, args.connections)
            .await
            .with_context(|| format!("racing copies through {}", via.short()))?;
        run.race = Some((answers, upstream.created(&prefix)));
    }
    Ok(runs)
}

fn print(args: &Args, runs: &[PathRun], skipped: Option<&str>) {
    let Some(direct) = runs.iter().find(|r| r.via == Via::Direct) else {
        return;
    };
    let sent = args.requests * args.rounds;
    let race_sent = args.race_keys;
    let pace = match args.rate {
        Some(rate) => format!(
            "sent at {rate} requests a second in all on a schedule, each timed from when it was due"
        ),
        None => "each connection sending its next request when the last is answered".to_owned(),
    };
    println!(
        "\nPOST {ROUTE}, each request a new Idempotency-Key, {} keep-alive connections ({pace}), {} requests per path in each of {} rounds \
         (the paths in turn), after {} unmeasured warm-up requests per path; the upstream takes {} ms a create. \
         Figures are the medians of the rounds; overheads are taken round by round against the direct path's.\n",
        args.connections, args.requests, args.rounds, args.warmup, args.service_ms
    );
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let dash = || "-".to_owned();
            let over = |q: fn(&Latency) -> Duration| {
                if r.via == Via::Direct {
                    dash()
                } else {
                    let (d, x) = r.over(direct, q);
                    format!("{d:+.2} ms ({x:.2}x)")
                }
            };
            vec![
                r.via.label(args),
                format!("{:.0}", r.rps()),
                format!("{:.2}", r.at(|l| l.p50)),
                format!("{:.2}", r.at(|l| l.p99)),
                format!("{:.2}", r.at(|l| l.p999)),
                ms(r.rounds
                    .iter()
                    .map(|s| s.latency.max)
                    .max()
                    .unwrap_or_default()),
                over(|l| l.p50),
                over(|l| l.p99),
                r.cpu_proxy().map_or_else(dash, |us| format!("{us:.0}")),
                format!("{:.0}", r.cpu_bench()),
                r.race
                    .as_ref()
                    .map_or_else(dash, |(_, c)| format!("{} of {race_sent}", c.doubled)),
                r.peak_rss.map_or_else(dash, |(kib, n)| {
                    if n > 1 {
                        format!("{:.1} ({n} processes)", kib as f64 / 1024.0)
                    } else {
                        format!("{:.1}", kib as f64 / 1024.0)
                    }
                }),
                describe(&r.answers),
                r.created.describe(sent),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "path",
                "req/s",
                "p50 ms",
                "p99 ms",
                "p999 ms",
                "max ms",
                "p50 over direct",
                "p99 over direct",
                "proxy CPU µs/req",
                "bench CPU µs/req",
                "double creations (raced keys)",
                "peak RSS MiB",
                "answers",
                "upstream creations"
            ],
            &rows
        )
    );
    println!(
        "\nproxy CPU: user + system time of the proxy's processes per request; bench CPU: of this process \
         (the {} clients and the upstream). The machine has {} cores for all of them: a path's \
         ceiling is about cores / (proxy + bench CPU per request).{}",
        args.connections,
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        match args.store {
            SidecarStore::Postgres => " The sidecar's store is a fresh schema of --postgres, with the server's own settings and no maintenance.".to_owned(),
            SidecarStore::Sqlite => args.data_dir.as_ref().map_or_else(String::new, |d| format!(
                " The sidecar's data dir is in {} (--data-dir).",
                d.display()
            )),
        }
    );
    if let Some(why) = skipped {
        println!("\nexpress-idempotency: {why}.");
    }

    println!(
        "\nConcurrency, same run: {} keys, each sent by {} concurrent copies at once (each on a connection of its own, {} keys at a time):\n",
        args.race_keys,
        args.copies,
        (args.connections / args.copies).max(1)
    );
    let rows: Vec<Vec<String>> = runs
        .iter()
        .filter_map(|r| {
            let (answers, created) = r.race.as_ref()?;
            let n = |a: &[Answer]| -> usize { a.iter().filter_map(|a| answers.get(a)).sum() };
            let other: Answers = answers
                .iter()
                .filter(|(a, _)| matches!(a, Answer::Status(_) | Answer::Failed))
                .map(|(a, n)| (*a, *n))
                .collect();
            Some(vec![
                r.via.label(args),
                format!("{}", n(&[Answer::First])),
                format!("{}", n(&[Answer::Replay, Answer::UnmarkedReplay])),
                format!("{}", n(&[Answer::InFlight])),
                if other.is_empty() {
                    "0".to_owned()
                } else {
                    describe(&other)
                },
                format!("{}", created.doubled),
                created.describe(args.race_keys),
            ])
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "path",
                "first answer",
                "replay",
                "409",
                "other",
                "double creations",
                "upstream creations"
            ],
            &rows
        )
    );
    println!(
        "\nfirst answer: the upstream's own (it created a payment for it); replay: a kept answer given back \
         (the sidecar marks it Idempotent-Replayed: true, express-idempotency does not); \
         409: the key's first request still running."
    );

    println!("\nEach round:\n");
    let rows: Vec<Vec<String>> = runs
        .iter()
        .flat_map(|r| {
            r.rounds.iter().enumerate().map(move |(i, s)| {
                vec![
                    r.via.short().to_owned(),
                    format!("{}", i + 1),
                    format!("{:.0}", s.rps),
                    ms(s.latency.p50),
                    ms(s.latency.p99),
                    ms(s.latency.p999),
                    ms(s.latency.max),
                    s.cpu
                        .proxy
                        .map_or_else(|| "-".to_owned(), |us| format!("{us:.0}")),
                    format!("{:.0}", s.cpu.bench),
                    format!("{}", s.upstream_connections),
                ]
            })
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "path",
                "round",
                "req/s",
                "p50 ms",
                "p99 ms",
                "p999 ms",
                "max ms",
                "proxy CPU µs/req",
                "bench CPU µs/req",
                "upstream connections opened"
            ],
            &rows
        )
    );
    println!();
    if args.connections != TARGET_CONNECTIONS {
        println!(
            "(The targets are set at {TARGET_CONNECTIONS} connections; this run used {}.)",
            args.connections
        );
    }
    for line in verdicts(runs, direct, args) {
        println!("{line}");
    }
}

fn verdicts(runs: &[PathRun], direct: &PathRun, args: &Args) -> Vec<String> {
    let mark = |ok: bool| if ok { "met" } else { "missed" };
    let mut out = Vec::new();
    for r in runs {
        match r.via {
            Via::Direct => {}
            Via::Passthrough => {
                let (d, _) = r.over(direct, |l| l.p99);
                out.push(format!(
                    "{}: p99 {d:+.2} ms over a direct call (no target: what the proxy hop costs without the store)",
                    r.via.label(args)
                ));
            }
            Via::Sidecar => {
                let (d, _) = r.over(direct, |l| l.p99);
                let pace = args
                    .rate
                    .map_or_else(String::new, |rate| format!(" at {rate} req/s"));
                out.push(format!(
                    "{}: p99 {d:+.2} ms over a direct call{pace} (median of {} rounds); target at most +{} ms: {}",
                    r.via.label(args),
                    r.rounds.len(),
                    P99_OVERHEAD.as_millis(),
                    mark(d <= P99_OVERHEAD.as_secs_f64() * 1e3)
                ));
                if let Some((_, c)) = &r.race {
                    out.push(format!(
                        "{}: {} double creations of {} raced keys; target 0: {}",
                        r.via.label(args),
                        c.doubled,
                        args.race_keys,
                        mark(c.doubled == 0)
                    ));
                }
            }
            Via::Express => {
                if let Some((_, c)) = &r.race {
                    out.push(format!(
                        "{}: {} double creations of {} raced keys (no target: the comparison)",
                        r.via.label(args),
                        c.doubled,
                        args.race_keys
                    ));
                }
            }
        }
        let sent = args.requests * args.rounds;
        if r.created.keys != sent || r.created.doubled != 0 {
            out.push(format!(
                "{}: the upstream did not create each measured key once: {}",
                r.via.label(args),
                r.created.describe(sent)
            ));
        }
    }
    out
}

/// p50 and p99 per path, and req/s, one chart above the other.
fn draw(runs: &[PathRun], args: &Args) -> anyhow::Result<String> {
    let categories: Vec<String> = runs.iter().map(|r| r.via.short().to_owned()).collect();
    let load = format!(
        "POST {ROUTE}, a new key each, {} connections, upstream {} ms",
        args.connections, args.service_ms
    );
    let round = |x: f64| (x * 100.0).round() / 100.0;
    let latency = Bars::new(
        Frame::new(
            "sidecar-latency",
            &format!("Latency, ms (lower is better): {load}"),
        ),
        categories.clone(),
        "path",
        "ms",
    )
    .layout(BarLayout::Grouped)
    .series(Series::new(
        "p50",
        runs.iter().map(|r| round(r.at(|l| l.p50))),
    ))
    .series(Series::new(
        "p99",
        runs.iter().map(|r| round(r.at(|l| l.p99))),
    ))
    .y_mark(Mark::new(
        runs.iter()
            .find(|r| r.via == Via::Direct)
            .map_or(0.0, |d| d.at(|l| l.p99))
            + P99_OVERHEAD.as_secs_f64() * 1e3,
        "direct p99 + 2 ms",
    ))
    .render();
    let rps = Bars::new(
        Frame::new("sidecar-rps", "Requests per second (higher is better)"),
        categories,
        "path",
        "req/s",
    )
    .layout(BarLayout::Grouped)
    .series(Series::new("req/s", runs.iter().map(|r| r.rps().round())))
    .render();
    let summary: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms",
                r.via.short(),
                r.rps(),
                r.at(|l| l.p50),
                r.at(|l| l.p99)
            )
        })
        .collect();
    stack(
        "sidecar",
        &format!(
            "The Idempotency-Key sidecar beside a direct call and express-idempotency: {load}"
        ),
        &format!("{load}. {}.", summary.join("; ")),
        &[latency, rps],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_told_apart_by_the_upstreams_mark_and_the_replay_header() {
        assert_eq!(Answer::of(201, true, false), Answer::First);
        assert_eq!(Answer::of(201, false, true), Answer::Replay);
        assert_eq!(Answer::of(201, false, false), Answer::UnmarkedReplay);
        assert_eq!(Answer::of(409, false, false), Answer::InFlight);
        assert_eq!(Answer::of(502, false, false), Answer::Status(502));
    }

    #[test]
    fn the_upstream_counts_double_creations_per_prefix() {
        let up = Upstream::default();
        for key in ["race-a-1", "race-a-1", "race-a-2", "race-b-1", "race-a-1"] {
            up.create(key);
        }
        let a = up.created("race-a-");
        assert_eq!(
            a,
            Created {
                keys: 2,
                creations: 4,
                doubled: 1,
                most: 3
            }
        );
        assert_eq!(
            a.describe(2),
            "2 of 2 keys, 1 more than once (up to 3 times; 4 creations)"
        );
        assert_eq!(up.created("race-b-").describe(1), "1 of 1 keys, none twice");
    }

    #[test]
    fn medians_take_the_middle_round() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.0);
        assert_eq!(median(Vec::new()), 0.0);
    }
}
