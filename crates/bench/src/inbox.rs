//! The `inbox` scenario: what a sender waits for when the downstream is slow.
//!
//! Two `idemgate serve` processes on the embedded SQLite store, one source each: forward mode
//! (the sender waits for the downstream) and inbox mode (claim and queue in one transaction,
//! 202 at once, delivered by the dispatcher), against the same downstream taking `--delay` per
//! request. 64 keep-alive connections send signed deliveries; the acknowledgement latency of each
//! mode is reported side by side. Then a burst of `--burst` deliveries to the inbox source:
//! acknowledged at what rate against the raw claim rate of the same store, and drained at the
//! downstream's pace with the configured concurrency, the queue's oldest pending age sampled as
//! it drains.
//!
//! Charts, in `--out`: `inbox.svg` (each mode's acknowledgement p50 and p99) and, with a burst,
//! `inbox-drain.svg` (the oldest pending age and the queue over time).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;

use idemgate_chart::{BarLayout, Bars, Frame, LineChart, LinePanel, Series, XAxis};

use crate::gateway::{SECRET, Work, deliveries, free_port, post_all, serve};
use crate::report::{Latency, ms, table};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Concurrent keep-alive connections of senders.
    #[arg(long, default_value_t = 64)]
    connections: usize,
    /// Deliveries per mode in the latency comparison.
    #[arg(long, default_value_t = 640)]
    requests: usize,
    /// How long the downstream takes per request.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    delay: Duration,
    /// Deliveries in the burst (0: no burst).
    #[arg(long, default_value_t = 20_000)]
    burst: usize,
    /// The dispatcher's concurrency (and the downstream's).
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The idemgate binary (default: next to this one).
    #[arg(long)]
    idemgate: Option<PathBuf>,
    /// Where the charts go.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bin = crate::gateway::idemgate_binary(args.idemgate.as_deref())?;
    let (down, delivered) = downstream(args.delay).await?;
    let mut rows = Vec::new();
    let mut acks = Vec::new();
    for mode in ["on_success", "inbox"] {
        let gw = Gateway::start(&bin, mode, down, args.concurrency).await?;
        let (latency, outcomes) = send(gw.listen, args.requests, args.connections).await?;
        acks.push((
            if mode == "inbox" {
                "inbox"
            } else {
                "forward (on_success)"
            },
            latency,
        ));
        rows.push(vec![
            mode.to_owned(),
            ms(latency.p50),
            ms(latency.p99),
            ms(latency.max),
            outcomes,
        ]);
        gw.stop().await;
    }
    println!(
        "\nSigned Stripe deliveries, {} connections, {} per mode, downstream taking {} per request:\n",
        args.connections,
        args.requests,
        humantime::format_duration(args.delay)
    );
    print!(
        "{}",
        table(
            &["mode", "ack p50 ms", "ack p99 ms", "ack max ms", "outcomes"],
            &rows
        )
    );
    std::fs::create_dir_all(&args.out)?;
    let chart = args.out.join("inbox.svg");
    std::fs::write(&chart, draw_acks(&acks, &args))?;
    println!("\nchart: {}", chart.display());
    if args.burst == 0 {
        return Ok(());
    }

    let raw = {
        let dir = tempfile::tempdir()?;
        let s = idemgate_sqlite::SqliteStore::open(dir.path())?;
        crate::gateway::drive(s, args.burst, args.connections, Work::Claim).await?
    };
    let gw = Gateway::start(&bin, "inbox", down, args.concurrency).await?;
    let before = delivered.load(Ordering::Relaxed);
    let started = Instant::now();
    let (latency, _) = send(gw.listen, args.burst, args.connections).await?;
    let acked_in = started.elapsed();
    let ack_rate = args.burst as f64 / acked_in.as_secs_f64();
    // Drain: sample the queue's oldest pending age from /metrics until it is empty.
    let mut samples = Vec::new();
    let drain_started = Instant::now();
    loop {
        let text = gw.metrics().await.unwrap_or_default();
        let oldest = metric(&text, "idemgate_inbox_oldest_pending_seconds");
        let pending =
            metric(&text, "idemgate_inbox_pending") + metric(&text, "idemgate_inbox_in_flight");
        samples.push((started.elapsed(), oldest, pending));
        if delivered.load(Ordering::Relaxed) - before >= args.burst {
            break;
        }
        if drain_started.elapsed() > Duration::from_secs(1_800) {
            bail!("the burst did not drain within 30 minutes");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drained_in = started.elapsed();
    gw.stop().await;
    println!(
        "\nA burst of {} deliveries to the inbox source ({} connections):\n",
        args.burst, args.connections
    );
    print!(
        "{}",
        table(
            &[
                "acked/s",
                "raw claims/s (same store)",
                "ratio",
                "ack p99 ms",
                "drained in s",
                "drain rate/s",
                "peak oldest pending s"
            ],
            &[vec![
                format!("{ack_rate:.0}"),
                format!("{raw:.0}"),
                format!("{:.2}", ack_rate / raw),
                ms(latency.p99),
                format!("{:.1}", drained_in.as_secs_f64()),
                format!("{:.0}", args.burst as f64 / drained_in.as_secs_f64()),
                format!("{:.1}", samples.iter().map(|s| s.1).fold(0.0_f64, f64::max)),
            ]]
        )
    );
    let ages = Series::xy(
        "oldest pending age (s)",
        samples
            .iter()
            .map(|(at, oldest, _)| (at.as_secs_f64(), *oldest)),
    );
    let queued = Series::xy(
        "items queued or in flight",
        samples
            .iter()
            .map(|(at, _, pending)| (at.as_secs_f64(), *pending)),
    );
    let chart = args.out.join("inbox-drain.svg");
    std::fs::write(
        &chart,
        LineChart::new(
            Frame::new(
                "inbox-drain",
                &format!(
                    "A burst of {} deliveries drained at the downstream's pace ({} at once, {} each)",
                    args.burst,
                    args.concurrency,
                    humantime::format_duration(args.delay)
                ),
            ),
            XAxis::Numbers,
            "seconds from the burst's start",
        )
        .panel(LinePanel::new("oldest pending age, s").series(ages))
        .panel(LinePanel::new("items in the queue").series(queued))
        .render(),
    )?;
    println!("\nchart: {}", chart.display());
    println!("\noldest pending age while draining (every ~10th sample):");
    for (i, (at, oldest, pending)) in samples.iter().enumerate() {
        if i % 10 == 0 || i + 1 == samples.len() {
            println!(
                "  t = {:>6.1} s  oldest pending {:>6.1} s  queued {:>7.0}",
                at.as_secs_f64(),
                oldest,
                pending
            );
        }
    }
    Ok(())
}

/// Each mode's acknowledgement p50 and p99, side by side.
fn draw_acks(acks: &[(&str, Latency)], args: &Args) -> String {
    let in_ms = |d: Duration| (d.as_secs_f64() * 10_000.0).round() / 10.0;
    Bars::new(
        Frame::new(
            "inbox",
            &format!(
                "What a sender waits for: forward mode against inbox mode ({} deliveries each, {} connections, downstream taking {})",
                args.requests,
                args.connections,
                humantime::format_duration(args.delay)
            ),
        ),
        acks.iter().map(|(mode, _)| (*mode).to_owned()).collect(),
        "mode",
        "acknowledgement latency, ms",
    )
    .layout(BarLayout::Grouped)
    .series(Series::new("p50", acks.iter().map(|(_, l)| in_ms(l.p50))))
    .series(Series::new("p99", acks.iter().map(|(_, l)| in_ms(l.p99))))
    .render()
}

/// The sum of a metric's samples in an exposition.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let metric = series.split('{').next()?;
            (metric == name).then(|| value.parse::<f64>().ok())?
        })
        // An empty sum is -0.0; nothing there is 0.
        .fold(0.0, |a, b| a + b)
}

/// A downstream taking `delay` per request, counting those it answered.
async fn downstream(delay: Duration) -> anyhow::Result<(SocketAddr, Arc<AtomicUsize>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let delivered = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post({
            let delivered = delivered.clone();
            move || {
                let delivered = delivered.clone();
                async move {
                    tokio::time::sleep(delay).await;
                    delivered.fetch_add(1, Ordering::Relaxed);
                    "ok"
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, delivered))
}

/// Sends `n` new signed deliveries over `connections`; the acknowledgement latencies and a
/// count of each outcome.
async fn send(
    listen: SocketAddr,
    n: usize,
    connections: usize,
) -> anyhow::Result<(Latency, String)> {
    let answers = post_all(listen, deliveries(n, 0.0)?, connections).await?;
    let mut latencies = Vec::with_capacity(n);
    let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
    for (latency, outcome) in answers {
        latencies.push(latency);
        *outcomes.entry(outcome).or_default() += 1;
    }
    let outcomes = outcomes
        .iter()
        .map(|(o, n)| format!("{o} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    Ok((Latency::of(&mut latencies), outcomes))
}

/// One `idemgate serve` with one Stripe source in `mode`.
struct Gateway {
    child: tokio::process::Child,
    listen: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Gateway {
    async fn start(
        bin: &Path,
        mode: &str,
        down: SocketAddr,
        concurrency: usize,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let listen = free_port()?;
        let config = format!(
            "listen = \"{listen}\"\n[store]\nkind = \"sqlite\"\npath = {:?}\n\
             [[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"{SECRET}\"]\n\
             forward_url = \"http://{down}/hook\"\nmode = \"{mode}\"\nforward_timeout = \"30s\"\n\
             [source.dispatch]\nconcurrency = {concurrency}\ntimeout = \"30s\"\n",
            dir.path().join("data").display().to_string()
        );
        let path = dir.path().join("idemgate.toml");
        std::fs::write(&path, config)?;
        let child = serve(bin, &path, listen).await?;
        Ok(Self {
            child,
            listen,
            _dir: dir,
        })
    }

    async fn metrics(&self) -> anyhow::Result<String> {
        use http_body_util::BodyExt;
        let stream = tokio::net::TcpStream::connect(self.listen).await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = hyper::Request::get("/metrics")
            .header("host", "bench")
            .body(http_body_util::Full::new(bytes::Bytes::new()))?;
        let resp = sender.send_request(req).await?;
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
