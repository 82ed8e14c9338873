//! Broker destinations: the source's `forward_url` is a JetStream subject (a private
//! `nats-server -js`, file store in the run directory) or a RabbitMQ routing key (a private
//! node: [`crate::rabbit`]), one per gateway process (`chaos.{tag}.g{gateway}.r{incarnation}`,
//! captured by one stream on `chaos.{tag}.>`, or bound to one durable queue through
//! `amq.topic` with `chaos.{tag}.#`). Once the gateways are stopped, the stream or the queue is
//! read back and every message is a processing of its event by the process that published it
//! (see [`crate::broker`] and [`crate::verdict`] for what explains one kept twice).
//!
//! - `kill-{jetstream,rabbitmq}` (forward, then inbox mode): at 20%, 45% and 70% of the load
//!   the broker is frozen (SIGSTOP) for 300-600 ms, so publishes pile up unconfirmed, then the
//!   gateway is SIGKILLed, the broker thawed (SIGCONT), and the gateway restarted after
//!   100-400 ms.
//! - `{jetstream,rabbitmq}-restart` (forward, then inbox mode): the broker is restarted at 25%
//!   (SIGTERM, started again at once) and stopped for 10 s at 60%.
//! - `short-window`: the stream's duplicate window is shortened below what the source needs while
//!   the gateway publishes; its audit must say so. Then `on_short_window = "refuse"` and a
//!   subject no stream captures must each stop a start.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use super::{MS, SECS, quick};
use crate::Ctx;
use crate::broker::{self, Message};
use crate::clock::{Clock, ms};
use crate::downstream::Via;
use crate::fault::{self, Window};
use crate::gateway::{Gateway, InboxSpec, SOURCE, SourceSpec, free_port};
use crate::load::Outcome;
use crate::nats::{self, PrivateNats};
use crate::rabbit::{self, PrivateRabbit};
use crate::run::{Queue, Run, sqlite_store};
use crate::second;
use crate::verdict::{Delivery, FailedDelivery, Outage, QueueEvidence, Verdict};

/// Which broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    JetStream,
    RabbitMq,
}

/// The stream's duplicate window: it covers what either mode may re-publish (forward mode:
/// the 600 s retry window; inbox mode: the item lease and the longest backoff).
const WINDOW: Duration = Duration::from_secs(20 * 60);
/// `short-window`: the window the stream is shortened to (JetStream's default).
const SHORT: Duration = Duration::from_secs(120);
/// `short-window`: how often the gateway audits the window (the shortest it takes).
const AUDIT_EVERY: Duration = Duration::from_secs(10);
/// What the gateway's dispatcher logs when a delivery from the inbox failed.
const FAILED: &str = "delivery failed; retrying later";

/// The broker of a run, held for the scenario (a restart is the scenario's own fault).
enum Held<'c> {
    Nats(tokio::sync::MutexGuard<'c, PrivateNats>),
    Rabbit(tokio::sync::MutexGuard<'c, PrivateRabbit>),
}

impl Held<'_> {
    fn name(&self) -> &'static str {
        match self {
            Self::Nats(_) => "nats-server",
            Self::Rabbit(_) => "the RabbitMQ node",
        }
    }

    async fn stop(&mut self) {
        match self {
            Self::Nats(n) => n.stop().await,
            Self::Rabbit(r) => r.stop().await,
        }
    }

    async fn signal(&self, signal: &str) {
        match self {
            Self::Nats(n) => n.signal(signal).await,
            Self::Rabbit(r) => r.signal(signal).await,
        }
    }

    async fn start(&mut self) -> anyhow::Result<()> {
        match self {
            Self::Nats(n) => n.ensure().await,
            Self::Rabbit(r) => r.ensure().await,
        }
    }
}

/// What one run publishes into.
#[derive(Debug, Clone)]
struct Target {
    broker: Broker,
    /// The stream (JetStream) or the queue (RabbitMQ).
    name: String,
    /// The `forward_url`, `{g}` and `{r}` standing for the gateway and the incarnation.
    url: String,
}

/// Starts (or takes) the run's broker and makes the stream or the queue of run `run`.
async fn prepare<'c>(
    ctx: &'c Ctx,
    run: &Run<'_>,
    broker: Broker,
) -> anyhow::Result<(Held<'c>, Target)> {
    let prefix = broker::prefix(&run.tag);
    match broker {
        Broker::JetStream => {
            let held = ctx.nats().await?;
            let js = held.jetstream().await?;
            let name = format!("CHAOS_{}", run.tag.to_uppercase());
            nats::create_stream(&js, &name, vec![format!("{prefix}.>")], WINDOW).await?;
            let url = format!("nats://{}/{prefix}.g{{g}}.r{{r}}", held.server());
            Ok((Held::Nats(held), Target { broker, name, url }))
        }
        Broker::RabbitMq => {
            let held = ctx.rabbit().await?;
            let connection = held.connect().await?;
            rabbit::declare_queue(&connection, &prefix, &format!("{prefix}.#")).await?;
            let _ = connection.close(200, "declared".into()).await;
            let url = format!(
                "amqp://guest:guest@127.0.0.1:{}/%2F?exchange=amq.topic&routing_key={prefix}.g{{g}}.r{{r}}",
                held.port
            );
            Ok((
                Held::Rabbit(held),
                Target {
                    broker,
                    name: prefix,
                    url,
                },
            ))
        }
    }
}

/// Every message the stream or the queue holds.
async fn read(held: &Held<'_>, target: &Target, clock: Clock) -> anyhow::Result<Vec<Message>> {
    match held {
        Held::Nats(n) => nats::read_stream(&n.jetstream().await?, &target.name, clock).await,
        Held::Rabbit(r) => {
            let connection = r.connect().await?;
            let messages = rabbit::read_queue(&connection, &target.name).await;
            let _ = connection.close(200, "read".into()).await;
            messages
        }
    }
}

/// The source: claims that outlive a publish by far (a restarted gateway frees its own at once),
/// the publish timeout `timeout`. Inbox mode: 4 deliveries at once, and attempts enough to
/// outlast a broker down for half a minute at the suite's 1 s backoff.
fn source(inbox: bool, timeout: Duration) -> SourceSpec {
    SourceSpec {
        lease: SECS(10),
        forward_timeout: timeout,
        ttl: SECS(600),
        inbox: inbox.then_some(InboxSpec {
            concurrency: 4,
            max_attempts: Some(200),
        }),
    }
}

/// One gateway on SQLite, publishing to `target`; its dispatcher's failures logged.
fn add_gateway(run: &mut Run<'_>, target: &Target) -> anyhow::Result<()> {
    let store = sqlite_store(&run.dir, SECS(60));
    run.add_gateways(1, &store)?;
    let g = run.gateway(1)?;
    g.destination = Some(target.url.clone());
    g.log_filter.push_str(",idemgate_gateway::dispatch=info");
    Ok(())
}

/// SIGKILL of the gateway at 20%, 45% and 70% of the load, each while the broker is frozen
/// with publishes in flight; restarted after 100-400 ms.
pub async fn kill(
    ctx: &Ctx,
    name: &'static str,
    broker: Broker,
    inbox: bool,
) -> anyhow::Result<Verdict> {
    let mut run = Run::new(ctx, name, source(inbox, SECS(3)), quick()).await?;
    let (held, target) = prepare(ctx, &run, broker).await?;
    add_gateway(&mut run, &target)?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    let mut rng = crate::rng::Rng::stream(ctx.seed, 0xB0C1, u64::from(inbox));
    for at in [0.2, 0.45, 0.7] {
        run.reach(at).await?;
        // The broker frozen first: publishes pile up unconfirmed (and, in inbox mode, the queue
        // behind them), so the kill lands while publishes the broker may still store are in
        // flight, the window a re-publish must be caught in.
        let frozen = rng.duration(MS(300), MS(600));
        held.signal("STOP").await;
        run.note(format!(
            "{} frozen (SIGSTOP) for {} before the kill",
            held.name(),
            ms(frozen.as_micros() as u64)
        ));
        tokio::time::sleep(frozen).await;
        let killed = run.kill(1).await;
        held.signal("CONT").await;
        killed?;
        run.note(format!("{} thawed (SIGCONT)", held.name()));
        tokio::time::sleep(rng.duration(MS(100), MS(400))).await;
        run.restart(1).await?;
    }
    run.settle(SECS(15)).await?;
    if inbox {
        run.drain_inbox(SECS(30)).await?;
    }
    let mut v = judge(ctx, &mut run, &held, &target, &[]).await?;
    if broker == Broker::JetStream && !inbox {
        v.notes.push(dropped_republishes(&run));
    }
    Ok(v)
}

/// Forward mode, JetStream: the events a sender was told `forwarded` at attempt 2 or more (a
/// claim taken over after a kill, and published again) whose stored copy is an earlier attempt:
/// JetStream acknowledged the re-publish as a duplicate, and stored nothing.
fn dropped_republishes(run: &Run<'_>) -> String {
    let republished: std::collections::BTreeMap<u32, u32> = run
        .answers
        .iter()
        .filter(|a| a.outcome == Outcome::Forwarded && a.attempt >= 2)
        .map(|a| (a.event, a.attempt))
        .collect();
    let dropped = republished
        .iter()
        .filter(|(event, attempt)| {
            run.processings
                .iter()
                .any(|p| p.event == **event && p.attempt < **attempt)
        })
        .count();
    format!(
        "claims taken over after a kill and published again (a sender told `forwarded` at attempt 2 or more): {}; of those, the stream kept an earlier attempt's copy and dropped the re-publish as a duplicate: {dropped}",
        republished.len()
    )
}

/// The broker restarted at 25% of the load (SIGTERM, started again at once) and stopped for
/// 10 s at 60%.
pub async fn restart(
    ctx: &Ctx,
    name: &'static str,
    broker: Broker,
    inbox: bool,
) -> anyhow::Result<Verdict> {
    let mut run = Run::new(ctx, name, source(inbox, SECS(2)), quick()).await?;
    let (mut held, target) = prepare(ctx, &run, broker).await?;
    add_gateway(&mut run, &target)?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    let mut outages = Vec::new();
    let mut waiting = Vec::new();
    run.reach(0.25).await?;
    outages.push(outage(&mut run, &mut held, Duration::ZERO, &mut waiting).await?);
    run.reach(0.6).await?;
    outages.push(outage(&mut run, &mut held, SECS(10), &mut waiting).await?);
    run.settle(SECS(20)).await?;
    if inbox {
        run.drain_inbox(SECS(30)).await?;
    }
    let mut v = judge(ctx, &mut run, &held, &target, &outages).await?;

    // What the senders heard: 503 with Retry-After (forward), or queued throughout (inbox).
    let failed: Vec<&crate::load::Answer> =
        run.answers.iter().filter(|a| a.status >= 500).collect();
    let refused = failed
        .iter()
        .filter(|a| a.outcome == Outcome::DestinationUnavailable)
        .count();
    let without = failed.iter().filter(|a| !a.retry_after).count();
    let others: Vec<String> = failed
        .iter()
        .filter(|a| a.outcome != Outcome::DestinationUnavailable)
        .map(|a| a.outcome.name().to_owned())
        .take(5)
        .collect();
    v.notes.push(format!(
        "answers 5xx: {} ({refused} 503 destination_unavailable, {without} without Retry-After)",
        failed.len()
    ));
    if inbox {
        if !failed.is_empty() {
            v.failures.push(format!(
                "{} attempts were answered 5xx: an inbox source queues while the broker is down",
                failed.len()
            ));
        }
        let held_back = waiting.iter().map(|q| q.pending).fold(0.0, f64::max);
        if held_back == 0.0 {
            v.failures.push(
                "nothing was pending in the inbox just before the broker came back: the outage did not hold any event back"
                    .into(),
            );
        }
    } else {
        if refused == 0 {
            v.failures.push(
                "no attempt was answered 503 destination_unavailable: the outages never reached a sender"
                    .into(),
            );
        }
        if without > 0 {
            v.failures
                .push(format!("{without} 5xx answers had no Retry-After"));
        }
        if !others.is_empty() {
            v.failures.push(format!(
                "attempts were answered 5xx with another outcome than destination_unavailable: {}",
                others.join(", ")
            ));
        }
    }
    if let Some(o) = outages.last() {
        v.fault = Some(fault::figures(
            format!("{} stopped 10 s", held.name()),
            Window {
                start: o.stop,
                end: o.back,
            },
            &run.answers,
        ));
    }
    Ok(v)
}

/// Stops the broker (SIGTERM), leaves it down for `down`, starts it again on the same store.
/// In inbox mode, the queue just before it starts again goes into `waiting`.
async fn outage(
    run: &mut Run<'_>,
    held: &mut Held<'_>,
    down: Duration,
    waiting: &mut Vec<Queue>,
) -> anyhow::Result<Outage> {
    let what = held.name();
    let stop = run.clock().now();
    run.note(format!("{what}: SIGTERM"));
    held.stop().await;
    let gone = run.clock().now();
    run.note(format!(
        "{what} gone ({} after the SIGTERM)",
        ms(gone - stop)
    ));
    tokio::time::sleep(down).await;
    if run.source.inbox.is_some()
        && let Some(q) = run.queue(1).await
    {
        run.note(format!("inbox just before {what} starts again: {q}"));
        waiting.push(q);
    }
    held.start().await?;
    let back = run.clock().now();
    run.note(format!(
        "{what} answers again ({} after it was gone)",
        ms(back - gone)
    ));
    Ok(Outage { stop, gone, back })
}

/// Stops the gateways, reads the stream or the queue, and judges.
async fn judge(
    ctx: &Ctx,
    run: &mut Run<'_>,
    held: &Held<'_>,
    target: &Target,
    outages: &[Outage],
) -> anyhow::Result<Verdict> {
    run.halt().await?;
    let messages = read(held, target, ctx.clock).await?;
    let tag = run.tag.clone();
    let (records, problems) = broker::processings(&messages, &tag, |e| crate::load::body(&tag, e));
    let failed = failed_deliveries(run, ctx.clock);
    let inbox = run.source.inbox.is_some();
    let delivery = match target.broker {
        Broker::JetStream => Delivery::Stream {
            window_us: WINDOW.as_micros() as u64,
        },
        Broker::RabbitMq => Delivery::Queue(QueueEvidence {
            inbox,
            outages,
            failed: &failed,
            timeout_us: run.source.forward_timeout.as_micros() as u64,
        }),
    };
    let mut events: Vec<u32> = records.iter().map(|p| p.event).collect();
    events.sort_unstable();
    events.dedup();
    let (kept, count) = (records.len(), events.len());
    let mut v = run.judge(records, delivery).await?;
    v.notes.insert(
        0,
        format!(
            "the {} {} held {} messages: {kept} of this run's, for {count} distinct events",
            match target.broker {
                Broker::JetStream => "stream",
                Broker::RabbitMq => "queue",
            },
            target.name,
            messages.len(),
        ),
    );
    if inbox {
        v.notes.push(format!(
            "deliveries from the inbox the gateways logged as failed (\"{FAILED}\"): {}",
            failed.len()
        ));
    }
    if !problems.is_empty() {
        v.failures.push(format!(
            "{} messages lack what the gateway promises: {}",
            problems.len(),
            problems
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join(" / ")
        ));
    }
    Ok(v)
}

/// The deliveries every gateway process logged as failed, from their logs (`g{n}-r{m}.log`).
fn failed_deliveries(run: &Run<'_>, clock: Clock) -> Vec<FailedDelivery> {
    let mut out = Vec::new();
    for g in &run.gateways {
        for (i, path) in g.logs().iter().enumerate() {
            let via = Via {
                gateway: g.index,
                incarnation: u16::try_from(i + 1).unwrap_or(u16::MAX),
            };
            let text = std::fs::read_to_string(path).unwrap_or_default();
            out.extend(parse_failures(&text, &run.tag, via, |t| clock.at_wall(t)));
        }
    }
    out
}

/// `delivery failed; retrying later` lines of one process's log: the event and attempt from the
/// `dispatch{...}` span, the time from the line's timestamp.
fn parse_failures(
    text: &str,
    tag: &str,
    via: Via,
    at: impl Fn(SystemTime) -> u64,
) -> Vec<FailedDelivery> {
    let event_prefix = format!("evt_{tag}_");
    text.lines()
        .filter(|l| l.contains(FAILED))
        .filter_map(|line| {
            let when = humantime::parse_rfc3339_weak(line.split_whitespace().next()?).ok()?;
            let span = line.split_once("dispatch{")?.1.split_once('}')?.0;
            let field = |name: &str| {
                span.split(' ')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            Some(FailedDelivery {
                event: field("event_id")?
                    .trim_matches('"')
                    .strip_prefix(&event_prefix)?
                    .parse()
                    .ok()?,
                attempt: field("attempt")?.parse().ok()?,
                via,
                at: at(when),
            })
        })
        .collect()
}

/// `short-window`: the stream's window covers the source at start; at 30% of the load it is
/// shortened to 2 minutes, below the 10 minutes the source may re-publish within (its
/// retry_window), and the gateway's next audit (every 10 s here) must say so: a WARN naming the
/// window as short, and `/healthz` degraded with a `destinations` warning naming the source.
/// Then two more starts on the same broker must stop before listening, with exit code 2: one
/// with `on_short_window = "refuse"`, one publishing to a subject no stream captures.
pub async fn short_window(ctx: &Ctx) -> anyhow::Result<Verdict> {
    let source = source(false, SECS(3));
    let mut run = Run::new(ctx, "short-window", source.clone(), quick()).await?;
    let (held, target) = prepare(ctx, &run, Broker::JetStream).await?;
    add_gateway(&mut run, &target)?;
    run.gateway(1)?.extra_toml = format!(
        "window_audit_interval = \"{}\"\n",
        humantime::format_duration(AUDIT_EVERY)
    );
    run.start_gateways().await?;
    let health = format!("http://{}/healthz", run.gateway(1)?.addr());
    let mut failures = Vec::new();
    let mut notes = Vec::new();
    let at_start = destinations(ctx, &health).await;
    notes.push(format!("/healthz at start: {}", at_start.show()));
    if !(at_start.status == 200 && at_start.overall == "ok" && at_start.component == "ok") {
        failures.push(format!(
            "with a window that covers the source, /healthz was not 200 ok: {}",
            at_start.show()
        ));
    }
    let mut spec = run.spec();
    spec.events = spec.events.min(300);
    // Publishing goes on while the window is shortened and audited.
    spec.min_duration = AUDIT_EVERY + SECS(6);
    run.load(spec);
    run.reach(0.3).await?;
    let js = match &held {
        Held::Nats(n) => n.jetstream().await?,
        Held::Rabbit(_) => anyhow::bail!("short-window runs on JetStream"),
    };
    nats::set_window(&js, &target.name, SHORT).await?;
    let shortened = run.clock().now();
    run.note(format!(
        "stream {}'s duplicate window shortened to {}",
        target.name,
        humantime::format_duration(SHORT)
    ));
    // The next audit comes within AUDIT_EVERY; a few seconds more for a busy machine.
    let until = run.clock().after(AUDIT_EVERY + SECS(10));
    let expected = format!(
        "{SOURCE}: stream {} dedups for {}",
        target.name,
        humantime::format_duration(SHORT)
    );
    let degraded = loop {
        let seen = destinations(ctx, &health).await;
        if seen.status == 200 && seen.overall == "degraded" && seen.component == "warn" {
            break Some(seen);
        }
        if run.clock().now() >= until {
            break None;
        }
        tokio::time::sleep(MS(250)).await;
    };
    match degraded {
        Some(seen) => {
            run.note(format!(
                "/healthz degraded, {} after the window was shortened",
                ms(run.clock().now() - shortened)
            ));
            notes.push(format!("/healthz once audited: {}", seen.show()));
            if !seen.error.starts_with(&expected) || !seen.error.contains("short") {
                failures.push(format!(
                    "the destinations warning does not begin {expected:?} and call the window short: {:?}",
                    seen.error
                ));
            }
        }
        None => failures.push(format!(
            "/healthz never said degraded with a destinations warning within {} of the window being shortened (the audit runs every {})",
            ms(until - shortened),
            humantime::format_duration(AUDIT_EVERY)
        )),
    }
    run.settle(SECS(15)).await?;
    let mut v = judge(ctx, &mut run, &held, &target, &[]).await?;
    let warned = run.gateways.iter().flat_map(|g| g.logs()).any(|path| {
        std::fs::read_to_string(path).is_ok_and(|text| {
            text.lines().any(|l| {
                l.contains(" WARN ")
                    && l.contains("dedups for")
                    && l.contains("the window is short")
                    && l.contains(SOURCE)
            })
        })
    });
    notes.push(format!(
        "the gateway logged a WARN saying the stream \"dedups for\" and \"the window is short\", naming the source: {}",
        if warned { "yes" } else { "no" }
    ));
    if !warned {
        failures.push("the gateway logged no WARN saying the window is short".into());
    }

    // Two starts that must stop before they listen.
    let env = run.env();
    let mut refused = Gateway::new(
        &env,
        2,
        sqlite_store(&run.dir.join("refused"), SECS(60)),
        source.clone(),
    )?;
    refused.destination = Some(target.url.clone());
    refused.source_toml = "on_short_window = \"refuse\"\n".to_owned();
    let checks = [
        (
            refused,
            "with on_short_window = \"refuse\"",
            vec![
                format!("source \"{SOURCE}\": on_short_window"),
                "is \"refuse\"".to_owned(),
                format!("dedups for {}", humantime::format_duration(SHORT)),
            ],
        ),
        (
            {
                let mut nowhere = Gateway::new(
                    &env,
                    3,
                    sqlite_store(&run.dir.join("nowhere"), SECS(60)),
                    source,
                )?;
                nowhere.destination = Some(
                    target
                        .url
                        .replace(&broker::prefix(&run.tag), &format!("nowhere.{}", run.tag)),
                );
                nowhere
            },
            "publishing to a subject no stream captures",
            vec![
                format!("source \"{SOURCE}\": forward_url"),
                "no JetStream stream captures the subject".to_owned(),
            ],
        ),
    ];
    for (mut g, what, says) in checks {
        g.write_next_config()?;
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let s = second::start(
            &g,
            &format!("g{}-start", g.index),
            "",
            Some(listen),
            SECS(30),
            ctx.clock,
            &ctx.client,
        )
        .await
        .with_context(|| format!("starting a gateway {what}"))?;
        let code = s.exit.and_then(|e| e.code());
        let missing: Vec<&String> = says.iter().filter(|n| s.said(n).is_none()).collect();
        let data = run
            .dir
            .join(if g.index == 2 { "refused" } else { "nowhere" });
        notes.push(format!(
            "a start {what}: exit code {}, {} in {}; said: {}",
            code.map_or("none (killed)".to_owned(), |c| c.to_string()),
            if s.served { "served" } else { "never served" },
            ms(s.took().as_micros() as u64),
            s.last_words()
        ));
        if code != Some(2) || s.served {
            failures.push(format!(
                "a start {what} did not stop before listening with exit code 2 (exit code {code:?}, served: {})",
                s.served
            ));
        }
        if !missing.is_empty() {
            failures.push(format!(
                "a start {what} never said {missing:?}; its last words: {}",
                s.last_words()
            ));
        }
        if data.join("data").exists() {
            failures.push(format!("a start {what} created its store before stopping"));
        }
    }
    v.notes.extend(notes);
    v.failures.extend(failures);
    v.headline = Some(format!(
        "audit said: {}",
        if degraded_said(&v) { "yes" } else { "no" }
    ));
    Ok(v)
}

/// Whether the verdict holds no failure about the audit.
fn degraded_said(v: &Verdict) -> bool {
    !v.failures
        .iter()
        .any(|f| f.contains("/healthz") || f.contains("WARN") || f.contains("destinations"))
}

/// What `/healthz` said of the destinations.
#[derive(Debug, Clone, Default)]
struct Health {
    status: u16,
    overall: String,
    component: String,
    error: String,
}

impl Health {
    fn show(&self) -> String {
        format!(
            "{} {}, destinations {}{}",
            self.status,
            self.overall,
            self.component,
            if self.error.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.error.chars().take(300).collect::<String>())
            }
        )
    }
}

async fn destinations(ctx: &Ctx, url: &str) -> Health {
    let Ok((status, body)) = crate::http::get(&ctx.client, url, SECS(2)).await else {
        return Health::default();
    };
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    let text =
        |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).unwrap_or_default().to_owned();
    let component = doc
        .get("components")
        .and_then(|c| c.as_array())
        .and_then(|c| {
            c.iter()
                .find(|c| c.get("name").and_then(|n| n.as_str()) == Some("destinations"))
        });
    Health {
        status,
        overall: text(doc.get("status")),
        component: text(component.and_then(|c| c.get("status"))),
        error: text(component.and_then(|c| c.get("error"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_deliveries_are_read_from_a_log() {
        let via = Via {
            gateway: 1,
            incarnation: 2,
        };
        let log = "\
2026-12-05T02:17:24.500000Z  INFO dispatch{source=chaos event_id=evt_t1_17 attempt=3}: idemgate_gateway::dispatch: delivery failed; retrying later tries=3 delay_ms=120 error=RabbitMQ at 127.0.0.1:5: connection closed
2026-12-05T02:17:24.600000Z  INFO dispatch{source=chaos event_id=evt_t2_5 attempt=1}: idemgate_gateway::dispatch: delivery failed; retrying later tries=1 delay_ms=80 error=x
2026-12-05T02:17:24.700000Z  WARN idemgate_gateway::dispatch: dead-lettered: out of attempts or too old
";
        let base = humantime::parse_rfc3339("2026-12-05T02:17:24Z").unwrap();
        let failed = parse_failures(log, "t1", via, |t| {
            t.duration_since(base).unwrap().as_micros() as u64
        });
        assert_eq!(
            failed,
            [FailedDelivery {
                event: 17,
                attempt: 3,
                via,
                at: 500_000
            }]
        );
    }
}
