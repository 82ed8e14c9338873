//! The window audit: does a broker destination's own dedup window cover the time after a first
//! publish at which idemgate may publish the same event again?
//!
//! idemgate publishes an event once per claim, but a claim can end without being completed after
//! the broker took the event: the gateway stops between the broker's acknowledgement and the
//! claim's completion (or the acknowledgement is lost to a timeout). The event is then published
//! again, later, and only the broker's dedup window (JetStream's `duplicate_window`, keyed by
//! `Nats-Msg-Id`) or the consumer (by `message_id` / `Idempotency-Key`) stands between that and a
//! duplicate. [`Exposure`] is how much later, for a source's mode; [`Finding`] what the broker
//! says of its window; [`Audit`] the two judged. The gateway audits at start (a short window with
//! `on_short_window = "refuse"` stops it; a stream that does not capture the subject, an exchange
//! that does not exist, stop it whatever the setting) and again every `window_audit_interval`,
//! and says what it found on `/healthz`, the dashboard and in `idemgate check`.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, OnShortWindow, SourceConfig, SourcePolicy};
use std::sync::Arc;

use crate::destination::Destination;
use crate::state::{AppState, Source};
use crate::target::Target;
pub use crate::window::{Audit, Exposure, Finding, Standing};

/// Audits `sc`'s destination now, as `idemgate check` does: opens it, reads, closes. `None` for
/// a source without a broker destination.
pub async fn audit_source(sc: &SourceConfig, policy: &SourcePolicy) -> Option<Audit> {
    let target = policy.destination.as_ref().filter(|t| t.is_broker())?;
    let destination = crate::destination::Destination::new(
        target.clone(),
        policy.tls.clone(),
        crate::forward::http_client(),
    );
    let finding = destination.read_dedup().await;
    destination.close().await;
    Some(Audit {
        destination: target.to_string(),
        exposure: Exposure::of(sc, policy),
        finding,
        on_short_window: policy.on_short_window,
    })
}

/// What one audit needs of a source, owned (audits run as tasks of their own, side by side).
#[derive(Clone)]
pub(crate) struct Audited {
    source: String,
    destination: Arc<Destination>,
    exposure: Exposure,
    on_short_window: OnShortWindow,
}

impl Audited {
    /// `src`'s, when it publishes to a broker.
    pub(crate) fn of(src: &Source) -> Option<Self> {
        let destination = src.destination.as_ref().filter(|d| d.target.is_broker())?;
        Some(Self {
            source: src.name.as_str().to_owned(),
            destination: Arc::clone(destination),
            exposure: src.exposure.clone(),
            on_short_window: src.policy.on_short_window,
        })
    }

    /// Audits the destination now, keeps the result in it (a held destination refuses sends
    /// until an audit says otherwise), and logs what changed.
    pub(crate) async fn run(self) -> (String, Audit) {
        let finding = self.destination.read_dedup().await;
        let audit = Audit {
            destination: self.destination.target.to_string(),
            exposure: self.exposure,
            finding,
            on_short_window: self.on_short_window,
        };
        let before = self.destination.audit();
        if before.as_ref() != Some(&audit) {
            say(&self.source, &audit, before.is_none());
        }
        self.destination.record(audit.clone());
        (self.source, audit)
    }
}

/// Runs each audit as a task of its own, all at once (a broker that does not answer costs its
/// connect timeout once, not once per source), and returns them by source name.
async fn run_all(audits: Vec<Audited>) -> Vec<(String, Audit)> {
    let mut tasks = tokio::task::JoinSet::new();
    for a in audits {
        tasks.spawn(a.run());
    }
    let mut out = Vec::new();
    while let Some(done) = tasks.join_next().await {
        if let Ok(audit) = done {
            out.push(audit);
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Logs an audit whose finding is new: a warning for anything not covered, RabbitMQ's missing
/// window once at start, and a covered window at info.
fn say(source: &str, audit: &Audit, first: bool) {
    let destination = audit.destination.as_str();
    let advice = audit.advice().unwrap_or_default();
    match (audit.standing(), &audit.finding) {
        (Standing::Covered, Finding::NoBrokerDedup) if first => {
            tracing::warn!(source, destination, advice, "{audit}");
        }
        (Standing::Covered, _) => tracing::info!(source, destination, "{audit}"),
        (_, _) if audit.holds() => tracing::error!(
            source,
            destination,
            advice,
            "{audit}; publishing is held (on_short_window = \"refuse\"): forward mode answers 503, inbox items wait"
        ),
        _ => tracing::warn!(source, destination, advice, "{audit}"),
    }
}

/// The audit at start, of every broker destination at once: a destination that cannot work as
/// configured (no stream captures the subject, no such exchange, credentials refused) stops the
/// start, as does a short window with `on_short_window = "refuse"`; a broker that does not answer
/// is said, and audited again shortly (with `refuse`, publishing waits for a covering window).
///
/// # Errors
/// The first source that cannot start, naming it, the key at fault and why.
pub(crate) async fn at_start<'a>(
    sources: impl Iterator<Item = &'a Source>,
) -> Result<(), ConfigError> {
    for (name, audit) in run_all(sources.filter_map(Audited::of).collect()).await {
        let invalid = |key: &'static str, why: String| ConfigError::Invalid {
            name: name.clone(),
            key,
            why,
        };
        match audit.standing() {
            Standing::Broken => return Err(invalid("forward_url", audit.to_string())),
            Standing::Short if audit.holds() => {
                return Err(invalid(
                    "on_short_window",
                    format!(
                        "is \"refuse\" and {audit}; {} (or set on_short_window = \"warn\" to start anyway)",
                        audit.advice().unwrap_or_default()
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Audits every broker destination every `every` (every [`UNKNOWN_EVERY`] while one's window is
/// not known), until `cancel`. `None` when no source publishes to a broker.
pub(crate) fn spawn(
    state: &AppState,
    every: Duration,
    cancel: CancellationToken,
) -> Option<tokio::task::JoinHandle<Option<()>>> {
    if !state
        .sources
        .values()
        .any(|s| s.destination().is_some_and(Target::is_broker))
    {
        return None;
    }
    let audited: Vec<Audited> = state.sources.values().filter_map(Audited::of).collect();
    let pending = |audits: &[Audited]| {
        audits.iter().any(|a| {
            a.destination
                .audit()
                .is_none_or(|a| a.standing() == Standing::Unknown)
        })
    };
    Some(
        state
            .tasks
            .supervise("window audit", cancel.clone(), move || {
                audit_every(audited.clone(), every, cancel.clone(), pending)
            }),
    )
}

/// [`spawn`]'s task.
async fn audit_every(
    audited: Vec<Audited>,
    every: Duration,
    cancel: CancellationToken,
    pending: impl Fn(&[Audited]) -> bool,
) {
    let mut wait = if pending(&audited) {
        UNKNOWN_EVERY.min(every)
    } else {
        every
    };
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let unknown = run_all(audited.clone())
            .await
            .iter()
            .any(|(_, a)| a.standing() == Standing::Unknown);
        wait = if unknown {
            UNKNOWN_EVERY.min(every)
        } else {
            every
        };
    }
}

/// How soon a destination whose window is not known (the broker did not answer) is audited
/// again.
const UNKNOWN_EVERY: Duration = Duration::from_secs(30);

/// The latest audit of each source with a broker destination, by source name.
pub(crate) fn latest(state: &AppState) -> Vec<(String, Audit)> {
    let mut out: Vec<(String, Audit)> = state
        .sources
        .values()
        .filter_map(|src| {
            let audit = src.destination.as_ref()?.audit()?;
            Some((src.name.as_str().to_owned(), audit))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit(finding: Finding, on: OnShortWindow) -> Audit {
        Audit {
            destination: "nats://127.0.0.1:4222/events".to_owned(),
            exposure: Exposure {
                window: Duration::from_secs(3 * 86_400),
                basis: "forward mode".to_owned(),
            },
            finding,
            on_short_window: on,
        }
    }

    #[test]
    fn a_window_shorter_than_the_exposure_is_short_and_held_only_when_refused() {
        let short = Finding::Window {
            stream: "EVENTS".to_owned(),
            window: Duration::from_secs(120),
        };
        let a = audit(short.clone(), OnShortWindow::Warn);
        assert_eq!(a.standing(), Standing::Short);
        assert!(a.degrades() && !a.holds());
        assert!(a.to_string().contains("dedups for 2m"), "{a}");
        assert!(a.to_string().contains("is short"), "{a}");
        assert!(a.advice().unwrap().contains("--dupe-window 3d"));
        assert!(audit(short, OnShortWindow::Refuse).holds());
        let covered = audit(
            Finding::Window {
                stream: "EVENTS".to_owned(),
                window: Duration::from_secs(3 * 86_400),
            },
            OnShortWindow::Refuse,
        );
        assert_eq!(covered.standing(), Standing::Covered);
        assert!(!covered.holds() && !covered.degrades() && covered.advice().is_none());
        // Not read yet: refuse holds until it is.
        let unknown = audit(Finding::Unreachable("down".into()), OnShortWindow::Refuse);
        assert!(unknown.holds() && unknown.degrades());
        assert!(!audit(Finding::Unreachable("down".into()), OnShortWindow::Warn).holds());
        // RabbitMQ: nothing to judge, the consumer dedupes.
        let rabbit = audit(Finding::NoBrokerDedup, OnShortWindow::Warn);
        assert_eq!(rabbit.standing(), Standing::Covered);
        assert!(rabbit.advice().unwrap().contains("message_id"));
    }
}
