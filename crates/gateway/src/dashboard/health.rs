//! The health row: each component green, amber or red, with the reason in words.

use std::time::Duration;

use idemgate_core::StoreStats;
use idemgate_core::inbox::InboxStats;

use super::SweepRun;
use crate::AppState;

/// A health light: green, amber or red, with the reason in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Light {
    Green,
    Amber,
    Red,
    /// Not configured, or not needed: nothing to judge.
    Off,
}

/// A judgement's light, the same for every component judged as `/healthz` judges it.
impl From<crate::verdict::Level> for Light {
    fn from(level: crate::verdict::Level) -> Self {
        match level {
            crate::verdict::Level::Ok => Self::Green,
            crate::verdict::Level::Warn => Self::Amber,
            crate::verdict::Level::Bad => Self::Red,
        }
    }
}

/// One component's health in the header row.
#[derive(Debug, Clone)]
pub(super) struct Health {
    pub(super) name: &'static str,
    pub(super) light: Light,
    pub(super) why: String,
}

/// The store's light from its lookup's answer (see [`crate::admin::ping_store`]).
pub(super) fn store_health(ping: &Result<(), String>, took: Duration) -> Health {
    let ms = took.as_secs_f64() * 1_000.0;
    let (light, why) = match ping {
        Err(e) => (Light::Red, format!("does not answer: {e}")),
        Ok(()) if took > Duration::from_millis(250) => (
            Light::Amber,
            format!("answers, slowly: a lookup took {ms:.0} ms"),
        ),
        Ok(()) => (Light::Green, format!("answers: a lookup took {ms:.1} ms")),
    };
    Health {
        name: "store",
        light,
        why,
    }
}

pub(super) fn tier_health(
    ping: Option<&Result<(), String>>,
    counts: Option<crate::metrics::TierCounts>,
) -> Health {
    let rate = counts.map(|c| super::page::hit_rate(c.hits, c.misses));
    let (light, why) = match ping {
        None => (Light::Off, "no Redis tier configured".to_owned()),
        Some(Err(e)) => (
            Light::Red,
            format!("does not answer ({e}): claims go to the store alone, slower"),
        ),
        Some(Ok(())) => match counts {
            Some(c) if c.errors > 0 || c.bypassed > 0 => (
                Light::Amber,
                format!(
                    "answers now; since start {} errors and {} claims bypassed it; hit rate {}",
                    c.errors,
                    c.bypassed,
                    rate.unwrap_or_default()
                ),
            ),
            _ => (
                Light::Green,
                format!("answers; hit rate {}", rate.unwrap_or_default()),
            ),
        },
    };
    Health {
        name: "Redis tier",
        light,
        why,
    }
}

pub(super) fn sweeper_health(
    state: &AppState,
    sweeps: &[SweepRun],
    stats: Option<&StoreStats>,
) -> Health {
    let every = state.dashboard.sweep_interval;
    let human = |d: Duration| idemgate_core::Human(Duration::from_secs(d.as_secs())).to_string();
    let backlog = stats.map_or(0, |s| s.expired);
    let (light, why) = if idemgate_core::Capabilities::sweep(&state.store).is_none() {
        (
            Light::Off,
            format!(
                "not needed: {} expires its keys itself",
                match state.store.engine() {
                    "redis" => "Redis",
                    _ => "the store",
                }
            ),
        )
    } else {
        match sweeps.first() {
            None => (
                Light::Amber,
                format!(
                    "no run yet (one runs at start, then every {})",
                    human(every)
                ),
            ),
            Some(SweepRun {
                error: Some(e), at, ..
            }) => (
                Light::Red,
                format!("the last run, {} ago, failed: {e}", human(at.elapsed())),
            ),
            Some(run) if run.at.elapsed() > every.saturating_mul(3) + Duration::from_secs(5) => (
                Light::Amber,
                format!(
                    "silent: the last run was {} ago, runs are due every {}",
                    human(run.at.elapsed()),
                    human(every)
                ),
            ),
            Some(run) if backlog > 0 && backlog > stats.map_or(0, |s| s.live) => (
                Light::Amber,
                format!(
                    "behind: {backlog} expired records wait, more than the live ones; the last run {} ago deleted {}",
                    human(run.at.elapsed()),
                    run.rows
                ),
            ),
            Some(run) => (
                Light::Green,
                format!(
                    "the last run, {} ago, deleted {} expired records in {} ms",
                    human(run.at.elapsed()),
                    run.rows,
                    run.elapsed.as_millis()
                ),
            ),
        }
    };
    Health {
        name: "sweeper",
        light,
        why,
    }
}

pub(super) fn inbox_health(state: &AppState, inbox: &[InboxStats]) -> Health {
    // One judgement with `/healthz`'s, so the two cannot disagree; a stopped dispatcher too.
    let queues = crate::health::inbox(state, inbox);
    let dispatchers = crate::health::dispatchers(state);
    let worst = if dispatchers.level > queues.level {
        dispatchers
    } else {
        queues
    };
    Health {
        name: "inbox",
        light: worst.level.into(),
        why: worst.why,
    }
}

/// The history archive, judged as `/healthz` judges it. `None` without one.
pub(super) fn archive_health(state: &AppState) -> Option<Health> {
    let verdict = crate::health::archive(state)?;
    Some(Health {
        name: "history archive",
        light: verdict.level.into(),
        why: verdict.why,
    })
}

/// The supervised background tasks, judged as `/healthz` judges them.
pub(super) fn tasks_health(state: &AppState) -> Health {
    let verdict = state.tasks.verdict();
    Health {
        name: "background tasks",
        light: verdict.level.into(),
        why: verdict.why,
    }
}

/// The broker destinations' window audits, judged as `/healthz` judges them. `None` when no
/// source publishes to a broker.
pub(super) fn destination_health(state: &AppState) -> Option<Health> {
    let verdict = crate::health::destinations(state)?;
    Some(Health {
        name: "broker windows",
        light: verdict.level.into(),
        why: verdict.why,
    })
}

/// The TTLs the advisor judged too short (late duplicates, a p99 gap near the TTL, a queue lag
/// past its margin): red, naming each source and why; green when none is.
pub(super) fn ttl_health(advised: &super::Advised) -> Health {
    use idemgate_core::advise::Verdict;
    let short: Vec<String> = advised
        .sources
        .iter()
        .filter_map(|(a, _)| match &a.verdict {
            Verdict::TooShort { why } => Some(format!(
                "{}: too short ({why}); recommended {}",
                a.source,
                idemgate_core::Human(a.recommended_ttl)
            )),
            _ => None,
        })
        .collect();
    let (light, why) = if short.is_empty() {
        (
            Light::Green,
            "no source's TTL is judged too short by its history".to_owned(),
        )
    } else {
        (Light::Red, short.join("; "))
    };
    Health {
        name: "TTL",
        light,
        why,
    }
}
