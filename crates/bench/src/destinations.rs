//! `gateway --destination nats,amqp`: `idemgate serve` publishing into brokers, beside the same
//! gateway forwarding over HTTP to nginx, same deliveries, same run.
//!
//! For each store (`--store`), each mode (forward, `on_success`: the sender waits for the
//! destination; inbox: claim and queue, 202 at once, the dispatcher delivers) and each
//! destination (HTTP to nginx first, then each broker asked for), one fresh `idemgate serve`
//! takes `--warmup` deliveries of events of their own, then `--requests` pre-signed deliveries
//! (`--duplicates` of them repeats) over `--connections` keep-alive connections. Measured: the
//! acknowledged deliveries per second and their p50/p99, and (inbox) how fast the dispatcher
//! delivered the queue. Then every message at the destination is counted per event id: each
//! event exactly once, or the row says how many were not.
//!
//! - HTTP: nginx (`--nginx`), one worker, `return 200` for every POST, logging each request's
//!   `Idempotency-Key` (how the events are counted). Without nginx the rows say so and the
//!   comparison is left out.
//! - JetStream: a stream of the run's own on file storage, capturing the row's subject, with a
//!   duplicate window of 4 days (it covers the Stripe source's 3-day retry window: the gateway's
//!   window audit is satisfied). Counted by `Nats-Msg-Id` with an ordered consumer.
//! - RabbitMQ: a durable queue of the run's own, through the default exchange; the gateway
//!   publishes persistent messages with confirms. Counted by `message_id`, consuming the queue.
//!
//! Beside them, in the same run: JetStream alone (the `peers` scenario's publish, a new
//! `Nats-Msg-Id` per publish on a file-storage stream, `--connections` callers over 4
//! connections, each waiting for its acknowledgement) and RabbitMQ alone (a persistent publish on
//! a confirm channel per caller, over 4 connections, each waiting for its confirm), so a broker
//! row can be read against what the broker does on its own on this machine.
//!
//! Targets: an inbox source's acknowledgements do not depend on its destination (p99 within 1.2x
//! of the HTTP destination's, same run); the gateway publishes into JetStream at least half as
//! fast as JetStream takes publishes alone (out of reach: the gateway's own ceiling is about a
//! tenth of JetStream's; BENCHMARKS.md restates it as forward into JetStream at least 0.85x
//! forward over HTTP, same run, which is printed too).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use idemgate_chart::{BarLayout, Bars, Frame, Series};

use crate::gateway::{Args, Destination, SECRET, StoreArg, free_port, post_all, serve};
use crate::nats::Nats;
use crate::report::{Latency, ms, table};

/// Who delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Forward,
    Inbox,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Forward => "forward (on_success)",
            Self::Inbox => "inbox",
        }
    }

    fn config(self) -> &'static str {
        match self {
            Self::Forward => "",
            Self::Inbox => "mode = \"inbox\"\n[source.dispatch]\nconcurrency = 16\n",
        }
    }
}

/// The targets.
const INBOX_P99_OVER_HTTP: f64 = 1.2;
const OVER_JETSTREAM_ALONE: f64 = 0.5;
/// The restated target (BENCHMARKS.md, destinations): forward into JetStream at least this
/// share of forward over HTTP to nginx, same store, same run.
const JETSTREAM_OVER_HTTP: f64 = 0.85;
/// Connections the brokers' own callers share.
const BROKER_CONNECTIONS: usize = 4;
/// How long each broker alone is measured.
const ALONE: Duration = Duration::from_secs(5);
/// How long an inbox may go without delivering anything before its row fails.
const STALLED: Duration = Duration::from_secs(30);

/// One gateway's run.
struct Row {
    store: &'static str,
    mode: Mode,
    destination: Destination,
    rps: f64,
    latency: Latency,
    /// Events delivered per second, from the first measured delivery to the last event at the
    /// destination (forward mode: as acknowledged).
    delivered_per_sec: f64,
    answers: BTreeMap<String, usize>,
    counted: Counted,
}

/// Messages at the destination per event id.
#[derive(Debug, Default)]
struct Counted {
    events: usize,
    messages: usize,
    twice: usize,
}

impl Counted {
    fn of(counts: &HashMap<String, u32>) -> Self {
        Self {
            events: counts.len(),
            messages: counts.values().map(|&n| n as usize).sum(),
            twice: counts.values().filter(|&&n| n > 1).count(),
        }
    }

    fn exactly_once(&self, events: usize) -> bool {
        self.events == events && self.twice == 0
    }

    fn describe(&self, events: usize) -> String {
        let mut words = format!("{} of {events} events", self.events);
        if self.twice > 0 {
            words.push_str(&format!(
                ", {} more than once ({} messages)",
                self.twice, self.messages
            ));
        } else {
            words.push_str(", none twice");
        }
        words
    }
}

/// What the run made, to remove whatever happens.
struct Made {
    streams: Vec<String>,
    queues: Vec<String>,
}

pub async fn run(args: &Args, bin: &Path) -> anyhow::Result<()> {
    let mut wanted = vec![Destination::Http];
    wanted.extend(
        args.destination
            .iter()
            .copied()
            .filter(|d| *d != Destination::Http),
    );
    wanted.dedup();
    let stores: &[&'static str] = match args.store {
        StoreArg::Sqlite => &["sqlite"],
        StoreArg::Postgres => &["postgres"],
        StoreArg::Both => &["sqlite", "postgres"],
    };
    let nats = if wanted.contains(&Destination::Nats) {
        Some(Nats::connect(&args.nats).await?)
    } else {
        None
    };
    let rabbit = if wanted.contains(&Destination::Amqp) {
        Some(
            lapin::Connection::connect(&args.amqp, lapin::ConnectionProperties::default())
                .await
                .with_context(|| "cannot connect to RabbitMQ at --amqp".to_owned())?,
        )
    } else {
        None
    };
    let nginx = Nginx::start(&args.nginx).await;
    if let Err(e) = &nginx {
        eprintln!("destinations: no HTTP baseline: {e:#}");
    }
    let mut made = Made {
        streams: Vec::new(),
        queues: Vec::new(),
    };
    let result = tokio::select! {
        rows = measure(args, bin, stores, &wanted, nats.as_ref(), rabbit.as_ref(), nginx.as_ref().ok(), &mut made) => rows,
        stopped = crate::pg::interrupted() => Err(stopped),
    };
    for stream in &made.streams {
        if let Some(nats) = &nats
            && let Err(e) = nats.delete_stream(stream).await
        {
            eprintln!("destinations: {e:#}");
        }
    }
    if let Some(rabbit) = &rabbit {
        let channel = rabbit.create_channel().await?;
        for queue in &made.queues {
            channel
                .queue_delete(
                    queue.as_str().into(),
                    lapin::options::QueueDeleteOptions::default(),
                )
                .await
                .with_context(|| format!("cannot delete queue {queue}"))?;
        }
    }
    let (rows, alone) = result?;
    report(args, &rows, &alone, nginx.is_ok())
}

/// What a broker does on its own: publishes per second and their latency.
struct Alone {
    destination: Destination,
    per_sec: f64,
    latency: Latency,
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    args: &Args,
    bin: &Path,
    stores: &[&'static str],
    wanted: &[Destination],
    nats: Option<&Nats>,
    rabbit: Option<&lapin::Connection>,
    nginx: Option<&Nginx>,
    made: &mut Made,
) -> anyhow::Result<(Vec<Row>, Vec<Alone>)> {
    let requests = crate::gateway::deliveries(args.requests, args.duplicates)?;
    let events = crate::gateway::distinct_events(&requests) + args.warmup;
    let tag = std::process::id();
    let mut rows = Vec::new();
    let mut n = 0;
    for &store in stores {
        for mode in [Mode::Forward, Mode::Inbox] {
            for &destination in wanted {
                n += 1;
                let forward_url = match destination {
                    Destination::Http => match nginx {
                        Some(nginx) => format!("http://{}/hook/{n}", nginx.listen),
                        None => continue,
                    },
                    Destination::Nats => {
                        let nats = nats.context("no NATS")?;
                        let stream = made_stream(tag, n);
                        let subject = format!("idemgate-bench.dest-{tag}-{n}.stripe");
                        nats.create_stream(&stream, &[&subject], Duration::from_secs(4 * 86_400))
                            .await?;
                        made.streams.push(stream);
                        format!("nats://{}/{subject}", nats.addr())
                    }
                    Destination::Amqp => {
                        let queue = format!("idemgate-bench.dest-{tag}-{n}");
                        declare_queue(rabbit.context("no RabbitMQ")?, &queue).await?;
                        made.queues.push(queue.clone());
                        format!("{}?exchange=&routing_key={queue}", amqp_base(&args.amqp))
                    }
                };
                eprintln!(
                    "destinations: {store}, {}, to {}",
                    mode.name(),
                    destination.name()
                );
                let stream = made_stream(tag, n);
                let queue = format!("idemgate-bench.dest-{tag}-{n}");
                let path = format!("/hook/{n}");
                let at = At {
                    destination,
                    nats,
                    rabbit,
                    nginx,
                    stream: &stream,
                    queue: &queue,
                    path: &path,
                };
                let row = one(args, bin, store, mode, &forward_url, &requests, events, &at).await?;
                rows.push(row);
            }
        }
    }
    let mut alone = Vec::new();
    if let Some(nats) = nats {
        eprintln!("destinations: JetStream alone");
        let stream = format!("IDEMGATE_BENCH_ALONE_{tag}");
        let subject = format!("idemgate-bench.alone-{tag}.stripe");
        nats.create_stream(&stream, &[&subject], Duration::from_secs(600))
            .await?;
        made.streams.push(stream);
        let mut connections = vec![nats.clone()];
        for _ in 1..BROKER_CONNECTIONS {
            connections.push(Nats::connect(&args.nats).await?);
        }
        let (per_sec, latency) = crate::claims::timed(args.connections, ALONE, move |c, i| {
            let (conn, subject) = (connections[c % connections.len()].clone(), subject.clone());
            async move {
                let ack = conn
                    .publish(&subject, &format!("alone-{c}-{i}"), b"{}")
                    .await?;
                if ack.duplicate {
                    bail!("JetStream answered a new id as a duplicate");
                }
                Ok(())
            }
        })
        .await?;
        alone.push(Alone {
            destination: Destination::Nats,
            per_sec,
            latency,
        });
    }
    if rabbit.is_some() {
        eprintln!("destinations: RabbitMQ alone");
        let queue = format!("idemgate-bench.alone-{tag}");
        let mut channels = Vec::new();
        for _ in 0..BROKER_CONNECTIONS {
            let connection =
                lapin::Connection::connect(&args.amqp, lapin::ConnectionProperties::default())
                    .await?;
            let channel = connection.create_channel().await?;
            channel
                .confirm_select(lapin::options::ConfirmSelectOptions::default())
                .await?;
            channels.push((std::sync::Arc::new(connection), channel));
        }
        declare_queue(rabbit.context("no RabbitMQ")?, &queue).await?;
        made.queues.push(queue.clone());
        let (per_sec, latency) = crate::claims::timed(args.connections, ALONE, move |c, i| {
            let (_, channel) = channels[c % channels.len()].clone();
            let queue = queue.clone();
            async move {
                let confirm = channel
                    .basic_publish(
                        "".into(),
                        queue.as_str().into(),
                        lapin::options::BasicPublishOptions {
                            mandatory: true,
                            ..Default::default()
                        },
                        b"{}",
                        lapin::BasicProperties::default()
                            .with_delivery_mode(2)
                            .with_message_id(format!("alone-{c}-{i}").into()),
                    )
                    .await?
                    .await?;
                match confirm {
                    lapin::Confirmation::Ack(None) => Ok(()),
                    other => bail!("RabbitMQ did not take a publish: {other:?}"),
                }
            }
        })
        .await?;
        alone.push(Alone {
            destination: Destination::Amqp,
            per_sec,
            latency,
        });
    }
    Ok((rows, alone))
}

fn made_stream(tag: u32, n: usize) -> String {
    format!("IDEMGATE_BENCH_DEST_{tag}_{n}")
}

/// A row's destination, where its events are counted.
struct At<'a> {
    destination: Destination,
    nats: Option<&'a Nats>,
    rabbit: Option<&'a lapin::Connection>,
    nginx: Option<&'a Nginx>,
    stream: &'a str,
    queue: &'a str,
    path: &'a str,
}

impl At<'_> {
    /// How many messages the destination holds now (cheap: read while an inbox drains).
    async fn held(&self) -> anyhow::Result<usize> {
        match self.destination {
            Destination::Http => Ok(self
                .nginx
                .context("no nginx")?
                .counts(self.path)
                .values()
                .map(|&n| n as usize)
                .sum()),
            Destination::Nats => Ok(self
                .nats
                .context("no NATS")?
                .stream_messages(self.stream)
                .await? as usize),
            Destination::Amqp => queue_length(self.rabbit.context("no RabbitMQ")?, self.queue)
                .await
                .map(|n| n as usize),
        }
    }

    /// Every message at the destination, per event id.
    async fn count(&self) -> anyhow::Result<HashMap<String, u32>> {
        match self.destination {
            Destination::Http => Ok(self.nginx.context("no nginx")?.counts(self.path)),
            Destination::Nats => {
                self.nats
                    .context("no NATS")?
                    .count_by_header(self.stream, "Nats-Msg-Id")
                    .await
            }
            Destination::Amqp => count_queue(self.rabbit.context("no RabbitMQ")?, self.queue).await,
        }
    }
}

/// One fresh gateway: warm-up, the measured deliveries, the wait for its destination to hold
/// every event, and the count there.
#[allow(clippy::too_many_arguments)]
async fn one(
    args: &Args,
    bin: &Path,
    store: &'static str,
    mode: Mode,
    forward_url: &str,
    requests: &[(hyper::HeaderMap, bytes::Bytes)],
    events: usize,
    at: &At<'_>,
) -> anyhow::Result<Row> {
    let dir = tempfile::tempdir()?;
    let listen = free_port()?;
    let schema = format!("bench_dest_{}_{}", std::process::id(), listen.port());
    let store_toml = match store {
        "postgres" => format!(
            "[store]\nkind = \"postgres\"\nurl = {:?}\n[store.postgres]\nschema = {schema:?}\n",
            args.postgres.url
        ),
        _ => format!(
            "[store]\nkind = \"sqlite\"\npath = {:?}\n",
            dir.path().join("data").display().to_string()
        ),
    };
    let config = format!(
        "listen = \"{listen}\"\n{store_toml}\n[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"{SECRET}\"]\nforward_url = {forward_url:?}\n{}",
        mode.config()
    );
    let path = dir.path().join("idemgate.toml");
    std::fs::write(&path, config)?;
    let mut child = serve(bin, &path, listen).await?;
    let measured = drive(args, listen, requests, events, at).await;
    child.start_kill()?;
    let _ = child.wait().await;
    if store == "postgres" {
        let admin = crate::pg::admin(&args.postgres.url).await?;
        crate::pg::drop_schema(&admin, &schema).await?;
    }
    let (rps, latency, answers, delivered_per_sec) = measured?;
    let counts = at.count().await?;
    Ok(Row {
        store,
        mode,
        destination: at.destination,
        rps,
        latency,
        delivered_per_sec,
        answers,
        counted: Counted::of(&counts),
    })
}

/// Sends the warm-up and the deliveries, then waits until the destination holds every event
/// (the inbox's dispatcher is still at it), or holds no more for [`STALLED`]: acknowledged per
/// second, their latency, the answers, and events delivered per second.
async fn drive(
    args: &Args,
    listen: SocketAddr,
    requests: &[(hyper::HeaderMap, bytes::Bytes)],
    events: usize,
    at: &At<'_>,
) -> anyhow::Result<(f64, Latency, BTreeMap<String, usize>, f64)> {
    if args.warmup > 0 {
        let warmup = crate::gateway::signed((0..args.warmup).map(|i| format!("evt_warmup_{i}")))?;
        post_all(listen, warmup, args.connections).await?;
    }
    let started = Instant::now();
    let answers = post_all(listen, requests.to_vec(), args.connections).await?;
    let took = started.elapsed();
    let mut latencies = Vec::with_capacity(answers.len());
    let mut outcomes = BTreeMap::new();
    for (latency, outcome) in answers {
        latencies.push(latency);
        *outcomes.entry(outcome).or_default() += 1;
    }
    let mut held = at.held().await?;
    let mut last = (held, Instant::now());
    while held < events && last.1.elapsed() < STALLED {
        tokio::time::sleep(Duration::from_millis(20)).await;
        held = at.held().await?;
        if held > last.0 {
            last = (held, Instant::now());
        }
    }
    let delivered = last.1.duration_since(started).max(took);
    Ok((
        requests.len() as f64 / took.as_secs_f64(),
        Latency::of(&mut latencies),
        outcomes,
        (events - args.warmup) as f64 / delivered.as_secs_f64(),
    ))
}

/// `amqp://user:pass@host:port/vhost` of `--amqp`, without a query.
fn amqp_base(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_owned()
}

async fn declare_queue(rabbit: &lapin::Connection, queue: &str) -> anyhow::Result<()> {
    let channel = rabbit.create_channel().await?;
    channel
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .with_context(|| format!("cannot declare queue {queue}"))?;
    Ok(())
}

/// Messages ready in the queue now.
async fn queue_length(rabbit: &lapin::Connection, queue: &str) -> anyhow::Result<u32> {
    let channel = rabbit.create_channel().await?;
    let n = channel
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .with_context(|| format!("no queue {queue}"))?
        .message_count();
    let _ = channel.close(200, "counted".into()).await;
    Ok(n)
}

/// Every message the queue holds now, per `message_id`: read on a channel of its own without
/// acknowledging, then handed back to the queue as the channel closes (so each call sees all).
async fn count_queue(
    rabbit: &lapin::Connection,
    queue: &str,
) -> anyhow::Result<HashMap<String, u32>> {
    use futures_util::StreamExt;
    let channel = rabbit.create_channel().await?;
    let waiting = channel
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await?
        .message_count();
    let mut got = HashMap::new();
    if waiting > 0 {
        let mut consumer = channel
            .basic_consume(
                queue.into(),
                "".into(),
                lapin::options::BasicConsumeOptions::default(),
                lapin::types::FieldTable::default(),
            )
            .await?;
        let mut read = 0;
        while read < waiting {
            let Ok(Some(delivery)) =
                tokio::time::timeout(Duration::from_secs(5), consumer.next()).await
            else {
                bail!("queue {queue} gave {read} of its {waiting} messages, then nothing for 5 s");
            };
            let delivery = delivery?;
            let id = delivery
                .properties
                .message_id()
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default();
            *got.entry(id).or_insert(0u32) += 1;
            read += 1;
        }
    }
    channel
        .close(200, "counted".into())
        .await
        .context("cannot hand the counted messages back to the queue")?;
    Ok(got)
}

/// nginx answering 200 to everything, logging each request's path and `Idempotency-Key`.
struct Nginx {
    listen: SocketAddr,
    child: tokio::process::Child,
    dir: tempfile::TempDir,
}

impl Nginx {
    async fn start(bin: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let listen = free_port()?;
        let d = dir.path().display();
        std::fs::write(
            dir.path().join("nginx.conf"),
            format!(
                "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\nevents {{ worker_connections 4096; }}\nhttp {{\n  log_format counted '$uri $http_idempotency_key';\n  access_log {d}/access.log counted buffer=256k flush=100ms;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  keepalive_requests 1000000;\n  server {{\n    listen {listen};\n    location / {{ return 200 \"ok\"; }}\n  }}\n}}\n"
            ),
        )?;
        let child = tokio::process::Command::new(bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .kill_on_drop(true)
            .stderr(std::process::Stdio::null())
            .spawn()
            .with_context(|| {
                format!(
                    "cannot run {} (install nginx: apt-get install nginx)",
                    bin.display()
                )
            })?;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(listen).await.is_ok() {
                return Ok(Self { listen, child, dir });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("nginx did not listen on {listen} within 5 s");
    }

    /// Requests to `path` per `Idempotency-Key`, as the access log has them (flushed every
    /// 100 ms).
    fn counts(&self, path: &str) -> HashMap<String, u32> {
        let _ = &self.child;
        let log = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        let mut out = HashMap::new();
        for line in log.lines() {
            if let Some((uri, key)) = line.split_once(' ')
                && uri == path
            {
                *out.entry(key.to_owned()).or_default() += 1;
            }
        }
        out
    }
}

fn report(args: &Args, rows: &[Row], alone: &[Alone], http: bool) -> anyhow::Result<()> {
    let events = crate::gateway::distinct_events(&crate::gateway::deliveries(
        args.requests,
        args.duplicates,
    )?) + args.warmup;
    println!(
        "\nSigned Stripe deliveries, {} connections, {} requests ({:.0}% repeats) to a fresh `idemgate serve` per row after {} of warm-up; acknowledged = answered 2xx (forward: after the destination took the event; inbox: once queued):\n",
        args.connections,
        args.requests,
        args.duplicates * 100.0,
        args.warmup
    );
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.store.to_owned(),
                r.mode.name().to_owned(),
                r.destination.name().to_owned(),
                format!("{:.0}", r.rps),
                ms(r.latency.p50),
                ms(r.latency.p99),
                format!("{:.0}", r.delivered_per_sec),
                r.answers
                    .iter()
                    .map(|(o, n)| format!("{o} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                r.counted.describe(events),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "store",
                "mode",
                "destination",
                "acked/s",
                "p50 ms",
                "p99 ms",
                "delivered/s",
                "answers",
                "at the destination (warm-up included)",
            ],
            &table_rows
        )
    );
    if !alone.is_empty() {
        println!(
            "\nEach broker alone, {} callers over {BROKER_CONNECTIONS} connections, {} s, each caller waiting for its acknowledgement (JetStream: a new Nats-Msg-Id on a file-storage stream; RabbitMQ: a persistent publish to a durable queue, confirmed):\n",
            args.connections,
            ALONE.as_secs()
        );
        let rows: Vec<Vec<String>> = alone
            .iter()
            .map(|a| {
                vec![
                    a.destination.name().to_owned(),
                    format!("{:.0}", a.per_sec),
                    ms(a.latency.p50),
                    ms(a.latency.p99),
                ]
            })
            .collect();
        print!(
            "{}",
            table(&["broker alone", "publishes/s", "p50 ms", "p99 ms"], &rows)
        );
    }
    println!();
    if !http {
        println!("No HTTP baseline (nginx did not start): the inbox comparison is left out.");
    }
    let mark = |ok: bool| if ok { "met" } else { "missed" };
    for r in rows {
        if r.mode == Mode::Inbox
            && r.destination != Destination::Http
            && let Some(base) = rows.iter().find(|b| {
                b.store == r.store && b.mode == Mode::Inbox && b.destination == Destination::Http
            })
        {
            let ratio = r.latency.p99.as_secs_f64() / base.latency.p99.as_secs_f64().max(1e-9);
            println!(
                "{}, inbox to {}: acknowledgement p99 {} ms, {ratio:.2}x HTTP's {} ms; target within {INBOX_P99_OVER_HTTP}x: {}",
                r.store,
                r.destination.name(),
                ms(r.latency.p99),
                ms(base.latency.p99),
                mark(ratio <= INBOX_P99_OVER_HTTP)
            );
        }
        if r.destination == Destination::Nats
            && let Some(js) = alone.iter().find(|a| a.destination == Destination::Nats)
        {
            let rate = match r.mode {
                Mode::Forward => r.rps,
                Mode::Inbox => r.delivered_per_sec,
            };
            println!(
                "{}, {} to JetStream: {rate:.0} publishes/s, {:.2}x JetStream alone ({:.0}/s); target at least {OVER_JETSTREAM_ALONE}x: {}",
                r.store,
                r.mode.name(),
                rate / js.per_sec,
                js.per_sec,
                mark(rate / js.per_sec >= OVER_JETSTREAM_ALONE)
            );
        }
        if r.destination == Destination::Nats
            && r.mode == Mode::Forward
            && let Some(base) = rows.iter().find(|b| {
                b.store == r.store && b.mode == Mode::Forward && b.destination == Destination::Http
            })
        {
            let ratio = r.rps / base.rps.max(1e-9);
            println!(
                "{}, forward to JetStream: {:.0} acked/s, {ratio:.2}x forward over HTTP ({:.0}/s); restated target at least {JETSTREAM_OVER_HTTP}x: {}",
                r.store,
                r.rps,
                base.rps,
                mark(ratio >= JETSTREAM_OVER_HTTP)
            );
        }
    }
    for r in rows {
        println!(
            "{}, {}, {}: every event at the destination exactly once ({}): {}",
            r.store,
            r.mode.name(),
            r.destination.name(),
            r.counted.describe(events),
            mark(r.counted.exactly_once(events))
        );
    }
    std::fs::create_dir_all(&args.out)?;
    let chart = args.out.join("destinations.svg");
    std::fs::write(&chart, draw(args, rows)?)?;
    println!("\nchart: {}", chart.display());
    Ok(())
}

fn draw(args: &Args, rows: &[Row]) -> anyhow::Result<String> {
    let categories: Vec<String> = rows
        .iter()
        .map(|r| format!("{}, {}, {}", r.store, r.mode.name(), r.destination.name()))
        .collect();
    let load = format!(
        "{} signed Stripe deliveries, {} connections",
        args.requests, args.connections
    );
    let rps = Bars::new(
        Frame::new(
            "destinations-rps",
            &format!("Acknowledged deliveries per second by destination: {load}"),
        ),
        categories.clone(),
        "store, mode, destination",
        "acked/s",
    )
    .layout(BarLayout::Grouped)
    .series(Series::new("acked/s", rows.iter().map(|r| r.rps.round())))
    .series(Series::new(
        "delivered/s",
        rows.iter().map(|r| r.delivered_per_sec.round()),
    ))
    .render();
    let p99 = Bars::new(
        Frame::new(
            "destinations-p99",
            "Acknowledgement p99, ms (lower is better)",
        ),
        categories,
        "store, mode, destination",
        "p99 ms",
    )
    .layout(BarLayout::Grouped)
    .series(Series::new(
        "p99 ms",
        rows.iter()
            .map(|r| (r.latency.p99.as_secs_f64() * 10_000.0).round() / 10.0),
    ))
    .render();
    crate::gateway::stack(
        "destinations",
        &format!("idemgate publishing into brokers, beside HTTP: {load}"),
        &format!("{load}; each row a fresh gateway."),
        &[rps, p99],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_at_a_destination_says_what_was_missing_or_twice() {
        let counts = HashMap::from([
            ("stripe-live:evt_1".to_owned(), 1),
            ("stripe-live:evt_2".to_owned(), 2),
        ]);
        let c = Counted::of(&counts);
        assert!(!c.exactly_once(2));
        assert_eq!(
            c.describe(3),
            "2 of 3 events, 1 more than once (3 messages)"
        );
        let once = Counted::of(&HashMap::from([("a".to_owned(), 1)]));
        assert!(once.exactly_once(1) && !once.exactly_once(2));
        assert_eq!(
            amqp_base("amqp://guest:guest@127.0.0.1:5672/%2f?heartbeat=10"),
            "amqp://guest:guest@127.0.0.1:5672/%2f"
        );
    }
}
