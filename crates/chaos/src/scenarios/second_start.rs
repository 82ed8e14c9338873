//! `second-start-{sqlite,postgres}`: a second `idemgate serve` on a live gateway's own config
//! (its instance name, its store) while that gateway has forwards in flight, once on the same
//! listen address and once on another port, both at once.
//!
//! The one on g1's address must fail at bind ("cannot listen"), before it touches the store.
//! The one on another port must be refused: on PostgreSQL by the store, as the instance name is
//! held by a live process whose liveness lease it sees renewed within one `instance_lease` (3 s
//! here), so it exits non-zero saying "is held by a live process"; on SQLite before it opens the
//! store, as the data directory's serve lock is held ("is in use by another process"). Neither
//! may free g1's claims (no "freed
//! the claims an earlier boot of this instance held" in any log, no `abandoned` in the history
//! of the events g1 had in flight), neither may serve, g1 must go on serving, and no event may
//! be forwarded twice.

use std::net::SocketAddr;
use std::time::Duration;

use super::{MS, SECS, Store, quick};
use crate::Ctx;
use crate::downstream::Behavior;
use crate::fault::{self, Window};
use crate::gateway::{SOURCE, SourceSpec, free_port};
use crate::run::Run;
use crate::second::{self, SecondStart};
use crate::verdict::Verdict;

/// g1's liveness lease: the other-port start waits at most about this long to see it renewed.
const INSTANCE_LEASE: Duration = Duration::from_secs(3);

/// What a boot that frees an earlier boot's claims logs.
const FREED: &str = "freed the claims an earlier boot of this instance held";

/// At most this many of g1's in-flight events have their history looked up.
const LOOKUPS: usize = 60;

pub async fn second_start(ctx: &Ctx, name: &'static str, store: Store) -> anyhow::Result<Verdict> {
    // Claims outlive the slow forwards by far: only freeing them could let a retry take one.
    let source = SourceSpec {
        lease: SECS(10),
        forward_timeout: SECS(5),
        ttl: SECS(600),
        inbox: None,
    };
    let mut run = Run::new(ctx, name, source, quick()).await?;
    let toml = store.toml(ctx, &run).await?;
    run.add_gateways(1, &toml)?;
    run.gateway(1)?.extra_toml = format!(
        "instance_lease = \"{}\"\n",
        humantime::format_duration(INSTANCE_LEASE)
    );
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    run.reach(0.25).await?;
    run.downstream.set(Behavior::normal((SECS(1), SECS(2))));
    run.note("downstream slow (1-2 s per request): g1's forwards pile up");
    tokio::time::sleep(MS(700)).await;

    let other: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    // Refused within about a lease; still running well past it, it is serving (or hung).
    let deadline = INSTANCE_LEASE * 3 + SECS(5);
    run.note(format!(
        "a second idemgate serve on g1's config (instance g1), on g1's address and on {other}"
    ));
    let g1 = run.gateway(1)?;
    let (same, moved) = tokio::join!(
        second::start(
            g1,
            "second-same-address",
            "on g1's address",
            None,
            deadline,
            ctx.clock,
            &ctx.client
        ),
        second::start(
            g1,
            "second-other-port",
            "on another port",
            Some(other),
            deadline,
            ctx.clock,
            &ctx.client
        ),
    );
    let (same, moved) = (same?, moved?);
    for s in [&same, &moved] {
        let how = match s.exit {
            Some(status) => format!("exited with {status}"),
            None => "was still running: killed".to_owned(),
        };
        run.timeline.push((
            s.ended,
            format!(
                "second start {} {how} after {}",
                s.what,
                crate::clock::ms(s.took().as_micros() as u64)
            ),
        ));
    }
    let window = Window {
        start: same.started.min(moved.started),
        end: same.ended.max(moved.ended),
    };
    run.downstream.set(quick());
    run.note("downstream quick again");
    let g1 = run.gateway(1)?;
    let alive = g1.is_running() && g1.metrics().await.is_some();
    run.settle(SECS(15)).await?;
    let mut v = run.finish().await?;

    check_refusals(&mut v, &same, &moved, store);
    if !alive {
        v.failures.push(
            "g1 no longer served after the second starts (its process gone, or /metrics unanswered)"
                .into(),
        );
    }
    if run.logged(FREED) || [&same, &moved].iter().any(|s| s.said(FREED).is_some()) {
        v.failures.push(format!(
            "a boot logged \"{FREED}\": g1's claims were freed under it"
        ));
    }
    // The events g1 had at the downstream while the second starts ran.
    let mut held: Vec<u32> = run
        .processings
        .iter()
        .filter(|p| p.via.gateway == 1 && p.received < window.end && p.answered > window.start)
        .map(|p| p.event)
        .collect();
    held.sort_unstable();
    held.dedup();
    if held.is_empty() {
        v.failures.push(
            "g1 had no forward in flight during the second starts: the scenario did not exercise it"
                .into(),
        );
    }
    let (looked, abandoned) = abandoned(&run, &held).await?;
    v.notes.push(format!(
        "g1 had {} events at the downstream during the second starts; the history of {looked} of them looked up: {} with `abandoned`",
        held.len(),
        abandoned.len()
    ));
    if !abandoned.is_empty() {
        v.failures.push(format!(
            "{} events g1 held have `abandoned` in their history (their claims were freed): {}",
            abandoned.len(),
            abandoned
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let taken = run.takeovers();
    if !taken.is_empty() {
        v.failures.push(format!(
            "{} forwards carried Idemgate-Attempt 2 or more: claims were taken over (e.g. event {})",
            taken.len(),
            taken[0].event
        ));
    }
    v.headline = Some(format!("refused in {:.1} s", moved.took().as_secs_f64()));
    v.fault = Some(fault::figures(
        "a second idemgate serve under g1's instance name, on its address and on another port",
        window,
        &run.answers,
    ));
    Ok(v)
}

/// The second start on g1's address failed at bind; the one on another port was refused: by the
/// data directory's lock (SQLite), or by the store as a live instance (PostgreSQL). Neither
/// served.
fn check_refusals(v: &mut Verdict, same: &SecondStart, moved: &SecondStart, store: Store) {
    let refusal = match store {
        Store::Sqlite => "is in use by another process",
        Store::Postgres => "is held by a live process",
    };
    for (s, expected) in [(same, "cannot listen"), (moved, refusal)] {
        v.notes.push(format!(
            "second start {} ({}): {} after {:.2} s; it said: {}",
            s.what,
            s.listen,
            match s.exit {
                Some(status) => format!("exited with {status}"),
                None => "still running at the deadline, killed".to_owned(),
            },
            s.took().as_secs_f64(),
            s.last_words()
        ));
        if s.served {
            v.failures.push(format!(
                "the second start {} served (answered /healthz, or ran past its deadline)",
                s.what
            ));
        } else if !s.refused() {
            v.failures
                .push(format!("the second start {} exited with success", s.what));
        }
        if s.said(expected).is_none() {
            v.failures.push(format!(
                "the second start {} never said \"{expected}\"; its last words: {}",
                s.what,
                s.last_words()
            ));
        }
    }
}

/// Looks up the history of (at most [`LOOKUPS`] of) `events` with `idemgate lookup --json`;
/// returns how many were looked up and those whose history has `abandoned`.
///
/// # Errors
/// When a lookup fails, or shows no `claimed` (the check would be blind).
async fn abandoned(run: &Run<'_>, events: &[u32]) -> anyhow::Result<(usize, Vec<u32>)> {
    let Some(g) = run.gateways.first() else {
        return Ok((0, Vec::new()));
    };
    let mut found = Vec::new();
    let mut looked = 0;
    for &e in events.iter().take(LOOKUPS) {
        let id = format!("evt_{}_{e}", run.tag);
        let text = g.cli(&["lookup", SOURCE, &id, "--json"]).await?;
        let outcomes = history_outcomes(&text);
        if !outcomes.iter().any(|o| o == "claimed") {
            anyhow::bail!("idemgate lookup {id} showed no `claimed` in its history: {text}");
        }
        looked += 1;
        if outcomes.iter().any(|o| o == "abandoned") {
            found.push(e);
        }
    }
    Ok((looked, found))
}

/// The outcomes of `idemgate lookup --json`'s history, in order.
fn history_outcomes(json: &str) -> Vec<String> {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|doc| {
            let history = doc.get("history")?.as_array()?.clone();
            Some(
                history
                    .iter()
                    .filter_map(|h| Some(h.get("outcome")?.as_str()?.to_owned()))
                    .collect(),
            )
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn history_outcomes_are_read_from_a_lookup() {
        let json = r#"{"event_id":"e","history":[{"attempt":1,"outcome":"claimed"},{"attempt":1,"outcome":"abandoned"}],"record":null}"#;
        assert_eq!(super::history_outcomes(json), ["claimed", "abandoned"]);
        assert!(super::history_outcomes("not json").is_empty());
    }
}
