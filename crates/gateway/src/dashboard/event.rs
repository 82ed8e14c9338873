//! One event's page: its live record and its history as a timeline, the data `idemgate lookup`
//! and `/v1/events/{source}/{event_id}` give.

use std::fmt::Write as _;

use idemgate::EventReport;
use idemgate_core::{EventView, HistoryOutcome, Human};

use super::html::{esc, search_form, shell};
use crate::AppState;

/// What a history outcome means, in a few words.
fn meaning(outcome: HistoryOutcome) -> &'static str {
    match outcome {
        HistoryOutcome::Claimed => "first receipt: claimed for processing",
        HistoryOutcome::Duplicate => "a repeat within the TTL: acknowledged, not processed again",
        HistoryOutcome::InFlight => {
            "a repeat while another delivery held the claim: told to retry later"
        }
        HistoryOutcome::Conflict => "the same id with a different payload",
        HistoryOutcome::Reclaimed => "a lapsed lease taken over: processed again, a new attempt",
        HistoryOutcome::Completed => "processing finished",
        HistoryOutcome::Released => {
            "processing failed: the claim was given up so the next retry is processed"
        }
        HistoryOutcome::LateDuplicate => {
            "LATE DUPLICATE: a repeat after the record expired, of an event processed before (the TTL was too short, or a replay)"
        }
        HistoryOutcome::Abandoned => {
            "its gateway started again: the claim was made takeable at once"
        }
        HistoryOutcome::DeadLettered => "inbox: out of attempts, kept as a dead letter",
        HistoryOutcome::Replayed => "inbox: a dead letter moved back to the queue",
        HistoryOutcome::AttemptFailed => {
            "inbox: a delivery from the queue failed; it will be tried again"
        }
    }
}

pub(crate) fn render(
    view: &EventView,
    queued: &[idemgate_core::inbox::QueueEntry],
    state: &AppState,
) -> String {
    let report = EventReport::new(view, queued);
    let source = view.key.source.as_str();
    let event_id = view.key.event_id.as_str();
    let names: Vec<&str> = state
        .known_names()
        .into_iter()
        .map(|n| n.as_str())
        .collect();
    let mut b = String::with_capacity(8 * 1024);
    b.push_str(
        "<header>\n<div class=\"bar\"><h1><a href=\"/dashboard\">idemgate</a>: event</h1></div>\n",
    );
    b.push_str(&search_form(&names, Some(source), event_id));
    b.push_str("</header>\n<main>\n");
    let _ = writeln!(
        b,
        "<h2>Event <span class=\"id\" id=\"event-id\">{}</span> of source <span class=\"id\">{}</span></h2>",
        esc(event_id),
        esc(source)
    );
    let late = view
        .history
        .iter()
        .filter(|h| h.outcome == HistoryOutcome::LateDuplicate)
        .count();
    if late > 0 {
        let _ = writeln!(
            b,
            "<p class=\"flag\" role=\"alert\">{late} late duplicate{}: this event came again after its record expired. See <code>idemgate advise</code> for the TTL it needs.</p>",
            if late == 1 { "" } else { "s" }
        );
    }
    b.push_str("<div class=\"grid\">\n<section class=\"card\" aria-labelledby=\"record-h\"><h3 id=\"record-h\">Record</h3>\n<dl class=\"facts\">");
    let fact = |b: &mut String, k: &str, v: &str| {
        let _ = write!(b, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(v));
    };
    fact(
        &mut b,
        "processed at",
        report.processed_at.as_deref().unwrap_or("never"),
    );
    fact(
        &mut b,
        "first seen",
        report.first_seen.as_deref().unwrap_or("never"),
    );
    match &report.record {
        Some(r) => {
            fact(
                &mut b,
                "live record",
                &format!("{} (attempt {})", r.state, r.attempt),
            );
            if let Some(lease) = &r.lease_until {
                fact(&mut b, "lease until", lease);
            }
            fact(&mut b, "expires at", &r.expires_at);
            if let Some(holder) = &r.holder {
                fact(&mut b, "held by", holder);
            }
            if let Some(fp) = &r.fingerprint {
                fact(&mut b, "payload sha-256", fp);
            }
        }
        None => fact(
            &mut b,
            "live record",
            "none (never claimed, released, or expired)",
        ),
    }
    b.push_str("</dl></section>\n");
    if let Some(inbox) = &report.inbox {
        b.push_str("<section class=\"card\" aria-labelledby=\"inbox-h\"><h3 id=\"inbox-h\">Inbox</h3>\n<dl class=\"facts\">");
        let _ = write!(
            b,
            "<dt>state</dt><dd data-inbox-state=\"{s}\">{s}</dd>",
            s = inbox.state
        );
        if let Some(at) = &inbox.queued_at {
            fact(&mut b, "queued", at);
        }
        for a in &inbox.attempts {
            fact(
                &mut b,
                &format!(
                    "attempt {} failed",
                    a.attempt.map_or_else(|| "-".to_owned(), |n| n.to_string())
                ),
                &format!(
                    "{}: {}{}",
                    a.at,
                    a.status.map(|s| format!("HTTP {s}, ")).unwrap_or_default(),
                    a.error.as_deref().unwrap_or("failed")
                ),
            );
        }
        if let Some(at) = &inbox.dead_lettered_at {
            fact(&mut b, "dead-lettered", at);
        }
        for r in &inbox.replays {
            fact(
                &mut b,
                "replayed",
                &format!("{} (reason: {})", r.at, r.reason.as_deref().unwrap_or("-")),
            );
        }
        if let Some(at) = &inbox.next_attempt_at {
            fact(&mut b, "next attempt", at);
        }
        fact(
            &mut b,
            "delivered",
            inbox.delivered_at.as_deref().unwrap_or("not yet"),
        );
        b.push_str("</dl></section>\n");
    }
    b.push_str("<section class=\"card\" aria-labelledby=\"history-h\"><h3 id=\"history-h\">History, oldest first</h3>\n");
    if view.history.is_empty() {
        b.push_str("<p>None: idemgate never received this event.</p>\n");
    } else {
        b.push_str("<ol class=\"timeline\">\n");
        for h in &view.history {
            let attempt = h
                .attempt
                .map(|a| format!(", attempt {a}"))
                .unwrap_or_default();
            let gap = h
                .gap
                .map(|g| format!(", {} after first receipt", Human(g)))
                .unwrap_or_default();
            let note = h
                .note
                .as_deref()
                .map(|n| format!("<br><span class=\"muted\">note: {}</span>", esc(n)))
                .unwrap_or_default();
            let _ = writeln!(
                b,
                "<li class=\"{o}\" data-outcome=\"{o}\"><time datetime=\"{at}\">{at}</time><br><span class=\"outcome\">{o}</span>{attempt}{gap}<br><span class=\"muted\">{meaning}</span>{note}</li>",
                o = h.outcome.as_str(),
                at = h.at,
                meaning = esc(meaning(h.outcome)),
            );
        }
        b.push_str("</ol>\n");
    }
    b.push_str("</section>\n</div>\n</main>\n<footer>Times are UTC, by the store's clock. The same data: <code>idemgate lookup</code>, <code>GET /v1/events/{source}/{event_id}</code>.</footer>\n");
    shell(&format!("{event_id} ({source}): idemgate"), false, &b)
}
