//! What the window audit judges ([`crate::audit`] runs it): a source's [`Exposure`] (how long
//! after a first publish idemgate may publish the same event again), the broker's [`Finding`]
//! about its own dedup window, and the two judged together ([`Audit`], [`Standing`]). Types and
//! arithmetic only: nothing here opens a connection or reads the gateway's state.

use std::fmt;
use std::time::Duration;

use idemgate_core::Human;

use crate::config::{Mode, OnShortWindow, SourceConfig, SourcePolicy};

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
                let lease = sc.dispatch.item_lease();
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
