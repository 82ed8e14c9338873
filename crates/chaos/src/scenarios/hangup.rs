//! `hangup`: the downstream takes longer (1.4-1.6 s) than the senders wait (1 s), so every
//! sender hangs up mid-forward and retries. The gateway must leave each forward to settle on
//! its own answer: the retries are answered 409 `in_flight` while it runs, then 200
//! `duplicate`, and each event reaches the downstream exactly once.

use std::time::Duration;

use super::{MS, SECS, quick};
use crate::Ctx;
use crate::downstream::Behavior;
use crate::fault::{self, Window};
use crate::gateway::SourceSpec;
use crate::load::Outcome;
use crate::run::{Run, sqlite_store};
use crate::verdict::Verdict;

/// How long a sender waits for an answer before it hangs up.
const SENDER_WAIT: Duration = Duration::from_secs(1);
/// How long the downstream takes meanwhile: always longer than the senders wait.
const SLOW: (Duration, Duration) = (Duration::from_millis(1_400), Duration::from_millis(1_600));
/// How long the downstream stays that slow.
const FOR: Duration = Duration::from_secs(3);

pub async fn hangup(ctx: &Ctx) -> anyhow::Result<Verdict> {
    // forward_timeout above the downstream's time (and below limits.request_timeout, 30 s by
    // default, as the gateway requires); the lease above both.
    let source = SourceSpec {
        lease: SECS(5),
        forward_timeout: SECS(3),
        ttl: SECS(600),
        inbox: None,
    };
    let mut run = Run::new(ctx, "hangup", source, quick()).await?;
    run.add_gateways(1, &sqlite_store(&run.dir, SECS(60)))?;
    run.start_gateways().await?;
    let mut spec = run.spec();
    spec.request_timeout = SENDER_WAIT;
    spec.backoff_cap = MS(300);
    // Three times the events at once, so that many are mid-forward while the downstream is slow.
    spec.concurrency *= 3;
    run.load(spec);
    run.reach(0.2).await?;
    let start = run.clock().now();
    run.downstream.set(Behavior::normal(SLOW));
    run.note(format!(
        "downstream takes 1.4-1.6 s per request, longer than the senders wait ({} s): they hang up and retry",
        SENDER_WAIT.as_secs()
    ));
    tokio::time::sleep(FOR).await;
    run.downstream.set(quick());
    let end = run.clock().now();
    run.note("downstream quick again");
    run.grace = SLOW.1 + MS(200);
    run.settle(SECS(15)).await?;
    let mut v = run.finish().await?;

    let count = |o: Outcome| run.answers.iter().filter(|a| a.outcome == o).count();
    let (hung_up, in_flight, duplicate) = (
        count(Outcome::Timeout),
        count(Outcome::InFlight),
        count(Outcome::Duplicate),
    );
    let outlived = run
        .processings
        .iter()
        .filter(|p| p.processed() && p.answered - p.received > SENDER_WAIT.as_micros() as u64)
        .count();
    v.notes.push(format!(
        "senders hung up {hung_up} times; retries answered in_flight {in_flight} times, duplicate {duplicate}; the downstream processed {outlived} forwards after their sender had hung up"
    ));
    if hung_up == 0 || in_flight == 0 || outlived == 0 {
        v.failures.push(format!(
            "the fault did not hit: {hung_up} hang-ups, {in_flight} in_flight answers, {outlived} forwards outliving their sender"
        ));
    }
    let taken = run.takeovers();
    if !taken.is_empty() {
        v.failures.push(format!(
            "{} forwards carried Idemgate-Attempt 2 or more: a hang-up released (or let go of) a claim the downstream had (e.g. event {})",
            taken.len(),
            taken[0].event
        ));
    }
    v.fault = Some(fault::figures(
        "the downstream slower (1.4-1.6 s) than the senders wait (1 s)",
        Window { start, end },
        &run.answers,
    ));
    Ok(v)
}
