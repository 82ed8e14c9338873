//! The `gateway` scenario: signed Stripe deliveries against `idemgate serve`.
//!
//! The gateway runs as its own process (so its peak RSS is its own), forwarding to a downstream in
//! this process that answers 200 at once. 64 keep-alive connections send pre-signed deliveries,
//! 90% new and 10% duplicates of earlier ones. Beside it, in the same run, the raw claim
//! throughput of the same kind of store at the same concurrency.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use bytes::Bytes;
use clap::ValueEnum;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};

use crate::report::{Latency, ms, table};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreArg {
    Sqlite,
    Postgres,
    Both,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which store the gateway runs on.
    #[arg(long, value_enum, default_value = "both")]
    store: StoreArg,
    #[command(flatten)]
    postgres: crate::pg::Postgres,
    /// Concurrent keep-alive connections.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Deliveries to send.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Share of deliveries that repeat an earlier event.
    #[arg(long, default_value_t = 0.1)]
    duplicates: f64,
    /// The idemgate binary (default: next to this one; build it with
    /// `cargo build --release -p idemgate-cli`).
    #[arg(long)]
    idemgate: Option<PathBuf>,
}

pub(crate) const SECRET: &str = "whsec_bench_secret";

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bin = match &args.idemgate {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("idemgate"),
    };
    if !bin.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p idemgate-cli`, or pass --idemgate",
            bin.display()
        );
    }
    let stores: &[&str] = match args.store {
        StoreArg::Sqlite => &["sqlite"],
        StoreArg::Postgres => &["postgres"],
        StoreArg::Both => &["sqlite", "postgres"],
    };
    let mut rows = Vec::new();
    for store in stores {
        let raw = raw_claims(store, &args).await?;
        let gw = gateway(store, &bin, &args).await?;
        rows.push(vec![
            (*store).to_owned(),
            format!("{:.0}", gw.rps),
            ms(gw.latency.p50),
            ms(gw.latency.p99),
            ms(gw.latency.max),
            format!("{:.0}", raw),
            format!("{:.2}", gw.rps / raw),
            format!("{:.1}", gw.peak_rss_kib as f64 / 1024.0),
            format!(
                "{}/{}/{}/{}",
                gw.forwarded, gw.duplicates, gw.in_flight, gw.other
            ),
        ]);
    }
    println!(
        "\nSigned Stripe deliveries, {} connections, {} requests ({:.0}% duplicates), downstream answering at once:\n",
        args.connections,
        args.requests,
        args.duplicates * 100.0
    );
    print!(
        "{}",
        table(
            &[
                "store",
                "gateway req/s",
                "p50 ms",
                "p99 ms",
                "max ms",
                "raw claims/s",
                "ratio",
                "peak RSS MiB",
                "forwarded/duplicate/in-flight/other"
            ],
            &rows
        )
    );
    Ok(())
}

/// A PostgreSQL schema name no other run uses.
fn schema(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    )
}

async fn drop_schema(url: &str, schema: &str) -> anyhow::Result<()> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await?;
    Ok(())
}

/// Durable claims per second on a fresh store of the same kind, `connections` callers.
async fn raw_claims(store: &str, args: &Args) -> anyhow::Result<f64> {
    match store {
        "sqlite" => {
            let dir = tempfile::tempdir()?;
            let s = idemgate_sqlite::SqliteStore::open(dir.path())?;
            drive(s, args.requests, args.connections).await
        }
        _ => {
            let schema = schema("bench_raw");
            let mut cfg = idemgate_postgres::PgConfig::new(args.postgres.url.clone());
            cfg.schema = schema.clone();
            let s = idemgate_postgres::PgStore::connect(cfg)
                .await
                .context("PostgreSQL for the raw claims")?;
            let result = drive(s, args.requests, args.connections).await;
            drop_schema(&args.postgres.url, &schema).await?;
            result
        }
    }
}

/// `n` claims of new keys from `callers` tasks; claims per second.
pub async fn drive<S: ClaimStore + Clone + 'static>(
    store: S,
    n: usize,
    callers: usize,
) -> anyhow::Result<f64> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (next, store) = (next.clone(), store.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, anyhow::Error>(());
                    }
                    let key = Key::parse("stripe-live", &format!("evt_raw_{i}"))?;
                    let req = ClaimRequest::new(
                        key,
                        Duration::from_secs(60),
                        Duration::from_secs(7 * 86_400),
                    );
                    match store.claim(req).await? {
                        ClaimOutcome::Claimed { .. } => {}
                        other => bail!("a raw claim of a new key answered {other:?}"),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

struct GatewayRun {
    rps: f64,
    latency: Latency,
    peak_rss_kib: u64,
    forwarded: usize,
    duplicates: usize,
    in_flight: usize,
    other: usize,
}

/// A downstream that answers 200 at once.
async fn downstream() -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().route("/hook", axum::routing::post(|| async { "ok" }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

pub(crate) fn free_port() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}

pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Pre-signed deliveries: `n` of them, a share repeating an event at least 1000 places earlier.
pub(crate) fn deliveries(
    n: usize,
    duplicates: f64,
) -> anyhow::Result<Vec<(hyper::HeaderMap, Bytes)>> {
    let sc: idemgate_gateway::config::SourceConfig = serde_json::from_value(serde_json::json!({
        "name": "stripe-live", "provider": "stripe", "secrets": [SECRET],
    }))?;
    let signer = idemgate_gateway::verifier(&sc)?;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let now = SystemTime::now();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let id = if i > 1000 && (rand() % 10_000) as f64 / 10_000.0 < duplicates {
            format!("evt_gw_{}", rand() as usize % (i - 1000))
        } else {
            format!("evt_gw_{i}")
        };
        let body = Bytes::from(serde_json::to_vec(&serde_json::json!({
            "id": id, "object": "event", "type": "invoice.paid",
            "data": {"object": {"id": "in_1", "amount_paid": 4200, "currency": "eur"}},
        }))?);
        let mut headers = signer.sign(&id, now, &body)?;
        headers.insert("content-type", "application/json".parse()?);
        out.push((headers, body));
    }
    Ok(out)
}

async fn gateway(store: &str, bin: &Path, args: &Args) -> anyhow::Result<GatewayRun> {
    let dir = tempfile::tempdir()?;
    let down = downstream().await?;
    let listen = free_port()?;
    let pg_schema = schema("bench_gw");
    let store_toml = match store {
        "sqlite" => format!(
            "[store]\nkind = \"sqlite\"\npath = {:?}\n",
            dir.path().join("data").display().to_string()
        ),
        _ => format!(
            "[store]\nkind = \"postgres\"\nurl = {:?}\n[store.postgres]\nschema = {pg_schema:?}\n",
            args.postgres.url
        ),
    };
    let config = format!(
        "listen = \"{listen}\"\n{store_toml}\n[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"{SECRET}\"]\nforward_url = \"http://{down}/hook\"\n"
    );
    let config_path = dir.path().join("idemgate.toml");
    std::fs::write(&config_path, config)?;
    let mut child = serve(bin, &config_path, listen).await?;
    let pid = child.id().context("the gateway exited at once")?;

    let requests = deliveries(args.requests, args.duplicates)?;
    let started = Instant::now();
    let answers = post_all(listen, requests, args.connections).await?;
    let mut latencies = Vec::with_capacity(args.requests);
    let (mut forwarded, mut duplicates, mut in_flight, mut other) = (0, 0, 0, 0);
    for (latency, outcome) in answers {
        latencies.push(latency);
        match outcome.as_str() {
            "forwarded" => forwarded += 1,
            "duplicate" => duplicates += 1,
            "in_flight" => in_flight += 1,
            _ => other += 1,
        }
    }
    let elapsed = started.elapsed();
    let peak_rss_kib = peak_rss_kib(pid);
    child.start_kill()?;
    let _ = child.wait().await;
    if store != "sqlite" {
        drop_schema(&args.postgres.url, &pg_schema).await?;
    }
    Ok(GatewayRun {
        rps: args.requests as f64 / elapsed.as_secs_f64(),
        latency: Latency::of(&mut latencies),
        peak_rss_kib,
        forwarded,
        duplicates,
        in_flight,
        other,
    })
}

/// POSTs every delivery to `/hooks/stripe-live` over `connections` keep-alive connections, each
/// taking the next one; each answer's latency and `Idemgate-Outcome`.
pub(crate) async fn post_all(
    listen: SocketAddr,
    requests: Vec<(hyper::HeaderMap, Bytes)>,
    connections: usize,
) -> anyhow::Result<Vec<(Duration, String)>> {
    let requests = Arc::new(requests);
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (requests, next) = (requests.clone(), next.clone());
            tokio::spawn(async move {
                let mut conn = Conn::open(listen).await?;
                let mut seen = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some((headers, body)) = requests.get(i) else {
                        return Ok::<_, anyhow::Error>(seen);
                    };
                    let t = Instant::now();
                    let outcome = conn
                        .post("/hooks/stripe-live", headers, body.clone())
                        .await?;
                    seen.push((t.elapsed(), outcome));
                }
            })
        })
        .collect();
    let mut answers = Vec::with_capacity(requests.len());
    for t in tasks {
        answers.extend(t.await??);
    }
    Ok(answers)
}

/// Starts `idemgate serve --config config` (logging warnings only) and waits until it answers
/// `/healthz` on `listen`.
pub(crate) async fn serve(
    bin: &Path,
    config: &Path,
    listen: SocketAddr,
) -> anyhow::Result<tokio::process::Child> {
    let child = tokio::process::Command::new(bin)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env("IDEMGATE_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {}", bin.display()))?;
    let ready = async {
        loop {
            if let Ok(mut conn) = Conn::open(listen).await
                && conn
                    .get("/healthz")
                    .await
                    .map(|s| s == 200)
                    .unwrap_or(false)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), ready)
        .await
        .context("the gateway did not answer /healthz within 20 s")?;
    Ok(child)
}

/// One keep-alive HTTP/1.1 connection.
pub(crate) struct Conn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl Conn {
    pub(crate) async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        Ok(Self { sender })
    }

    pub(crate) async fn get(&mut self, path: &str) -> anyhow::Result<u16> {
        let req = Request::get(path)
            .header("host", "bench")
            .body(Full::new(Bytes::new()))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        resp.into_body().collect().await?;
        Ok(status)
    }

    /// POSTs and returns the `Idemgate-Outcome`.
    pub(crate) async fn post(
        &mut self,
        path: &str,
        headers: &hyper::HeaderMap,
        body: Bytes,
    ) -> anyhow::Result<String> {
        let mut req = Request::post(path)
            .header("host", "bench")
            .body(Full::new(body))?;
        *req.headers_mut() = headers.clone();
        req.headers_mut().insert("host", "bench".parse()?);
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let outcome = resp
            .headers()
            .get("idemgate-outcome")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_owned();
        resp.into_body().collect().await?;
        Ok(outcome)
    }
}
