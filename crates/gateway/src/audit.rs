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

use std::fmt;
use std::time::Duration;

use idemgate_core::Human;
use tokio_util::sync::CancellationToken;

use crate::config::{ConfigError, Mode, OnShortWindow, SourceConfig, SourcePolicy};
use std::sync::Arc;

use crate::destination::{Destination, Target};
use crate::state::{AppState, Source};

/// The longest time after a first publish at which idemgate may publish the same event again,
/// and why, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposure {
    pub window: Duration,
    pub basis: String,
}

impl Exposure {
    /// For a source of `mode`:
    ///
    /// - `on_success`: a gateway stopped between the broker's acknowledgement and the claim's
    ///   completion leaves the claim to lapse after its lease (or to be freed by the instance's
    ///   next boot); the sender's next retry then publishes again. Its retries come for
    ///   `retry_window` after the first delivery, so that bounds it (never less than the lease).
    ///   An acknowledgement lost to a timeout releases the claim: the same retry publishes again.
    /// - `on_receipt`: the claim is done at once, so a stopped gateway publishes nothing again
    ///   (and may have published nothing: that mode's bargain); a lost acknowledgement releases
    ///   the claim, as above.
    /// - inbox mode: a dispatcher stopped between the acknowledgement and its report leaves the
    ///   item to be taken again once its lease lapses; an acknowledgement lost to a timeout is
    ///   tried again after the item's backoff, at most `dispatch.max_backoff`. The item lease
    ///   plus the longest backoff bounds it (a broker out of reach for longer than that between
    ///   the lost acknowledgement and the next attempt is not covered by any window: the consumer
    ///   is the backstop).
    pub fn of(sc: &SourceConfig, policy: &SourcePolicy) -> Self {
        match sc.mode {
            Mode::Inbox => {
                let lease = crate::dispatch::item_lease(sc.dispatch.timeout);
                Self {
                    window: lease + sc.dispatch.max_backoff,
                    basis: format!(
                        "inbox mode: a dispatcher stopped between the broker's acknowledgement and its report leaves the item to be taken again after its lease ({}); an acknowledgement lost to a timeout is retried after up to dispatch.max_backoff ({})",
                        Human(lease),
                        Human(sc.dispatch.max_backoff)
                    ),
                }
            }
            Mode::OnSuccess | Mode::OnReceipt => {
                let retry_window = policy.ttl.contract.retry_window;
                let stopped = if sc.mode == Mode::OnSuccess {
                    format!(
                        "a gateway stopped between the broker's acknowledgement and the claim's completion leaves the claim to lapse (lease {}), and an acknowledgement lost to a timeout releases it",
                        Human(policy.lease)
                    )
                } else {
                    "an acknowledgement lost to a timeout releases the claim".to_owned()
                };
                Self {
                    window: retry_window.max(policy.lease),
                    basis: format!(
                        "{} mode: {stopped}; the sender's next retry, up to its retry_window ({}) after the first delivery, publishes again",
                        sc.mode.as_str(),
                        Human(retry_window)
                    ),
                }
            }
        }
    }
}

/// What the broker says of its own dedup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// JetStream: the stream that captures the subject, and its `duplicate_window`.
    Window { stream: String, window: Duration },
    /// RabbitMQ: the broker keeps no dedup window; consumers dedupe by `message_id`.
    NoBrokerDedup,
    /// The broker could not be reached (it may be down for a moment): read again later.
    Unreachable(String),
    /// The broker answered, and the destination cannot work as configured: no stream captures
    /// the subject, the exchange does not exist, the credentials are refused.
    Misconfigured(String),
}

/// A destination's finding judged against its source's exposure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    /// The destination, without credentials.
    pub destination: String,
    pub exposure: Exposure,
    pub finding: Finding,
    pub on_short_window: OnShortWindow,
}

/// How an audit stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Standing {
    /// The stream's window covers the exposure, or (RabbitMQ) there is no window to judge.
    Covered,
    /// Not known yet: the broker did not answer.
    Unknown,
    /// The window is shorter than the exposure.
    Short,
    /// The destination cannot work as configured.
    Broken,
}

impl Audit {
    pub fn standing(&self) -> Standing {
        match &self.finding {
            Finding::Window { window, .. } if *window >= self.exposure.window => Standing::Covered,
            Finding::Window { .. } => Standing::Short,
            Finding::NoBrokerDedup => Standing::Covered,
            Finding::Unreachable(_) => Standing::Unknown,
            Finding::Misconfigured(_) => Standing::Broken,
        }
    }

    /// Whether publishing is held: `on_short_window = "refuse"` publishes only into a stream
    /// whose window was read and covers the exposure.
    pub fn holds(&self) -> bool {
        self.on_short_window == OnShortWindow::Refuse && self.standing() != Standing::Covered
    }

    /// Whether `/healthz` and the dashboard say `degraded` for it: anything but covered.
    pub fn degrades(&self) -> bool {
        self.standing() != Standing::Covered
    }

    /// What to do about it, in words (`None` when nothing is to be done).
    pub fn advice(&self) -> Option<String> {
        match (&self.finding, self.standing()) {
            (Finding::Window { stream, .. }, Standing::Short) => Some(format!(
                "raise the stream's duplicate window to at least {} (nats stream edit {stream} --dupe-window {}; JetStream keeps each message id in memory for the window, and the window may not exceed the stream's max_age), shorten what the exposure is made of, or have consumers dedupe by Nats-Msg-Id",
                Human(self.exposure.window),
                Human(self.exposure.window)
            )),
            (Finding::NoBrokerDedup, _) => Some(
                "consumers must dedupe by message_id (the Idempotency-Key header carries the same value): claim it with idemgate's claim API or library before acting".to_owned(),
            ),
            _ => None,
        }
    }
}

/// One line: the finding judged, e.g. `stream EVENTS dedups for 2m, idemgate may publish again
/// up to 3d after a first publish: short`.
impl fmt::Display for Audit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let exposure = Human(self.exposure.window);
        match &self.finding {
            Finding::Window { stream, window } => {
                write!(
                    f,
                    "stream {stream} dedups for {}; idemgate may publish an event again up to {exposure} after its first publish ({})",
                    Human(*window),
                    self.exposure.basis
                )?;
                if *window < self.exposure.window {
                    write!(
                        f,
                        ": the window is short, a re-publish after {} is stored twice",
                        Human(*window)
                    )?;
                }
                Ok(())
            }
            Finding::NoBrokerDedup => write!(
                f,
                "RabbitMQ keeps no dedup window: idemgate may publish an event again up to {exposure} after its first publish ({}), and the queue holds both",
                self.exposure.basis
            ),
            Finding::Unreachable(why) => {
                write!(f, "the broker's dedup window is not known yet: {why}")
            }
            Finding::Misconfigured(why) => f.write_str(why),
        }
    }
}

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
    {
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
