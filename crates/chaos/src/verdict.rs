//! From what the downstream processed, what the senders heard and when gateways were killed, to
//! a verdict: lost events, events processed twice, and for each second processing whether it is
//! explained by a SIGKILL.
//!
//! A second processing is explained when all of these hold:
//! - the processing before it was forwarded by a gateway process that was SIGKILLed later (the
//!   process died with the delivery in its hands);
//! - it was not processed again more than the TTL after the first (a delivery that late is
//!   outside the sender's retry window, and the scenarios are sized so that none is sent);
//! - no sender had been told `forwarded` for that processing before the kill (if one had, the
//!   claim's completion was durable, or should have been, before the answer: a second
//!   processing then is a bug, kill or not);
//! - the second processing's `Idemgate-Attempt` is 2 or more: the claim was taken over (a lease
//!   that lapsed, or an instance freeing its own claims), not claimed afresh as if the first had
//!   never happened.
//!
//! An inbox source's events are delivered by the gateway's dispatcher, not while a sender
//! waits, so no sender is told anything about a processing. There the downstream's own record
//! stands in: a second processing is explained when
//! - the processing before it was delivered by a process SIGKILLed later, and reached the
//!   downstream before the process died;
//! - the downstream answered it less than the dispatcher's lease before the kill (longer, and
//!   the dispatcher had recorded the delivery, or taken the item again, while it was alive);
//! - the next processing came after the gateway's restart (which frees the items its earlier
//!   boot held), or after the lease lapsed: not while the killed process's lease still ran;
//! - it carries `Idemgate-Attempt` 2 or more (the item taken over, not queued afresh).
//!
//! A broker destination's copies are counted in the broker itself, once the gateways are
//! stopped: each message in the JetStream stream or the RabbitMQ queue is one processing.
//! - JetStream dedups by `Nats-Msg-Id` within the stream's duplicate window, which the scenarios
//!   size to cover every re-publish: any event stored twice is unexplained, kill or not.
//! - RabbitMQ keeps no dedup, and its messages carry no time, so a second copy is judged by its
//!   place in the queue and by what the gateway said. It is explained by a SIGKILL when the copy
//!   before it was published by a process SIGKILLed later, the second came from another process
//!   (a later incarnation, or another gateway), it carries a higher `Idemgate-Attempt` (the claim
//!   or item the first was published under was taken over: never completed, since a completed
//!   claim is never taken over and a released one starts again at attempt 1), and no sender was
//!   told `forwarded` for the first's attempt by its process (forward mode). It is explained by
//!   a confirm lost to a broker stop when the process that published the first had the event in
//!   hand as the broker went down: in forward mode, a sender was answered 503
//!   `destination_unavailable` by it for that event, to an attempt sent before the broker was
//!   gone and answered after its stop began (each such answer explains one second copy at most);
//!   in inbox mode, its dispatcher logged that very attempt as failed, after the stop began and
//!   at most the publish timeout (and a second) after the broker was gone, and the second copy
//!   carries a higher attempt (the item taken again, not queued afresh).
//!
//! Anything else processed twice is unexplained, and fails the scenario.

use std::collections::BTreeMap;

use crate::downstream::Processing;
use crate::gateway::Kill;
use crate::load::{Answer, Outcome};

/// How the scenario's source gets events to the downstream: what can explain a second
/// processing depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery<'a> {
    /// The gateway forwards while the sender waits, and tells the sender how it went.
    Forward,
    /// The gateway queues; its dispatcher delivers under a lease of `lease_us`.
    Inbox { lease_us: u64 },
    /// The gateway publishes into a JetStream stream deduplicating for `window_us`: nothing
    /// explains a copy stored twice.
    Stream { window_us: u64 },
    /// The gateway publishes into a RabbitMQ queue, which keeps every copy (see the module doc).
    Queue(QueueEvidence<'a>),
}

/// What can explain a second copy in a RabbitMQ queue besides a SIGKILL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueEvidence<'a> {
    /// The source is in inbox mode: its dispatcher publishes, no sender hears of it.
    pub inbox: bool,
    /// Every stop of the broker.
    pub outages: &'a [Outage],
    /// Inbox mode: the deliveries the gateways logged as failed.
    pub failed: &'a [FailedDelivery],
    /// The publish timeout (`forward_timeout`, `dispatch.timeout`).
    pub timeout_us: u64,
}

/// A stop of the broker: when it began (the signal sent), when the broker was gone, and when it
/// answered again (run microseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub stop: u64,
    pub gone: u64,
    pub back: u64,
}

/// A delivery from the inbox that a gateway process logged as failed ("delivery failed;
/// retrying later"): the item is taken again, at a higher attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailedDelivery {
    pub event: u32,
    pub attempt: u32,
    pub via: crate::downstream::Via,
    /// When it was logged (run microseconds).
    pub at: u64,
}

/// How long after the broker was gone a failed delivery is still its doing, besides the publish
/// timeout: the time to notice, log and report it.
const FAILURE_MARGIN_US: u64 = 1_000_000;

/// An event processed more than once: one of its later processings and the one before it.
#[derive(Debug, Clone)]
pub struct Double {
    pub event: u32,
    pub first: Processing,
    pub second: Processing,
    /// The kill of the process that forwarded `first`, if it was killed.
    pub kill: Option<Kill>,
    /// A `forwarded` answer a sender got for `first` before that kill.
    pub told: Option<Answer>,
    pub explained: bool,
    /// Why it is (or is not) explained.
    pub why: String,
}

#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub events: u32,
    /// Attempts sent, all deliveries together.
    pub attempts: usize,
    pub processed_once: u32,
    pub lost: Vec<u32>,
    pub doubles: Vec<Double>,
    /// Deliveries that gave up at their deadline without a 2xx, and their distinct events.
    pub unacked_deliveries: usize,
    pub unacked_events: usize,
    /// Answers by outcome (`other` split by status).
    pub outcomes: BTreeMap<String, u64>,
    /// Scenario-specific checks that failed (each says what and why).
    pub failures: Vec<String>,
    /// What happened, in order, and figures worth knowing.
    pub notes: Vec<String>,
    /// The gateways' warnings and errors, by message, with a count.
    pub logged: Vec<String>,
    /// A figure for the summary table's verdict (the crash recovery time, /healthz during a
    /// full disk).
    pub headline: Option<String>,
    /// The scenario's fault, timed: p99 answer time while it lasted and the recovery after it
    /// (the summary table's two columns).
    pub fault: Option<crate::fault::Figures>,
    /// Everything seen of the lost events and of the unexplained doubles, one line per event.
    pub evidence: Vec<String>,
}

impl Verdict {
    pub fn explained(&self) -> usize {
        self.doubles.iter().filter(|d| d.explained).count()
    }

    pub fn unexplained(&self) -> usize {
        self.doubles.iter().filter(|d| !d.explained).count()
    }

    /// Distinct events processed more than once.
    pub fn events_twice(&self) -> usize {
        let mut events: Vec<u32> = self.doubles.iter().map(|d| d.event).collect();
        events.dedup();
        events.len()
    }

    pub fn pass(&self) -> bool {
        self.lost.is_empty() && self.unexplained() == 0 && self.failures.is_empty()
    }
}

/// Everything the senders and the downstream saw of `event`, in time order, on one line.
pub fn history(event: u32, processings: &[Processing], answers: &[Answer]) -> String {
    use crate::clock::ms;
    enum Seen<'a> {
        Sent(&'a Answer),
        Got(&'a Processing),
    }
    let mut seen: Vec<(u64, Seen<'_>)> = answers
        .iter()
        .filter(|a| a.event == event)
        .map(|a| (a.sent, Seen::Sent(a)))
        .chain(
            processings
                .iter()
                .filter(|p| p.event == event)
                // A copy without a time (RabbitMQ's) after everything, in queue order.
                .map(|p| match p.stored {
                    Some(s) if !s.timed => (u64::MAX, Seen::Got(p)),
                    _ => (p.received, Seen::Got(p)),
                }),
        )
        .collect();
    seen.sort_by_key(|(at, _)| *at);
    let name = |a: &Answer| match a.outcome {
        Outcome::Other => format!("http-{}", a.status),
        o => o.name().to_owned(),
    };
    let mut lines: Vec<String> = Vec::new();
    let mut i = 0;
    while i < seen.len() {
        match &seen[i].1 {
            Seen::Got(p) => {
                lines.push(match p.stored {
                    None => format!(
                        "downstream got attempt {} from {} at {} -> {} at {}",
                        p.attempt,
                        p.via,
                        ms(p.received),
                        p.status,
                        ms(p.answered)
                    ),
                    Some(_) => format!(
                        "broker copy {}: attempt {} from {}",
                        copy_at(p),
                        p.attempt,
                        p.via
                    ),
                });
                i += 1;
            }
            Seen::Sent(a) => {
                // Consecutive identical answers (same gateway, outcome, attempt) on one line.
                let mut j = i + 1;
                while let Some((_, Seen::Sent(b))) = seen.get(j) {
                    if (b.gateway, b.outcome, b.status, b.attempt)
                        != (a.gateway, a.outcome, a.status, a.attempt)
                    {
                        break;
                    }
                    j += 1;
                }
                let attempt = if a.attempt > 0 {
                    format!(" attempt {}", a.attempt)
                } else {
                    String::new()
                };
                if j - i == 1 {
                    lines.push(format!(
                        "sent to g{} at {} -> {}{attempt} at {}",
                        a.gateway,
                        ms(a.sent),
                        name(a),
                        ms(a.at)
                    ));
                } else {
                    let last = match &seen[j - 1].1 {
                        Seen::Sent(b) => b.at,
                        Seen::Got(p) => p.answered,
                    };
                    lines.push(format!(
                        "sent to g{} {} times from {} -> {}{attempt} until {}",
                        a.gateway,
                        j - i,
                        ms(a.sent),
                        name(a),
                        ms(last)
                    ));
                }
                i = j;
            }
        }
    }
    format!("event {event}: {}", lines.join("; "))
}

/// Where and when a processing happened, for the tables: `received -> answered` for a request
/// to the downstream, the position (and the time, when the broker keeps one) for a broker copy.
pub fn copy_at(p: &Processing) -> String {
    use crate::clock::ms;
    match p.stored {
        None => format!("{} -> {}", ms(p.received), ms(p.answered)),
        Some(s) if s.timed => format!("#{} stored at {}", s.position, ms(p.received)),
        Some(s) => format!("#{} in the queue", s.position),
    }
}

/// Judges one scenario run.
pub fn judge(
    events: u32,
    processings: &[Processing],
    answers: &[Answer],
    kills: &[Kill],
    unacked: &[u32],
    ttl_us: Option<u64>,
    delivery: Delivery<'_>,
) -> Verdict {
    let mut by_event: Vec<Vec<Processing>> = vec![Vec::new(); events as usize];
    for p in processings.iter().filter(|p| p.processed()) {
        if let Some(list) = by_event.get_mut(p.event as usize) {
            list.push(*p);
        }
    }
    let mut told: BTreeMap<u32, Vec<Answer>> = BTreeMap::new();
    for a in answers.iter().filter(|a| a.outcome == Outcome::Forwarded) {
        told.entry(a.event).or_default().push(*a);
    }
    let mut verdict = Verdict {
        events,
        attempts: answers.len(),
        ..Verdict::default()
    };
    let mut refused: BTreeMap<u32, Vec<Answer>> = BTreeMap::new();
    for a in answers
        .iter()
        .filter(|a| a.outcome == Outcome::DestinationUnavailable)
    {
        refused.entry(a.event).or_default().push(*a);
    }
    for (event, list) in by_event.iter_mut().enumerate() {
        let event = event as u32;
        list.sort_by_key(|p| (p.received, p.answered, p.stored.map(|s| s.position)));
        match list.len() {
            0 => verdict.lost.push(event),
            1 => verdict.processed_once += 1,
            _ => {
                let told = told.get(&event).map_or(&[][..], Vec::as_slice);
                // Each 503 answered while the broker went down explains one second copy at most.
                let mut refused = refused.get(&event).cloned().unwrap_or_default();
                for pair in list.windows(2) {
                    let double = match delivery {
                        Delivery::Forward => classify(event, pair[0], pair[1], kills, told, ttl_us),
                        Delivery::Inbox { lease_us } => {
                            classify_inbox(event, pair[0], pair[1], kills, ttl_us, lease_us)
                        }
                        Delivery::Stream { window_us } => {
                            classify_stream(event, pair[0], pair[1], kills, window_us)
                        }
                        Delivery::Queue(evidence) => classify_queue(
                            event,
                            (pair[0], pair[1]),
                            kills,
                            told,
                            &mut refused,
                            &evidence,
                        ),
                    };
                    verdict.doubles.push(double);
                }
            }
        }
    }
    let mut unacked_events = unacked.to_vec();
    unacked_events.sort_unstable();
    unacked_events.dedup();
    let mut explain: Vec<u32> = verdict.lost.iter().take(10).copied().collect();
    explain.extend(
        verdict
            .doubles
            .iter()
            .filter(|d| !d.explained)
            .map(|d| d.event)
            .take(10),
    );
    explain.dedup();
    verdict.evidence = explain
        .into_iter()
        .map(|e| history(e, processings, answers))
        .collect();
    verdict.unacked_deliveries = unacked.len();
    verdict.unacked_events = unacked_events.len();
    for a in answers {
        let name = match a.outcome {
            Outcome::Other => format!("http-{}", a.status),
            o => o.name().to_owned(),
        };
        *verdict.outcomes.entry(name).or_default() += 1;
    }
    verdict
}

/// What the process wrote before it died may still sit in the downstream's socket buffer when
/// it is reaped; anything arriving later than this after its death was not sent by it.
const IN_TRANSIT_US: u64 = 100_000;

impl Double {
    /// Not judged yet: unexplained, no reason.
    fn unjudged(event: u32, first: Processing, second: Processing) -> Self {
        Self {
            event,
            first,
            second,
            kill: None,
            told: None,
            explained: false,
            why: String::new(),
        }
    }
}

/// Why a second processing cannot be explained whatever else holds, if it came more than the
/// TTL after the first.
fn beyond_ttl(first: Processing, second: Processing, ttl_us: Option<u64>) -> Option<String> {
    let gap = second.received.saturating_sub(first.received);
    let ttl = ttl_us.filter(|&ttl| gap > ttl)?;
    Some(format!(
        "processed again {:.1} s after the first, beyond the TTL of {:.1} s: a delivery outside the sender's retry window",
        gap as f64 / 1e6,
        ttl as f64 / 1e6
    ))
}

fn classify(
    event: u32,
    first: Processing,
    second: Processing,
    kills: &[Kill],
    told: &[Answer],
    ttl_us: Option<u64>,
) -> Double {
    let mut double = Double::unjudged(event, first, second);
    if let Some(why) = beyond_ttl(first, second, ttl_us) {
        double.why = why;
        return double;
    }
    let kill = kills.iter().find(|k| k.via == first.via).copied();
    double.kill = kill;
    // A `forwarded` answer for the first processing, before its process died (or, alive, before
    // the second processing began).
    let until = kill.map_or(second.received, |k| k.dead);
    double.told = told
        .iter()
        .find(|a| {
            a.gateway == first.via.gateway
                && a.attempt == first.attempt
                && a.at >= first.received
                && a.at <= until
        })
        .copied();
    let told_text = double.told.map(|a| {
        format!(
            "a sender was told `forwarded` (attempt {}) at {}",
            a.attempt,
            crate::clock::ms(a.at)
        )
    });
    double.why = match kill {
        None => format!(
            "{} forwarded the first and was never SIGKILLed{}",
            first.via,
            told_text.map(|t| format!("; {t}")).unwrap_or_default()
        ),
        Some(k) if first.received > k.dead + IN_TRANSIT_US => {
            format!("the first arrived after {} was killed", first.via)
        }
        Some(_) if told_text.is_some() => format!(
            "{}, before {} was killed",
            told_text.unwrap_or_default(),
            first.via
        ),
        Some(_) if second.attempt < 2 => format!(
            "the second is attempt {}: claimed afresh, not taken over",
            second.attempt
        ),
        Some(_) => {
            double.explained = true;
            format!("in flight at the SIGKILL of {}", first.via)
        }
    };
    double
}

/// An inbox delivery: no sender heard of it, so the downstream's record and the dispatcher's
/// lease (`lease_us`) stand in for what the sender was told (see the module doc).
fn classify_inbox(
    event: u32,
    first: Processing,
    second: Processing,
    kills: &[Kill],
    ttl_us: Option<u64>,
    lease_us: u64,
) -> Double {
    use crate::clock::ms;
    let mut double = Double::unjudged(event, first, second);
    if let Some(why) = beyond_ttl(first, second, ttl_us) {
        double.why = why;
        return double;
    }
    let kill = kills.iter().find(|k| k.via == first.via).copied();
    double.kill = kill;
    let gateway = first.via.gateway;
    double.why = match kill {
        None => format!("{} delivered the first and was never SIGKILLed", first.via),
        Some(k) if first.received > k.dead + IN_TRANSIT_US => {
            format!("the first arrived after {} was killed", first.via)
        }
        Some(k) if first.answered.saturating_add(lease_us) < k.at => format!(
            "the downstream answered the first {} before {} was killed, longer than the dispatcher's lease ({}): the delivery was recorded (or the item taken again) while it was alive",
            ms(k.at - first.answered),
            first.via,
            ms(lease_us)
        ),
        // The killed process's items are free again once its gateway boots again, or once
        // their lease lapsed (taken before the first arrived, so by `first.received + lease`).
        Some(k)
            if second.received
                < k.restarted
                    .unwrap_or(u64::MAX)
                    .min(first.received.saturating_add(lease_us)) =>
        {
            format!(
                "processed again at {} by {}, before g{gateway} was restarted{} and within the killed process's lease: the item was taken again while {} held it",
                ms(second.received),
                second.via,
                k.restarted
                    .map(|r| format!(" (at {})", ms(r)))
                    .unwrap_or_default(),
                first.via
            )
        }
        Some(_) if second.attempt < 2 => format!(
            "the second is attempt {}: delivered afresh, not taken over",
            second.attempt
        ),
        Some(_) => {
            double.explained = true;
            format!(
                "in flight at the SIGKILL of {}: delivered before the kill, its result not recorded; delivered again once g{gateway} was restarted",
                first.via
            )
        }
    };
    double
}

/// A JetStream copy stored twice: the stream's duplicate window covers every re-publish the
/// scenario can make, so the second publish should have been acknowledged as a duplicate.
fn classify_stream(
    event: u32,
    first: Processing,
    second: Processing,
    kills: &[Kill],
    window_us: u64,
) -> Double {
    use crate::clock::ms;
    let mut double = Double::unjudged(event, first, second);
    double.kill = kills.iter().find(|k| k.via == first.via).copied();
    let gap = second.received.saturating_sub(first.received);
    let killed = double.kill.map_or(String::new(), |k| {
        format!(
            " (the first was published by {}, SIGKILLed at {})",
            first.via,
            ms(k.at)
        )
    });
    double.why = if gap > window_us {
        format!(
            "stored twice, {} apart: beyond the stream's duplicate window ({}), which the scenario sized to cover every re-publish{killed}",
            ms(gap),
            ms(window_us)
        )
    } else {
        format!(
            "stored twice, {} apart, within the stream's duplicate window ({}): JetStream should have acknowledged the second publish (same Nats-Msg-Id) as a duplicate{killed}",
            ms(gap),
            ms(window_us)
        )
    };
    double
}

/// When process `via` started: at the run's start for a first incarnation, else when the kill of
/// its previous incarnation was followed by a restart (as far as the kills say).
fn started(via: crate::downstream::Via, kills: &[Kill]) -> u64 {
    kills
        .iter()
        .find(|k| k.via.gateway == via.gateway && k.via.incarnation + 1 == via.incarnation)
        .and_then(|k| k.restarted)
        .unwrap_or(0)
}

/// A RabbitMQ copy after another of the same event (in queue order): explained by a SIGKILL of
/// the process that published the first, or by a confirm lost to a broker stop (see the module
/// doc). `refused` holds the event's 503 `destination_unavailable` answers not yet used as
/// evidence.
fn classify_queue(
    event: u32,
    (first, second): (Processing, Processing),
    kills: &[Kill],
    told: &[Answer],
    refused: &mut Vec<Answer>,
    evidence: &QueueEvidence<'_>,
) -> Double {
    use crate::clock::ms;
    let mut double = Double::unjudged(event, first, second);
    let kill = kills.iter().find(|k| k.via == first.via).copied();
    double.kill = kill;
    // By a SIGKILL.
    let by_kill = match kill {
        None => Err(format!(
            "{} published the first and was never SIGKILLed",
            first.via
        )),
        Some(_) if second.via == first.via => Err(format!(
            "{} published both: the second came before it was killed",
            first.via
        )),
        Some(_)
            if second.via.gateway == first.via.gateway
                && second.via.incarnation < first.via.incarnation =>
        {
            Err(format!(
                "the second came from {}, an earlier process than the first's {}",
                second.via, first.via
            ))
        }
        Some(_) if second.attempt <= first.attempt => Err(format!(
            "the second is attempt {}, not above the first's {}: published afresh, not taken over",
            second.attempt, first.attempt
        )),
        Some(k) => {
            let from = started(first.via, kills);
            double.told = told
                .iter()
                .find(|a| {
                    !evidence.inbox
                        && a.gateway == first.via.gateway
                        && a.attempt == first.attempt
                        && a.at >= from
                        && a.at <= k.dead
                })
                .copied();
            match double.told {
                Some(a) => Err(format!(
                    "a sender was told `forwarded` (attempt {}) at {}, before {} was killed: the claim was complete",
                    a.attempt,
                    ms(a.at),
                    first.via
                )),
                None => Ok(format!(
                    "published by {}, SIGKILLed at {} before its {} (attempt {}) was completed; taken over and published again at attempt {} by {}",
                    first.via,
                    ms(k.at),
                    if evidence.inbox { "item" } else { "claim" },
                    first.attempt,
                    second.attempt,
                    second.via
                )),
            }
        }
    };
    let by_kill = match by_kill {
        Ok(why) => {
            double.explained = true;
            double.why = why;
            return double;
        }
        Err(why) => why,
    };
    // By a confirm lost to a broker stop.
    let by_stop = if evidence.outages.is_empty() {
        Err("the broker was never stopped".to_owned())
    } else if evidence.inbox {
        let until = evidence.timeout_us + FAILURE_MARGIN_US;
        let failed = evidence.failed.iter().find(|f| {
            f.event == event
                && f.attempt == first.attempt
                && f.via == first.via
                && evidence
                    .outages
                    .iter()
                    .any(|o| f.at >= o.stop && f.at <= o.gone + until)
        });
        match failed {
            None => Err(format!(
                "{} logged no failure of attempt {} while the broker went down",
                first.via, first.attempt
            )),
            Some(_) if second.attempt <= first.attempt => Err(format!(
                "the second is attempt {}, not above the first's {}: queued afresh, not taken again",
                second.attempt, first.attempt
            )),
            Some(f) => Ok(format!(
                "a confirm lost to the broker's stop: {} logged attempt {} as failed at {}, the item was taken again (attempt {})",
                first.via,
                first.attempt,
                ms(f.at),
                second.attempt
            )),
        }
    } else {
        let from = started(first.via, kills);
        let until = kill.map_or(u64::MAX, |k| k.dead);
        let found = refused.iter().position(|a| {
            a.gateway == first.via.gateway
                && a.sent >= from
                && a.at <= until
                && evidence
                    .outages
                    .iter()
                    .any(|o| a.sent <= o.gone && a.at >= o.stop)
        });
        match found {
            None => Err(format!(
                "no sender was answered 503 destination_unavailable by {} for it to an attempt sent before the broker was gone and answered after its stop began (or each such answer explains another copy)",
                first.via
            )),
            Some(i) => {
                let a = refused.remove(i);
                Ok(format!(
                    "a confirm lost to the broker's stop: an attempt sent to g{} at {} was answered 503 destination_unavailable at {}, as the broker went down; the claim was released and published again",
                    a.gateway,
                    ms(a.sent),
                    ms(a.at)
                ))
            }
        }
    };
    match by_stop {
        Ok(why) => {
            double.explained = true;
            double.why = why;
        }
        Err(stop) => double.why = format!("{by_kill}; {stop}"),
    }
    double
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::downstream::Via;

    fn via(gateway: u8, incarnation: u16) -> Via {
        Via {
            gateway,
            incarnation,
        }
    }

    fn p(event: u32, attempt: u32, v: Via, received: u64, status: u16) -> Processing {
        Processing {
            event,
            attempt,
            via: v,
            received,
            answered: received + 10,
            status,
            stored: None,
        }
    }

    fn forwarded(event: u32, gateway: u8, attempt: u32, at: u64) -> Answer {
        Answer {
            event,
            gateway,
            outcome: Outcome::Forwarded,
            status: 200,
            attempt,
            retry_after: false,
            sent: at - 5,
            at,
        }
    }

    #[test]
    fn lost_once_and_twice_are_counted() {
        let procs = [
            p(0, 1, via(1, 1), 100, 200),
            p(1, 1, via(1, 1), 100, 500), // failed: not a processing
            p(2, 1, via(1, 1), 100, 200),
            p(2, 1, via(1, 1), 300, 200),
        ];
        let v = judge(3, &procs, &[], &[], &[], None, Delivery::Forward);
        assert_eq!(v.lost, [1]);
        assert_eq!(v.processed_once, 1);
        assert_eq!(
            (v.explained(), v.unexplained(), v.events_twice()),
            (0, 1, 1)
        );
        assert!(
            v.doubles[0].why.contains("never SIGKILLed"),
            "{}",
            v.doubles[0].why
        );
        assert!(!v.pass());
    }

    #[test]
    fn a_takeover_after_a_kill_is_explained() {
        let kill = Kill {
            via: via(1, 1),
            at: 150,
            dead: 160,
            restarted: None,
        };
        let procs = [p(0, 1, via(1, 1), 100, 200), p(0, 2, via(1, 2), 2_000, 200)];
        let v = judge(1, &procs, &[], &[kill], &[], None, Delivery::Forward);
        assert_eq!((v.explained(), v.unexplained()), (1, 0));
        assert_eq!(v.doubles[0].kill, Some(kill));
        assert!(v.pass());
    }

    #[test]
    fn a_first_arriving_long_after_the_death_is_not_explained() {
        let kill = Kill {
            via: via(1, 1),
            at: 150,
            dead: 160,
            restarted: None,
        };
        let late = [
            p(0, 1, via(1, 1), 200_000, 200),
            p(0, 2, via(1, 2), 300_000, 200),
        ];
        let v = judge(1, &late, &[], &[kill], &[], None, Delivery::Forward);
        assert!(
            v.doubles[0].why.contains("after g1/r1 was killed"),
            "{}",
            v.doubles[0].why
        );
        // Written just before the death, read just after: still in flight.
        let buffered = [
            p(0, 1, via(1, 1), 170, 200),
            p(0, 2, via(1, 2), 300_000, 200),
        ];
        assert!(judge(1, &buffered, &[], &[kill], &[], None, Delivery::Forward).pass());
    }

    #[test]
    fn a_fresh_claim_after_a_kill_is_not_explained() {
        let kill = Kill {
            via: via(1, 1),
            at: 150,
            dead: 160,
            restarted: None,
        };
        let procs = [p(0, 1, via(1, 1), 100, 200), p(0, 1, via(1, 2), 2_000, 200)];
        let v = judge(1, &procs, &[], &[kill], &[], None, Delivery::Forward);
        assert_eq!(v.unexplained(), 1);
        assert!(v.doubles[0].why.contains("claimed afresh"));
    }

    #[test]
    fn told_forwarded_before_the_kill_is_not_explained() {
        let kill = Kill {
            via: via(2, 1),
            at: 500,
            dead: 510,
            restarted: None,
        };
        let procs = [p(0, 1, via(2, 1), 100, 200), p(0, 2, via(3, 1), 2_000, 200)];
        // A forwarded answer from another gateway, or for another attempt, does not count.
        let unrelated = [forwarded(0, 3, 1, 200), forwarded(0, 2, 3, 200)];
        assert!(judge(1, &procs, &unrelated, &[kill], &[], None, Delivery::Forward).pass());
        let told = [forwarded(0, 2, 1, 200)];
        let v = judge(1, &procs, &told, &[kill], &[], None, Delivery::Forward);
        assert_eq!(v.unexplained(), 1);
        assert_eq!(v.doubles[0].told, Some(told[0]));
    }

    #[test]
    fn told_forwarded_without_a_kill_is_named() {
        let procs = [p(0, 1, via(1, 1), 100, 200), p(0, 2, via(1, 1), 3_000, 200)];
        let told = [forwarded(0, 1, 1, 200)];
        let v = judge(1, &procs, &told, &[], &[], None, Delivery::Forward);
        assert_eq!(v.doubles[0].told, Some(told[0]));
        assert!(
            v.doubles[0]
                .why
                .contains("never SIGKILLed; a sender was told"),
            "{}",
            v.doubles[0].why
        );
    }

    #[test]
    fn history_lists_both_sides_in_order_and_folds_repeats() {
        let mut busy = forwarded(0, 1, 0, 50);
        busy.outcome = Outcome::InFlight;
        busy.status = 409;
        let mut busy2 = busy;
        busy2.sent = 60;
        busy2.at = 70;
        let answers = [busy, busy2, forwarded(0, 1, 1, 300)];
        let line = history(0, &[p(0, 1, via(1, 1), 260, 200)], &answers);
        assert_eq!(
            line,
            "event 0: sent to g1 2 times from 0.0 ms -> in_flight until 0.1 ms; \
             downstream got attempt 1 from g1/r1 at 0.3 ms -> 200 at 0.3 ms; \
             sent to g1 at 0.3 ms -> forwarded attempt 1 at 0.3 ms"
        );
    }

    #[test]
    fn three_processings_are_two_doubles_each_judged() {
        let kill = Kill {
            via: via(1, 1),
            at: 150,
            dead: 160,
            restarted: None,
        };
        let procs = [
            p(0, 2, via(1, 2), 2_000, 200),
            p(0, 1, via(1, 1), 100, 200),
            p(0, 3, via(1, 2), 4_000, 200),
        ];
        let v = judge(1, &procs, &[], &[kill], &[], None, Delivery::Forward);
        assert_eq!(v.doubles.len(), 2);
        assert_eq!(
            (v.explained(), v.unexplained(), v.events_twice()),
            (1, 1, 1)
        );
    }

    #[test]
    fn a_second_processing_beyond_the_ttl_says_so() {
        let kill = Kill {
            via: via(1, 1),
            at: 150,
            dead: 160,
            restarted: None,
        };
        let procs = [p(0, 1, via(1, 1), 100, 200), p(0, 2, via(1, 2), 5_000, 200)];
        assert!(
            judge(
                1,
                &procs,
                &[],
                &[kill],
                &[],
                Some(10_000),
                Delivery::Forward
            )
            .pass()
        );
        let v = judge(1, &procs, &[], &[kill], &[], Some(1_000), Delivery::Forward);
        assert_eq!(v.unexplained(), 1);
        assert!(
            v.doubles[0].why.contains("beyond the TTL"),
            "{}",
            v.doubles[0].why
        );
    }

    #[test]
    fn unacked_and_outcomes_are_summarized() {
        let mut other = forwarded(0, 1, 0, 10);
        other.outcome = Outcome::Other;
        other.status = 418;
        let answers = [forwarded(0, 1, 1, 20), other];
        let v = judge(
            1,
            &[p(0, 1, via(1, 1), 1, 200)],
            &answers,
            &[],
            &[0, 0, 0],
            None,
            Delivery::Forward,
        );
        assert_eq!((v.unacked_deliveries, v.unacked_events), (3, 1));
        assert_eq!(v.outcomes.get("forwarded"), Some(&1));
        assert_eq!(v.outcomes.get("http-418"), Some(&1));
        assert_eq!(v.attempts, 2);
    }

    const INBOX: Delivery<'static> = Delivery::Inbox { lease_us: 7_000 };

    fn restarted_kill(gateway: u8, at: u64, restarted: u64) -> Kill {
        Kill {
            via: via(gateway, 1),
            at,
            dead: at + 10,
            restarted: Some(restarted),
        }
    }

    #[test]
    fn an_inbox_redelivery_after_the_restart_is_explained() {
        let kill = restarted_kill(1, 150, 400);
        // Answered after the kill (the handler outlived the dispatcher), delivered again by the
        // next boot, or by another gateway once the restart freed the item.
        for second in [via(1, 2), via(3, 1)] {
            let procs = [p(0, 1, via(1, 1), 100, 200), p(0, 2, second, 450, 200)];
            let v = judge(1, &procs, &[], &[kill], &[], None, INBOX);
            assert_eq!((v.explained(), v.unexplained()), (1, 0), "{:?}", v.doubles);
            assert!(
                v.doubles[0]
                    .why
                    .contains("in flight at the SIGKILL of g1/r1")
            );
            assert_eq!(v.doubles[0].told, None);
        }
    }

    #[test]
    fn an_inbox_redelivery_needs_a_kill_of_the_first_sender() {
        let procs = [p(0, 1, via(1, 1), 100, 200), p(0, 2, via(2, 1), 450, 200)];
        let v = judge(
            1,
            &procs,
            &[],
            &[restarted_kill(2, 150, 400)],
            &[],
            None,
            INBOX,
        );
        assert_eq!(v.unexplained(), 1);
        assert!(
            v.doubles[0]
                .why
                .contains("g1/r1 delivered the first and was never SIGKILLed"),
            "{}",
            v.doubles[0].why
        );
    }

    #[test]
    fn an_inbox_item_taken_again_while_the_killed_lease_ran_is_not_explained() {
        let kill = restarted_kill(2, 150, 400);
        // Another gateway delivered it between the kill and the restart, within the lease.
        let procs = [p(0, 1, via(2, 1), 100, 200), p(0, 2, via(1, 1), 300, 200)];
        let v = judge(1, &procs, &[], &[kill], &[], None, INBOX);
        assert_eq!(v.unexplained(), 1);
        assert!(
            v.doubles[0].why.contains("before g2 was restarted"),
            "{}",
            v.doubles[0].why
        );
        // Never restarted: due again once the lease lapsed.
        let kill = Kill {
            restarted: None,
            ..kill
        };
        let procs = [p(0, 1, via(2, 1), 100, 200), p(0, 2, via(1, 1), 7_200, 200)];
        assert!(judge(1, &procs, &[], &[kill], &[], None, INBOX).pass());
    }

    #[test]
    fn an_inbox_delivery_answered_a_lease_before_the_kill_is_not_explained() {
        let kill = restarted_kill(1, 20_000, 20_400);
        let procs = [
            p(0, 1, via(1, 1), 1_000, 200),
            p(0, 2, via(1, 2), 21_000, 200),
        ];
        let v = judge(1, &procs, &[], &[kill], &[], None, INBOX);
        assert_eq!(v.unexplained(), 1);
        assert!(
            v.doubles[0]
                .why
                .contains("longer than the dispatcher's lease"),
            "{}",
            v.doubles[0].why
        );
    }

    #[test]
    fn an_inbox_redelivery_with_attempt_one_is_not_explained() {
        let procs = [p(0, 1, via(1, 1), 100, 200), p(0, 1, via(1, 2), 450, 200)];
        let v = judge(
            1,
            &procs,
            &[],
            &[restarted_kill(1, 150, 400)],
            &[],
            None,
            INBOX,
        );
        assert_eq!(v.unexplained(), 1);
        assert!(
            v.doubles[0].why.contains("delivered afresh"),
            "{}",
            v.doubles[0].why
        );
    }

    #[test]
    fn queued_is_an_acknowledged_answer() {
        let mut queued = forwarded(0, 1, 0, 10);
        queued.outcome = Outcome::Queued;
        queued.status = 202;
        assert!(queued.acked());
        let v = judge(
            1,
            &[p(0, 1, via(1, 1), 50, 200)],
            &[queued],
            &[],
            &[],
            None,
            INBOX,
        );
        assert_eq!(v.outcomes.get("queued"), Some(&1));
        assert!(v.pass());
    }
}
