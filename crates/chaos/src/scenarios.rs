//! The scenarios. Each starts what it needs, plays its faults against the load's progress, and
//! returns a verdict (see the crate README for what each one does and why).
//!
//! The scenarios of one fault each, timed (p99 answer time during it, recovery after it), are
//! in modules of their own: a second start under a live instance name, senders that hang up,
//! a blackholed PostgreSQL, a full disk and a stepped wall clock. So are the broker
//! destinations' (JetStream, RabbitMQ).

mod blackhole;
mod brokers;
mod clock_step;
mod full_disk;
mod hangup;
mod second_start;

pub use blackhole::postgres_blackhole;
pub use brokers::{Broker, kill as broker_kill, restart as broker_restart, short_window};
pub use clock_step::clock_step;
pub use full_disk::full_disk;
pub use hangup::hangup;
pub use second_start::second_start;

use std::time::Duration;

use anyhow::Context;

use crate::Ctx;
use crate::clock::ms;
use crate::downstream::Behavior;
use crate::gateway::{InboxSpec, SourceSpec};
use crate::redis::{Cluster, RedisServer};
use crate::run::{Run, postgres_store, sqlite_store};
use crate::verdict::Verdict;

const MS: fn(u64) -> Duration = Duration::from_millis;
const SECS: fn(u64) -> Duration = Duration::from_secs;

/// A downstream that answers 2xx within 0-40 ms.
fn quick() -> Behavior {
    Behavior::normal((MS(0), MS(40)))
}

/// Leases short enough that a killed gateway's claims are taken over within the run.
fn short_lease() -> SourceSpec {
    SourceSpec {
        lease: SECS(2),
        forward_timeout: SECS(1),
        ttl: SECS(600),
        inbox: None,
    }
}

/// SIGKILL of the only gateway at 20%, 45% and 70% of the load, restarted after 100-400 ms.
pub async fn kill(ctx: &Ctx, name: &'static str, store: Store) -> anyhow::Result<Verdict> {
    let mut run = Run::new(ctx, name, short_lease(), quick()).await?;
    let toml = store.toml(ctx, &run).await?;
    run.add_gateways(1, &toml)?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    let mut rng = crate::rng::Rng::stream(ctx.seed, 0xC1, 0);
    for at in [0.2, 0.45, 0.7] {
        run.reach(at).await?;
        let down = rng.duration(MS(100), MS(400));
        run.kill_and_restart(1, down).await?;
    }
    run.settle(SECS(15)).await?;
    run.finish().await
}

/// A downstream that takes 30-90 ms per request: the dispatchers deliver slower than the
/// senders are acknowledged, so the inbox backs up.
fn slowish() -> Behavior {
    Behavior::normal((MS(30), MS(90)))
}

/// An inbox source whose dispatcher delivers `concurrency` at once per gateway (timeout 1 s,
/// `max_age` the 600 s TTL).
fn inbox_source(concurrency: u32) -> SourceSpec {
    SourceSpec {
        inbox: Some(InboxSpec {
            concurrency,
            max_attempts: None,
        }),
        ..short_lease()
    }
}

/// Inbox mode: the senders are answered `queued` at once while the dispatcher (4 at a time)
/// delivers to a slowish downstream; the gateway is SIGKILLed at 20%, 45% and 70% of the load
/// (a backlog queued) and restarted after 100-400 ms. Then the inbox must drain.
pub async fn inbox_kill(ctx: &Ctx, name: &'static str, store: Store) -> anyhow::Result<Verdict> {
    let mut run = Run::new(ctx, name, inbox_source(4), slowish()).await?;
    let toml = store.toml(ctx, &run).await?;
    run.add_gateways(1, &toml)?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    let mut rng = crate::rng::Rng::stream(ctx.seed, 0x1B0C, 0);
    for at in [0.2, 0.45, 0.7] {
        run.reach(at).await?;
        let down = rng.duration(MS(100), MS(400));
        run.kill_and_restart(1, down).await?;
    }
    run.settle(SECS(15)).await?;
    run.drain_inbox(SECS(30)).await?;
    run.finish().await
}

/// Inbox mode on three gateways sharing one private PostgreSQL queue (their own instance
/// names, 2 deliveries at once each), deliveries round-robin, g2 SIGKILLed at 40% and
/// restarted after 300 ms. Then the inbox must drain, every gateway having delivered.
pub async fn inbox_multi_postgres(ctx: &Ctx) -> anyhow::Result<Verdict> {
    let mut run = Run::new(ctx, "inbox-multi-postgres", inbox_source(2), slowish()).await?;
    let pg = ctx.postgres().await?;
    run.add_gateways(
        3,
        &postgres_store(&pg.url(), &schema(&run), "batched", SECS(60)),
    )?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    run.reach(0.4).await?;
    run.kill_and_restart(2, MS(300)).await?;
    run.settle(SECS(15)).await?;
    run.drain_inbox(SECS(30)).await?;
    let mut v = run.finish().await?;
    for g in 1..=3 {
        if !run
            .processings
            .iter()
            .any(|p| p.via.gateway == g && p.processed())
        {
            v.failures.push(format!(
                "g{g} delivered nothing: the gateways did not share the queue"
            ));
        }
    }
    Ok(v)
}

/// Which store a scenario's gateways use.
#[derive(Debug, Clone, Copy)]
pub enum Store {
    Sqlite,
    Postgres,
}

impl Store {
    async fn toml(self, ctx: &Ctx, run: &Run<'_>) -> anyhow::Result<String> {
        Ok(match self {
            Self::Sqlite => sqlite_store(&run.dir, SECS(60)),
            Self::Postgres => {
                let pg = ctx.postgres().await?;
                postgres_store(&pg.url(), &schema(run), "batched", SECS(60))
            }
        })
    }
}

fn schema(run: &Run<'_>) -> String {
    format!("chaos_{}", run.tag)
}

/// Short TTLs, so rows really expire during the run: every delivery of an event is sent within
/// `window` of its first and answered within `timeout`, and `window + timeout <= ttl`, so no
/// delivery can legitimately arrive after its record expired.
struct ShortTtl {
    source: SourceSpec,
    window: Duration,
    timeout: Duration,
    min_duration: Duration,
}

fn short_ttl() -> ShortTtl {
    ShortTtl {
        source: SourceSpec {
            lease: MS(1_500),
            forward_timeout: MS(700),
            ttl: SECS(6),
            inbox: None,
        },
        window: SECS(4),
        timeout: SECS(2),
        min_duration: SECS(8),
    }
}

fn short_ttl_spec(run: &Run<'_>, t: &ShortTtl) -> crate::load::LoadSpec {
    let mut spec = run.spec();
    spec.window = Some(t.window);
    spec.request_timeout = t.timeout;
    spec.min_duration = t.min_duration;
    spec.backoff_cap = MS(500);
    spec
}

/// Three gateways on one private PostgreSQL (their own instance names), deliveries round-robin,
/// sweeping every second with 6 s TTLs, g2 SIGKILLed at 40% and restarted.
pub async fn multi_postgres(
    ctx: &Ctx,
    name: &'static str,
    expiry: &str,
) -> anyhow::Result<Verdict> {
    let t = short_ttl();
    let mut run = Run::new(ctx, name, t.source.clone(), quick()).await?;
    let pg = ctx.postgres().await?;
    run.add_gateways(
        3,
        &postgres_store(&pg.url(), &schema(&run), expiry, SECS(1)),
    )?;
    run.start_gateways().await?;
    let spec = short_ttl_spec(&run, &t);
    run.load(spec);
    run.reach(0.4).await?;
    run.kill_and_restart(2, MS(300)).await?;
    run.settle(SECS(10)).await?;
    let mut v = run.finish().await?;
    let logs = run.log_summary();
    v.notes.push(format!(
        "sweep runs {} (across the three gateways), rows swept {}, dedup partitions dropped {}, failed runs {}, longest run {} ms",
        logs.sweep_runs, logs.swept_rows, logs.partitions_dropped, logs.sweep_failures, logs.longest_sweep_ms
    ));
    if logs.sweep_failures > 0 {
        v.failures.push(format!(
            "{} sweep runs failed: sweeping or partition maintenance from several instances conflicted (see the gateway warnings)",
            logs.sweep_failures
        ));
    }
    match expiry {
        "partitioned" if logs.partitions_dropped == 0 => v.failures.push(
            "no dedup partition was dropped: the scenario did not exercise partition maintenance"
                .into(),
        ),
        "batched" if logs.swept_rows == 0 => v
            .failures
            .push("no expired row was swept: the scenario did not exercise the sweeper".into()),
        _ => {}
    }
    if let Ok(live) = pg
        .psql(&format!("SELECT count(*) FROM {}.dedup", schema(&run)))
        .await
    {
        v.notes
            .push(format!("dedup rows left in the table at the end: {live}"));
    }
    Ok(v)
}

/// Three gateways on a private 3-master Redis Cluster store, round-robin, g2 SIGKILLed at 40%.
pub async fn multi_redis(ctx: &Ctx) -> anyhow::Result<Verdict> {
    crate::redis::available().await?;
    let t = short_ttl();
    let mut run = Run::new(ctx, "multi-redis", t.source.clone(), quick()).await?;
    let mut cluster = Cluster::start(&run.dir, ctx.registry.clone()).await?;
    let nodes: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
    let toml = format!(
        "[store]\nkind = \"redis\"\n\n[store.redis]\ncluster_nodes = [{}]\nkey_prefix = \"chaos:{}:\"\n",
        nodes.join(", "),
        run.tag
    );
    run.add_gateways(3, &toml)?;
    run.start_gateways().await?;
    let spec = short_ttl_spec(&run, &t);
    run.load(spec);
    run.reach(0.4).await?;
    run.kill_and_restart(2, MS(300)).await?;
    run.settle(SECS(10)).await?;
    let v = run.finish().await;
    cluster.stop().await;
    v
}

/// The only gateway on a private PostgreSQL: `pg_ctl restart -m fast` at 25%, then a stop of 3 s
/// at 60%.
pub async fn postgres_restart(ctx: &Ctx) -> anyhow::Result<Verdict> {
    let mut run = Run::new(ctx, "postgres-restart", short_lease(), quick()).await?;
    let pg = ctx.postgres().await?;
    run.add_gateways(
        1,
        &postgres_store(&pg.url(), &schema(&run), "batched", SECS(60)),
    )?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    run.reach(0.25).await?;
    run.note("pg_ctl restart -m fast");
    pg.restart_fast().await?;
    run.note("PostgreSQL back");
    run.reach(0.6).await?;
    run.note("pg_ctl stop -m fast");
    pg.stop_fast().await?;
    tokio::time::sleep(SECS(3)).await;
    run.note("pg_ctl start");
    pg.start_again().await?;
    run.note("PostgreSQL back");
    run.settle(SECS(20)).await?;
    // Every completion the store missed during the outages was retried until it took it: once
    // the load is over, no record may be left processing.
    run.wait_load().await?;
    let left = pg
        .psql(&format!(
            "SELECT event_id || ' (attempt ' || attempt || ', first seen ' || round(extract(epoch FROM now() - first_seen)::numeric, 1) || ' s ago, lease ' || round(extract(epoch FROM lease_until - now())::numeric, 1) || ' s)' FROM {}.dedup WHERE state = 'processing' ORDER BY event_id",
            schema(&run)
        ))
        .await?;
    let left: Vec<&str> = left.lines().filter(|l| !l.is_empty()).collect();
    let processing = left.len().to_string();
    let mut verdict = run.finish().await?;
    verdict.notes.push(format!(
        "records left processing after the load: {processing}"
    ));
    if processing != "0" {
        verdict.failures.push(format!(
            "{processing} records were left processing once the load ended (a completion or release the store missed was not retried): {}",
            left.iter().take(10).copied().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(verdict)
}

/// SQLite behind a Redis tier on a private redis-server: FLUSHALL at 15% and 30%, maxmemory 1mb
/// with allkeys-lru from 45% to 65%, a restart (down 1.5 s) at 75%. Deliveries spread over 1 s
/// so that many repeats come after the first completed, through the tier; three times the
/// concurrency, since each event now lasts that long.
pub async fn redis_tier(ctx: &Ctx) -> anyhow::Result<Verdict> {
    crate::redis::available().await?;
    let mut run = Run::new(ctx, "redis-tier", short_lease(), quick()).await?;
    let mut redis = RedisServer::start(&run.dir, "redis", &[], ctx.registry.clone()).await?;
    let toml = format!(
        "{}\n[store.redis]\nurl = {:?}\nkey_prefix = \"chaos:{}:\"\n",
        sqlite_store(&run.dir, SECS(60)),
        redis.url(),
        run.tag
    );
    run.add_gateways(1, &toml)?;
    run.start_gateways().await?;
    let mut spec = run.spec();
    spec.spread = MS(1_000);
    spec.concurrency *= 3;
    run.load(spec);
    let result = async {
        for at in [0.15, 0.3] {
            run.reach(at).await?;
            redis.cli(&["FLUSHALL"]).await?;
            run.note("FLUSHALL");
        }
        run.reach(0.45).await?;
        redis
            .cli(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
            .await?;
        redis.cli(&["CONFIG", "SET", "maxmemory", "1mb"]).await?;
        run.note("maxmemory 1mb, allkeys-lru");
        run.reach(0.65).await?;
        redis.cli(&["CONFIG", "SET", "maxmemory", "0"]).await?;
        redis
            .cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
            .await?;
        let evicted = redis.cli(&["INFO", "stats"]).await.unwrap_or_default();
        let evicted = evicted
            .lines()
            .find_map(|l| l.strip_prefix("evicted_keys:"))
            .unwrap_or("?")
            .trim()
            .to_owned();
        run.note(format!("maxmemory off again ({evicted} keys evicted)"));
        run.reach(0.75).await?;
        run.note("redis-server stopped (SHUTDOWN NOSAVE)");
        redis.restart(MS(1_500)).await?;
        run.note("redis-server started again, empty");
        run.settle(SECS(15)).await?;
        run.finish().await
    }
    .await;
    redis.stop().await;
    let mut v = result?;
    let (hit, miss, error, bypassed) = (
        run.metric("idemgate_redis_tier_total", "\"hit\""),
        run.metric("idemgate_redis_tier_total", "\"miss\""),
        run.metric("idemgate_redis_tier_total", "\"error\""),
        run.metric("idemgate_redis_tier_total", "\"bypassed\""),
    );
    v.notes.push(format!(
        "tier (last gateway process): {hit} hits, {miss} misses, {error} errors, {bypassed} bypassed"
    ));
    if hit == 0.0 {
        v.failures
            .push("the Redis tier answered no duplicate: the scenario did not exercise it".into());
    }
    Ok(v)
}

/// SQLite with a 3 s TTL and a sweep every second, beside the claims, for at least 6 s of load.
pub async fn sweeper(ctx: &Ctx) -> anyhow::Result<Verdict> {
    let t = ShortTtl {
        source: SourceSpec {
            lease: SECS(1),
            forward_timeout: MS(500),
            ttl: SECS(3),
            inbox: None,
        },
        window: MS(1_500),
        timeout: MS(1_500),
        min_duration: SECS(6),
    };
    let mut run = Run::new(ctx, "sweeper", t.source.clone(), quick()).await?;
    run.add_gateways(1, &sqlite_store(&run.dir, SECS(1)))?;
    run.start_gateways().await?;
    let spec = short_ttl_spec(&run, &t);
    run.load(spec);
    run.settle(SECS(10)).await?;
    let mut v = run.finish().await?;
    let logs = run.log_summary();
    v.notes.push(format!(
        "sweep runs {}, rows swept {}, failed runs {}, longest run {} ms (sweep_interval 1s)",
        logs.sweep_runs, logs.swept_rows, logs.sweep_failures, logs.longest_sweep_ms
    ));
    if logs.swept_rows == 0 {
        v.failures
            .push("no expired row was swept: the scenario did not exercise the sweeper".into());
    }
    if logs.sweep_failures > 0 {
        v.failures
            .push(format!("{} sweep runs failed", logs.sweep_failures));
    }
    Ok(v)
}

/// The downstream answers 500 for 1.5 s from 20%, then hangs 1.2 s (forward_timeout 500 ms) on
/// every request for 1.5 s from 55%.
pub async fn downstream(ctx: &Ctx) -> anyhow::Result<Verdict> {
    let source = SourceSpec {
        lease: MS(1_500),
        forward_timeout: MS(500),
        ttl: SECS(600),
        inbox: None,
    };
    let mut run = Run::new(ctx, "downstream", source, quick()).await?;
    run.add_gateways(1, &sqlite_store(&run.dir, SECS(60)))?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    run.reach(0.2).await?;
    run.downstream.set(Behavior {
        fail: Some(500),
        ..quick()
    });
    run.note("downstream answers 500");
    tokio::time::sleep(MS(1_500)).await;
    run.downstream.set(quick());
    run.note("downstream answers 2xx again");
    run.reach(0.55).await?;
    run.downstream.set(Behavior {
        hang: Some(MS(1_200)),
        ..quick()
    });
    run.note("downstream hangs 1.2 s on every request (then 503)");
    tokio::time::sleep(MS(1_500)).await;
    run.downstream.set(quick());
    run.note("downstream answers 2xx again");
    run.grace = MS(1_400);
    run.settle(SECS(15)).await?;
    let mut v = run.finish().await?;
    let count = |status: u16| {
        run.processings
            .iter()
            .filter(|p| p.status == status)
            .count()
    };
    let (failed, hung) = (count(500), count(503));
    v.notes.push(format!(
        "downstream answered 500 to {failed} requests and hung on {hung}"
    ));
    if failed == 0 || hung == 0 {
        v.failures.push(format!(
            "a fault never hit a request (500s: {failed}, hangs: {hung})"
        ));
    }
    Ok(v)
}

/// Crash recovery: one SQLite gateway with a 30 s lease; the downstream turns slow (0.6-1.5 s)
/// at 30% so deliveries pile up mid-forward, the gateway is SIGKILLed 800 ms later and restarted
/// at once (the downstream quick again). Measured: from the restarted gateway answering
/// /healthz until the retry of each event that was mid-delivery at the kill is processed.
pub async fn recovery(ctx: &Ctx) -> anyhow::Result<Verdict> {
    let source = SourceSpec {
        lease: SECS(30),
        forward_timeout: SECS(5),
        ttl: SECS(600),
        inbox: None,
    };
    let lease = source.lease;
    let mut run = Run::new(ctx, "recovery", source, quick()).await?;
    run.add_gateways(1, &sqlite_store(&run.dir, SECS(60)))?;
    run.start_gateways().await?;
    let mut spec = run.spec();
    // Senders retry often, so the figure is the gateway's, not a sender's backoff.
    spec.backoff_cap = MS(200);
    run.load(spec);
    run.reach(0.3).await?;
    run.downstream.set(Behavior::normal((MS(600), MS(1_500))));
    run.note("downstream slow (0.6-1.5 s)");
    tokio::time::sleep(MS(800)).await;
    let before = run.gateway(1)?.via();
    let mut kill = run
        .gateway(1)?
        .kill()
        .await
        .context("the gateway was not running")?;
    run.note(format!("SIGKILL {before}"));
    run.downstream.set(quick());
    kill.restarted = Some(run.clock().now());
    run.kills.push(kill);
    let ready = run.gateway(1)?.start().await?;
    let after = run.gateway(1)?.via();
    run.note(format!("{after} ready (restarted)"));
    run.settle(lease + SECS(15)).await?;
    run.grace = MS(1_600);
    let mut v = run.finish().await?;

    // Mid-delivery at the kill: the downstream had the request from the killed process and had
    // not answered yet.
    let mut mid: Vec<u32> = run
        .processings
        .iter()
        .filter(|p| p.via == before && p.received < kill.at && p.answered >= kill.at)
        .map(|p| p.event)
        .collect();
    mid.sort_unstable();
    mid.dedup();
    let mut times: Vec<u64> = Vec::new();
    let mut never = 0;
    for e in &mid {
        match run
            .processings
            .iter()
            .filter(|p| p.event == *e && p.via == after && p.processed())
            .map(|p| p.answered)
            .min()
        {
            Some(at) => times.push(at.saturating_sub(ready)),
            None => never += 1,
        }
    }
    times.sort_unstable();
    let target = ctx.recovery_target.as_micros() as u64;
    if mid.is_empty() {
        v.failures
            .push("no delivery was mid-forward at the kill: nothing was measured".into());
    } else if never > 0 {
        v.failures.push(format!(
            "{never} of the {} events mid-delivery at the kill were never processed by {after}",
            mid.len()
        ));
    }
    if let (Some(&max), Some(&median)) = (times.last(), times.get(times.len() / 2)) {
        v.headline = Some(format!("recovery {:.2} s", max as f64 / 1e6));
        v.notes.push(format!(
            "crash recovery: {} events mid-delivery at the SIGKILL; from {after} ready to each one's retry processed: median {}, max {} (target {}, lease {})",
            mid.len(),
            ms(median),
            ms(max),
            ms(target),
            humantime::format_duration(lease)
        ));
        if max > target {
            v.failures.push(format!(
                "crash recovery took {:.2} s, above the {:.2} s target",
                max as f64 / 1e6,
                target as f64 / 1e6
            ));
        }
    }
    Ok(v)
}
