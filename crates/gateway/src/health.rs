//! Judgements `/healthz`, `/readyz` and the dashboard's health row share, so that they cannot
//! disagree: the inbox's queues, the dispatchers that empty them, and the window audit of the
//! broker destinations.

use std::time::Duration;

use idemgate_core::Human;
use idemgate_core::inbox::InboxStats;

use crate::AppState;

pub(crate) use crate::verdict::{Level, Verdict};

/// The inbox sources' queues, as the store counted them: a queue whose oldest item is older than
/// its source's `queue_lag` is bad (the TTL no longer covers the sender's retries past it); dead
/// letters, and items the downstream is failing, are warnings.
pub(crate) fn inbox(state: &AppState, inbox: &[InboxStats]) -> Verdict {
    let mut late = Vec::new();
    let mut warnings = Vec::new();
    for s in inbox {
        let Some(src) = state.sources.get(s.source.as_str()) else {
            continue;
        };
        let margin = src.policy.ttl.contract.queue_lag;
        if let Some(lag) = s.oldest_pending.filter(|lag| *lag > margin) {
            late.push(format!(
                "{}: oldest item {} old, past its queue_lag of {}",
                s.source,
                Human(Duration::from_secs(lag.as_secs())),
                Human(margin)
            ));
        }
        if s.dead > 0 {
            warnings.push(format!(
                "{}: {} dead letter{} wait for idemgate replay",
                s.source,
                s.dead,
                if s.dead == 1 { "" } else { "s" }
            ));
        }
        if s.failing > 0 {
            let last = s
                .last_failure
                .as_ref()
                .map(|f| format!(" (last error: {})", f.attempt.error))
                .unwrap_or_default();
            warnings.push(format!(
                "{}: the downstream failed {} waiting item{}{last}",
                s.source,
                s.failing,
                if s.failing == 1 { "" } else { "s" }
            ));
        }
    }
    if !late.is_empty() {
        late.extend(warnings);
        Verdict {
            level: Level::Bad,
            why: late.join("; "),
        }
    } else if !warnings.is_empty() {
        Verdict {
            level: Level::Warn,
            why: warnings.join("; "),
        }
    } else {
        Verdict {
            level: Level::Ok,
            why: "every queue within its queue_lag margin, no dead letters, no failing deliveries"
                .to_owned(),
        }
    }
}

/// The inbox sources of `state` whose dispatcher does not run now (its supervised task,
/// `dispatcher:{source}`, is not running: not started yet, ended, or waiting to be restarted
/// after a panic), sorted.
pub(crate) fn stopped_dispatchers(state: &AppState) -> Vec<String> {
    let mut stopped: Vec<String> = state
        .sources
        .values()
        .filter(|s| s.mode == crate::config::Mode::Inbox)
        .map(|s| s.name.as_str().to_owned())
        .filter(|name| !state.tasks.running(&format!("dispatcher:{name}")))
        .collect();
    stopped.sort();
    stopped
}

/// The inbox dispatchers: one runs for each inbox source while the gateway serves; one that
/// stopped (it panicked, or the gateway is stopping) is bad.
pub(crate) fn dispatchers(state: &AppState) -> Verdict {
    let stopped = stopped_dispatchers(state);
    if stopped.is_empty() {
        Verdict {
            level: Level::Ok,
            why: "a dispatcher runs for every inbox source".to_owned(),
        }
    } else {
        Verdict {
            level: Level::Bad,
            why: format!("no dispatcher runs for {}", stopped.join(", ")),
        }
    }
}

/// The history archive (`[history.archive]`): a retention run held back (the archive
/// unreachable, a count that differs) is a warning: nothing is lost, but history stays in the
/// database past its retention. `None` without an archive.
pub(crate) fn archive(state: &AppState) -> Option<Verdict> {
    let archiving = state.archiving.as_ref()?;
    let status = archiving.status();
    Some(match status.holding {
        Some(why) => Verdict {
            level: Level::Warn,
            why: format!("history is kept in the database past its retention: {why}"),
        },
        None if !status.ran => Verdict {
            level: Level::Ok,
            why: format!("history goes to {} (no retention run yet)", archiving.url()),
        },
        None => Verdict {
            level: Level::Ok,
            why: format!(
                "history goes to {}; every closed day through {} is there ({} days, {} rows exported by this process; {} retention units dropped once archived)",
                archiving.url(),
                status
                    .through
                    .map_or_else(|| "-".to_owned(), |d| d.to_string()),
                status.exported_days,
                status.exported_rows,
                status.dropped
            ),
        },
    })
}

/// The broker destinations' window audits ([`crate::audit`]): a window shorter than its source
/// needs, or not known yet (the broker did not answer), is a warning; a destination that cannot
/// work as configured (its stream or exchange gone) is bad. `None` when no source publishes to a
/// broker.
pub(crate) fn destinations(state: &AppState) -> Option<Verdict> {
    use crate::window::Standing;
    let audits = crate::audit::latest(state);
    if audits.is_empty() {
        return None;
    }
    let worst = audits
        .iter()
        .map(|(_, a)| a.standing())
        .max()
        .unwrap_or(Standing::Covered);
    let level = match worst {
        Standing::Covered => Level::Ok,
        Standing::Unknown | Standing::Short => Level::Warn,
        Standing::Broken => Level::Bad,
    };
    let why = if level == Level::Ok {
        let rabbit = audits
            .iter()
            .filter(|(_, a)| a.finding == crate::window::Finding::NoBrokerDedup)
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>();
        if rabbit.is_empty() {
            "every JetStream destination's duplicate window covers its source".to_owned()
        } else {
            format!(
                "every JetStream window covers its source; RabbitMQ keeps none, so the consumers of {} dedupe by message_id",
                rabbit.join(", ")
            )
        }
    } else {
        audits
            .iter()
            .filter(|(_, a)| a.degrades())
            .map(|(name, a)| {
                format!(
                    "{name}: {a}{}",
                    if a.holds() {
                        " (publishing held: on_short_window = \"refuse\")"
                    } else {
                        ""
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    Some(Verdict { level, why })
}
