//! `clock-step`: the gateway (SQLite) runs under libfaketime, its monotonic clock untouched.
//! At 30% of the load the downstream turns slow (0.6-1.5 s) so that claims are live, and 800 ms
//! later the gateway's wall clock steps `--clock-step` (+2 min) ahead, as NTP or an operator
//! steps a host's clock; 2 s later the downstream is quick again.
//!
//! Claims have a 30 s lease: judged by the stepped wall clock, every live claim would have
//! lapsed, and the senders' retries would take them over and forward the events again. The
//! SQLite store keeps its own steady clock, so expected: no retry takes a live claim over (no
//! `Idemgate-Attempt` 2 at the downstream), nothing processed twice, and the gateway logs "the
//! host's wall clock stepped". That the step reached the gateway is checked on its `Date`
//! header; the section also gives its `idemgate_clock_step_seconds` at the end.
//!
//! The gateway also runs an `Idempotency-Key` sidecar on the store (see `keyed`), whose clients
//! send new keys through it from the start to a second after the fault. With the downstream,
//! its upstream turns slow (3.5 s a creation, longer than the clients wait): clients hang up
//! mid-request and send the key again while its first request is still at the upstream, after
//! the step too. Expected: those copies are answered 409 and then the first answer, replayed; the
//! upstream creates every key once (a copy that took the live claim over would create it again).

use std::time::Duration;

use super::{MS, SECS, quick};
use crate::Ctx;
use crate::downstream::Behavior;
use crate::faketime::{FakeClock, ahead_of_host};
use crate::fault::{self, Window};
use crate::gateway::SourceSpec;
use crate::keyed::{self, Sidecar};
use crate::run::{Run, sqlite_store};
use crate::verdict::Verdict;

/// How long the sidecar's upstream takes a creation during the fault: longer than its clients
/// wait ([`keyed::CLIENT_WAIT`]).
const SLOW_UPSTREAM: Duration = Duration::from_millis(3_500);
/// What the SQLite store logs when it sees the wall clock step.
const STEPPED: &str = "the host's wall clock stepped";

pub async fn clock_step(ctx: &Ctx) -> anyhow::Result<Verdict> {
    let source = SourceSpec {
        lease: SECS(30),
        forward_timeout: SECS(5),
        ttl: SECS(600),
        inbox: None,
    };
    let mut run = Run::new(ctx, "clock-step", source, quick()).await?;
    let fake = FakeClock::new(&run.dir)?;
    run.add_gateways(1, &sqlite_store(&run.dir, SECS(60)))?;
    run.gateway(1)?.extra_env = fake.env();
    let sidecar = Sidecar::add(&mut run, 1).await?;
    run.start_gateways().await?;
    let url = format!("http://{}/healthz", run.gateway(1)?.addr());
    let before = gateway_ahead(ctx, &url).await;
    let spec = run.spec();
    run.load(spec);
    let clients = sidecar.clients(&run);
    run.reach(0.3).await?;
    run.downstream.set(Behavior::normal((MS(600), MS(1_500))));
    sidecar.upstream.set_create_time(SLOW_UPSTREAM);
    run.note(format!(
        "downstream slow (0.6-1.5 s): claims are live; the sidecar's upstream slow ({} a creation, longer than its clients wait)",
        humantime::format_duration(SLOW_UPSTREAM)
    ));
    tokio::time::sleep(MS(800)).await;
    fake.step(ctx.clock_step)?;
    let start = run.clock().now();
    run.note(format!(
        "the gateway's wall clock stepped +{} (its monotonic clock untouched)",
        humantime::format_duration(ctx.clock_step)
    ));
    let after = gateway_ahead(ctx, &url).await;
    tokio::time::sleep(SECS(2)).await;
    run.downstream.set(quick());
    sidecar.upstream.set_create_time(keyed::CREATE);
    let end = run.clock().now();
    run.note("downstream and upstream quick again");
    let ends = sidecar.finish(&mut run, clients).await;
    run.grace = MS(1_700);
    run.settle(SECS(15)).await?;
    let mut v = run.finish().await?;
    // Clients hung up on the slow upstream, and their copies sent meanwhile were answered 409.
    sidecar.judge(&mut v, &ends, "no answer");
    if keyed::answered(&ends, "409") == 0 {
        v.failures.push(
            "no copy of a key sent while its first request was at the slow upstream was answered 409"
                .into(),
        );
    }

    let show = |a: &Result<i64, String>| match a {
        Ok(s) => format!("{s:+} s"),
        Err(e) => format!("unknown ({e})"),
    };
    v.notes.push(format!(
        "the gateway's Date header against the host's clock: {} before the step, {} after",
        show(&before),
        show(&after)
    ));
    let step = ctx.clock_step.as_secs() as i64;
    if !after.as_ref().is_ok_and(|&a| (a - step).abs() <= 5) {
        v.failures.push(format!(
            "the step did not reach the gateway: its Date header read {} after it, not +{step} s (libfaketime not in effect?)",
            show(&after)
        ));
    }
    let seen = run.logged(STEPPED);
    v.notes.push(format!(
        "the gateway logged \"{STEPPED}\": {}",
        if seen { "yes" } else { "no" }
    ));
    if !seen {
        v.failures
            .push(format!("the gateway never logged \"{STEPPED}\""));
    }
    let metric = "idemgate_clock_step_seconds";
    v.notes
        .push(if run.metrics.iter().any(|m| m.contains(metric)) {
            format!("{metric} at the end: {}", run.metric(metric, ""))
        } else {
            format!("{metric}: not in the gateway's /metrics")
        });
    let taken = run.takeovers();
    v.notes.push(format!(
        "retries that took a claim over (Idemgate-Attempt 2 or more at the downstream): {}",
        taken.len()
    ));
    if !taken.is_empty() {
        v.failures.push(format!(
            "{} retries took a live claim over after the step (e.g. event {}): leases were judged by the stepped wall clock",
            taken.len(),
            taken[0].event
        ));
    }
    v.headline = Some(format!(
        "step logged: {}, takeovers: {}",
        if seen { "yes" } else { "no" },
        taken.len()
    ));
    v.fault = Some(fault::figures(
        format!(
            "wall clock stepped +{}, downstream slow",
            humantime::format_duration(ctx.clock_step)
        ),
        Window { start, end },
        &run.answers,
    ));
    Ok(v)
}

/// How far the gateway's `Date` is ahead of the host's clock, in seconds.
async fn gateway_ahead(ctx: &Ctx, url: &str) -> Result<i64, String> {
    let date = crate::http::date(&ctx.client, url, Duration::from_secs(2)).await?;
    ahead_of_host(&date).ok_or_else(|| format!("cannot read the Date header {date:?}"))
}
