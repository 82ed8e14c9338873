//! One scenario run: a downstream, gateways, senders, a fault script, and the verdict.
//!
//! A scenario builds a [`Run`], adds and starts its gateways, starts the load, then plays its
//! faults against the load's progress (the share of events started), so a fault lands at the
//! same point of the load whatever the sizes and the machine's speed. When the faults are over
//! it sets the senders' deadline (`settle` from then) and calls [`Run::finish`]: wait for every
//! delivery to end, let the downstream's last handlers answer, read the gateways' metrics and
//! logs, stop everything, and judge.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::Ctx;
use crate::clock::{Clock, ms};
use crate::downstream::{Behavior, Downstream, Processing};
use crate::gateway::{Env, Gateway, InboxSpec, Kill, LogSummary, SOURCE, SourceSpec};
use crate::load::{Answer, LoadSpec, Senders};
use crate::verdict::{self, Delivery, Verdict};

#[derive(Debug)]
pub struct Run<'a> {
    pub ctx: &'a Ctx,
    pub name: &'static str,
    /// Unique per scenario run: event ids are `evt_{tag}_{n}`.
    pub tag: String,
    pub dir: PathBuf,
    pub downstream: Downstream,
    pub gateways: Vec<Gateway>,
    pub kills: Vec<Kill>,
    pub timeline: Vec<(u64, String)>,
    pub source: SourceSpec,
    /// The load's events (set by [`Run::load`]).
    events: u32,
    senders: Option<Arc<Senders>>,
    load: Option<tokio::task::JoinHandle<()>>,
    /// The longest a downstream handler may still take after the last delivery.
    pub grace: Duration,
    /// `/metrics` of each gateway at the end.
    pub metrics: Vec<String>,
    /// What the downstream handled and what the senders heard (after [`Run::finish`]).
    pub processings: Vec<Processing>,
    pub answers: Vec<Answer>,
    /// Inbox mode: how [`Run::drain_inbox`] ended (`None` until it ran).
    drained: Option<Result<String, String>>,
    /// Inbox mode: the queue just before each SIGKILL of [`Run::kill_and_restart`].
    backlogs: Vec<Queue>,
}

/// An inbox source's queue, as one gateway's `/metrics` shows it (the store's, so the same
/// from every gateway on one PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Queue {
    pub pending: f64,
    pub in_flight: f64,
    pub dead: f64,
    pub oldest_pending_s: f64,
}

impl Queue {
    /// From a `/metrics` text; a queue with no item has no sample, which reads as zero.
    pub fn read(metrics: &str) -> Self {
        let label = format!("source=\"{SOURCE}\"");
        // `+ 0.0`: an empty sum is -0.0.
        let m = |name: &str| crate::http::metric(metrics, name, &label) + 0.0;
        Self {
            pending: m("idemgate_inbox_pending"),
            in_flight: m("idemgate_inbox_in_flight"),
            dead: m("idemgate_inbox_dead"),
            oldest_pending_s: m("idemgate_inbox_oldest_pending_seconds"),
        }
    }
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} pending, {} in flight, {} dead, oldest pending {:.1} s",
            self.pending, self.in_flight, self.dead, self.oldest_pending_s
        )
    }
}

impl Drop for Run<'_> {
    fn drop(&mut self) {
        if let Some(load) = self.load.take() {
            load.abort();
        }
    }
}

impl<'a> Run<'a> {
    /// A run directory, a downstream behaving as `behavior`, no gateways yet.
    ///
    /// # Errors
    /// When the directory or the downstream cannot be made.
    pub async fn new(
        ctx: &'a Ctx,
        name: &'static str,
        source: SourceSpec,
        behavior: Behavior,
    ) -> anyhow::Result<Self> {
        let dir = ctx.registry.dir().join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let short: String = name.split('-').filter_map(|w| w.chars().next()).collect();
        let tag = format!("{short}{:x}{}", ctx.seed, ctx.nonce);
        let downstream = Downstream::start(ctx.clock, &tag, ctx.seed, behavior).await?;
        Ok(Self {
            ctx,
            name,
            tag,
            dir,
            downstream,
            gateways: Vec::new(),
            kills: Vec::new(),
            timeline: Vec::new(),
            source,
            events: 0,
            senders: None,
            load: None,
            grace: Duration::from_millis(200),
            metrics: Vec::new(),
            processings: Vec::new(),
            answers: Vec::new(),
            drained: None,
            backlogs: Vec::new(),
        })
    }

    pub fn clock(&self) -> Clock {
        self.ctx.clock
    }

    /// Where this run's gateways run and what they need (for a gateway the scenario starts
    /// itself, outside the load).
    pub fn env(&self) -> Env {
        Env {
            bin: self.ctx.bin.clone(),
            dir: self.dir.clone(),
            downstream: self.downstream.addr,
            registry: self.ctx.registry.clone(),
            clock: self.ctx.clock,
            client: self.ctx.client.clone(),
            log_filter: "warn,idemgate_gateway::admin=info,idemgate_postgres=info".to_owned(),
        }
    }

    /// Adds `n` gateways on the store `store_toml` describes (indexes 1..=n).
    ///
    /// # Errors
    /// When no port is free.
    pub fn add_gateways(&mut self, n: u8, store_toml: &str) -> anyhow::Result<()> {
        let env = self.env();
        for i in 1..=n {
            let g = Gateway::new(&env, i, store_toml.to_owned(), self.source.clone())?;
            self.gateways.push(g);
        }
        Ok(())
    }

    /// Starts every gateway at once (they race to migrate a fresh store) and waits for all.
    ///
    /// # Errors
    /// When one does not become ready.
    pub async fn start_gateways(&mut self) -> anyhow::Result<()> {
        for g in &mut self.gateways {
            g.launch()?;
        }
        for g in &mut self.gateways {
            let ready = g.ready(Duration::from_secs(60)).await?;
            let via = g.via();
            self.timeline.push((ready, format!("{via} ready")));
        }
        Ok(())
    }

    /// The default load for this run's sizes.
    pub fn spec(&self) -> LoadSpec {
        let s = &self.ctx.sizes;
        LoadSpec {
            events: s.events,
            deliveries: s.deliveries,
            concurrency: s.concurrency,
            spread: Duration::from_millis(300),
            storm: 0.15,
            backoff_cap: Duration::from_secs(1),
            request_timeout: Duration::from_secs(10),
            window: None,
            min_duration: Duration::ZERO,
        }
    }

    /// Starts the senders (round-robin over the gateways).
    pub fn load(&mut self, spec: LoadSpec) -> Arc<Senders> {
        self.events = spec.events;
        let what = format!(
            "load started: {} events x {} deliveries, concurrency {}",
            spec.events, spec.deliveries, spec.concurrency
        );
        let targets = self.gateways.iter().map(|g| (g.index, g.addr())).collect();
        let senders = Senders::new(
            spec,
            self.ctx.clock,
            self.ctx.client.clone(),
            targets,
            &self.tag,
            self.ctx.seed,
        );
        self.load = Some(tokio::spawn(senders.clone().run()));
        self.senders = Some(senders.clone());
        self.note(what);
        senders
    }

    fn senders(&self) -> anyhow::Result<&Arc<Senders>> {
        self.senders.as_ref().context("the load has not started")
    }

    /// Waits until `fraction` of the events have started.
    ///
    /// # Errors
    /// When the load has not started.
    pub async fn reach(&self, fraction: f64) -> anyhow::Result<()> {
        self.senders()?.reach(fraction).await;
        Ok(())
    }

    /// Answers with `outcome` the senders heard so far to attempts sent since `since` (0 before
    /// the load started).
    pub fn heard(&self, outcome: crate::load::Outcome, since: u64) -> usize {
        self.senders.as_ref().map_or(0, |s| s.heard(outcome, since))
    }

    /// Records `what` in the timeline, at the current time and load progress.
    pub fn note(&mut self, what: impl Into<String>) {
        let progress = self
            .senders
            .as_ref()
            .map(|s| format!(" (load {:.0}%)", s.progress() * 100.0))
            .unwrap_or_default();
        let at = self.clock().now();
        let what = what.into();
        eprintln!("  [{}] {} {what}{progress}", self.name, ms(at));
        self.timeline.push((at, format!("{what}{progress}")));
    }

    /// SIGKILLs gateway `index` (1-based), leaves it down for `down_for`, starts it again.
    /// Returns the kill and when the new incarnation was ready.
    ///
    /// # Errors
    /// When it was not running or does not come back.
    pub async fn kill_and_restart(
        &mut self,
        index: u8,
        down_for: Duration,
    ) -> anyhow::Result<(Kill, u64)> {
        self.kill(index).await?;
        tokio::time::sleep(down_for).await;
        self.restart(index).await
    }

    /// SIGKILL of gateway `index` (in inbox mode, its queue just before goes into the verdict);
    /// [`Run::restart`] starts it again.
    ///
    /// # Errors
    /// When it was not running.
    pub async fn kill(&mut self, index: u8) -> anyhow::Result<()> {
        let queue = match self.source.inbox {
            Some(_) => self.queue(index).await,
            None => None,
        };
        let g = self.gateway(index)?;
        let kill = g.kill().await.context("the gateway was not running")?;
        self.backlogs.extend(queue);
        let queue = queue
            .map(|q| format!(" (inbox just before: {q})"))
            .unwrap_or_default();
        self.note(format!("SIGKILL {}{queue}", kill.via));
        self.kills.push(kill);
        Ok(())
    }

    /// Starts gateway `index` again after [`Run::kill`]; returns the kill and when it was ready.
    ///
    /// # Errors
    /// When it was not killed, or does not start.
    pub async fn restart(&mut self, index: u8) -> anyhow::Result<(Kill, u64)> {
        let now = self.clock().now();
        let kill = self.kills.last_mut().context("no gateway was killed")?;
        kill.restarted = Some(now);
        let kill = *kill;
        let g = self.gateway(index)?;
        let ready = g.start().await?;
        let via = g.via();
        self.note(format!("{via} ready (restarted)"));
        Ok((kill, ready))
    }

    /// The inbox queue as gateway `index` shows it, if it answers.
    pub async fn queue(&mut self, index: u8) -> Option<Queue> {
        let g = self.gateway(index).ok()?;
        g.metrics().await.as_deref().map(Queue::read)
    }

    /// Inbox mode, once the load ended: waits until the queue shows nothing pending or in flight
    /// and the downstream has been quiet for a while. It gives up when the downstream has got
    /// nothing for `stall` while the queue is not empty (a dispatcher retries within its
    /// `max_backoff`, 1 s here), or after 10 minutes whatever happens. How it ended goes into
    /// the verdict ([`Run::finish`]); a queue not drained fails the scenario.
    ///
    /// # Errors
    /// When the load task failed.
    pub async fn drain_inbox(&mut self, stall: Duration) -> anyhow::Result<()> {
        self.wait_load().await?;
        let quiet = Duration::from_millis(300);
        let from = self.clock().now();
        let cap = Duration::from_secs(600);
        let deadline = self.clock().after(cap);
        let indexes: Vec<u8> = self.gateways.iter().map(|g| g.index).collect();
        let mut last: Option<Queue> = None;
        let mut oldest = 0.0_f64;
        // A broker destination: the downstream gets nothing, so progress is the queue changing.
        let broker = self.gateways.iter().any(|g| g.destination.is_some());
        let mut changed = self.clock().now();
        loop {
            let mut seen = None;
            for &i in &indexes {
                if self.gateway(i).is_ok_and(|g| g.is_running())
                    && let Some(q) = self.queue(i).await
                {
                    seen = Some(q);
                    break;
                }
            }
            if let Some(q) = seen {
                oldest = oldest.max(q.oldest_pending_s);
                if q.pending + q.in_flight == 0.0 && self.downstream.quiet(quiet) {
                    let took = self.clock().now() - from;
                    self.note(format!("inbox drained ({q})"));
                    self.drained = Some(Ok(format!(
                        "the inbox drained {} after every delivery ended (oldest pending item meanwhile {oldest:.1} s old)",
                        ms(took)
                    )));
                    return Ok(());
                }
                if last.is_none_or(|l| (l.pending, l.in_flight) != (q.pending, q.in_flight)) {
                    changed = self.clock().now();
                }
                last = Some(q);
            }
            let stalled = if broker {
                self.clock().now().saturating_sub(changed) >= stall.as_micros() as u64
            } else {
                self.downstream.quiet(stall)
            };
            if stalled || self.clock().now() >= deadline {
                let what = last.map_or("no gateway answered /metrics".to_owned(), |q| {
                    format!("the queue showed {q}")
                });
                let why = if stalled && broker {
                    format!(
                        "the queue did not change for {} while it was not empty",
                        humantime::format_duration(stall)
                    )
                } else if stalled {
                    format!(
                        "the downstream got nothing for {} while it was not empty",
                        humantime::format_duration(stall)
                    )
                } else {
                    format!("not within {}", humantime::format_duration(cap))
                };
                self.note(format!("inbox not drained: {why}"));
                self.drained = Some(Err(format!(
                    "the inbox did not drain after every delivery ended ({why}): {what}"
                )));
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn gateway(&mut self, index: u8) -> anyhow::Result<&mut Gateway> {
        self.gateways
            .iter_mut()
            .find(|g| g.index == index)
            .with_context(|| format!("no gateway g{index}"))
    }

    /// Faults are over: once every event has started, deliveries may retry for `settle` more.
    ///
    /// # Errors
    /// When the load has not started.
    pub async fn settle(&mut self, settle: Duration) -> anyhow::Result<()> {
        self.reach(1.0).await?;
        let at = self.clock().after(settle);
        self.senders()?.set_deadline(at);
        self.note(format!(
            "faults over, every event started; senders retry until {} at the latest",
            ms(at)
        ));
        Ok(())
    }

    /// Waits until every delivery ended (retried to a 2xx or to the deadline), then the grace
    /// for what the gateways still finish after answering. Idempotent.
    ///
    /// # Errors
    /// When the load task failed.
    pub async fn wait_load(&mut self) -> anyhow::Result<()> {
        if let Some(load) = self.load.take() {
            load.await.context("the senders failed")?;
            self.note("every delivery ended");
            tokio::time::sleep(self.grace).await;
        }
        Ok(())
    }

    /// Waits for the load, stops everything and judges. The verdict's notes hold the timeline,
    /// the answers and what the gateways logged.
    ///
    /// # Errors
    /// When the load task failed.
    pub async fn finish(&mut self) -> anyhow::Result<Verdict> {
        self.halt().await?;
        let records = self.downstream.records();
        let delivery = match self.source.inbox {
            None => Delivery::Forward,
            Some(_) => Delivery::Inbox {
                lease_us: InboxSpec::lease(self.source.forward_timeout).as_micros() as u64,
            },
        };
        self.judge(records, delivery).await
    }

    /// Waits for the load, reads the gateways' metrics and stops them: from then on nothing
    /// reaches the destination. Idempotent.
    ///
    /// # Errors
    /// When the load task failed.
    pub async fn halt(&mut self) -> anyhow::Result<()> {
        self.wait_load().await?;
        for g in &self.gateways {
            if g.is_running()
                && let Some(m) = g.metrics().await
            {
                self.metrics.push(m);
            }
        }
        for g in &mut self.gateways {
            g.stop().await;
        }
        Ok(())
    }

    /// Judges what the destination got (`records`: the downstream's requests, or a broker's
    /// copies) against what the senders heard, once [`Run::halt`] stopped everything. The
    /// verdict's notes hold the timeline, the answers and what the gateways logged.
    ///
    /// # Errors
    /// When the load has not started.
    pub async fn judge(
        &mut self,
        records: Vec<Processing>,
        delivery: Delivery<'_>,
    ) -> anyhow::Result<Verdict> {
        let sent = self.senders()?.take();
        self.processings = records;
        self.answers = sent.answers;
        let mut v = verdict::judge(
            self.events,
            &self.processings,
            &self.answers,
            &self.kills,
            &sent.unacked,
            Some(self.source.ttl.as_micros() as u64),
            delivery,
        );
        if self.source.inbox.is_some() {
            self.judge_inbox(&mut v).await;
        }
        let mut timeline = std::mem::take(&mut self.timeline);
        timeline.sort_by_key(|(at, _)| *at);
        v.notes.extend(
            timeline
                .into_iter()
                .map(|(at, what)| format!("{}: {what}", ms(at))),
        );
        let broker = self.processings.iter().any(|p| p.stored.is_some());
        for k in self.kills.iter().filter(|_| broker) {
            let again = v
                .doubles
                .iter()
                .filter(|d| d.explained && d.kill == Some(*k))
                .count();
            v.notes.push(format!(
                "SIGKILL of {} at {}: {} events it had published were published again by a later process and kept twice by the broker",
                k.via,
                ms(k.at),
                again
            ));
        }
        for k in self.kills.iter().filter(|_| !broker) {
            let mut mid: Vec<u32> = self
                .processings
                .iter()
                .filter(|p| p.via == k.via && p.received <= k.dead && p.answered >= k.at)
                .map(|p| p.event)
                .collect();
            mid.sort_unstable();
            mid.dedup();
            let again = v
                .doubles
                .iter()
                .filter(|d| d.explained && d.kill == Some(*k))
                .count();
            v.notes.push(format!(
                "SIGKILL of {} at {}: the downstream had {} of its forwards in hand; {} events it had forwarded were processed again (taken over after the kill)",
                k.via,
                ms(k.at),
                mid.len(),
                again
            ));
        }
        let foreign = self.downstream.foreign();
        if !foreign.is_empty() {
            v.failures.push(format!(
                "the downstream got {} requests naming no event of this run, e.g. {}",
                foreign.len(),
                foreign[0]
            ));
        }
        let logs = self.log_summary();
        for (message, n) in &logs.warnings {
            v.logged.push(format!("{message} (x{n})"));
        }
        Ok(v)
    }

    /// Inbox mode: the drain, and no dead letter (the scenarios' downstreams never fail for long
    /// and `max_age` is the TTL, so any dead letter is a finding: listed with its attempts).
    async fn judge_inbox(&mut self, v: &mut Verdict) {
        match self.drained.take() {
            Some(Ok(note)) => v.notes.push(note),
            Some(Err(failure)) => v.failures.push(failure),
            None => v
                .failures
                .push("the scenario never waited for the inbox to drain".into()),
        }
        // Every gateway shows the store's one queue: the last scrape of any of them.
        let Some(queue) = self
            .metrics
            .iter()
            .map(|m| Queue::read(m))
            .reduce(|a, b| if b.dead > a.dead { b } else { a })
        else {
            v.failures
                .push("no gateway answered /metrics at the end: dead letters not counted".into());
            return;
        };
        v.notes.push(format!("inbox at the end: {queue}"));
        if !self.kills.is_empty() && self.backlogs.iter().all(|q| q.pending == 0.0) {
            v.failures.push(
                "nothing was pending in the inbox at any SIGKILL: the scenario did not kill a gateway with a backlog"
                    .into(),
            );
        }
        let mut by: std::collections::BTreeMap<crate::downstream::Via, usize> =
            std::collections::BTreeMap::new();
        for p in self.processings.iter().filter(|p| p.processed()) {
            *by.entry(p.via).or_default() += 1;
        }
        let by: Vec<String> = by.iter().map(|(via, n)| format!("{via} {n}")).collect();
        v.notes.push(format!(
            "deliveries processed, by process: {}",
            by.join(", ")
        ));
        if queue.dead > 0.0 {
            let listed = match self.gateways.first() {
                Some(g) => g
                    .cli(&["dead-letters", "--source", SOURCE])
                    .await
                    .unwrap_or_else(|e| format!("(cannot list them: {e:#})")),
                None => String::new(),
            };
            let lines: Vec<&str> = listed.lines().take(20).collect();
            v.failures.push(format!(
                "{} dead letters (idemgate_inbox_dead): {}",
                queue.dead,
                lines.join(" / ")
            ));
        }
    }

    /// What every incarnation of every gateway logged.
    pub fn log_summary(&self) -> LogSummary {
        let paths: Vec<PathBuf> = self
            .gateways
            .iter()
            .flat_map(|g| g.logs().iter().cloned())
            .collect();
        LogSummary::read(&paths)
    }

    /// The requests the downstream got with `Idemgate-Attempt` 2 or more: claims taken over (or
    /// claimed again after a release). In a scenario where no gateway is killed and the
    /// downstream never fails, each one is a retry that took a live claim over.
    pub fn takeovers(&self) -> Vec<Processing> {
        self.processings
            .iter()
            .filter(|p| p.attempt >= 2)
            .copied()
            .collect()
    }

    /// Whether any incarnation of any gateway logged a line containing `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.gateways
            .iter()
            .flat_map(|g| g.logs())
            .any(|path| std::fs::read_to_string(path).is_ok_and(|text| text.contains(needle)))
    }

    /// The sum of a metric over every gateway's last `/metrics`.
    pub fn metric(&self, name: &str, labels: &str) -> f64 {
        self.metrics
            .iter()
            .map(|m| crate::http::metric(m, name, labels))
            .sum()
    }
}

/// `[store]` for SQLite in `dir/data`.
pub fn sqlite_store(dir: &std::path::Path, sweep_interval: Duration) -> String {
    format!(
        "[store]\nkind = \"sqlite\"\npath = {:?}\nsweep_interval = \"{}\"\n",
        dir.join("data").display().to_string(),
        humantime::format_duration(sweep_interval)
    )
}

/// `[store]` for PostgreSQL at `url` in `schema`.
pub fn postgres_store(url: &str, schema: &str, expiry: &str, sweep_interval: Duration) -> String {
    format!(
        "[store]\nkind = \"postgres\"\nurl = {url:?}\nsweep_interval = \"{}\"\n\n[store.postgres]\nschema = {schema:?}\npool_size = 8\nexpiry = {expiry:?}\nsweep_batch = 100\nsweep_pause = \"10ms\"\npartition_width = \"2s\"\n",
        humantime::format_duration(sweep_interval)
    )
}
