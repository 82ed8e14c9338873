//! The verdict tables, in markdown, for stdout.

use std::fmt::Write as _;

use crate::clock::{delta_ms, ms};
use crate::verdict::{Verdict, copy_at};

/// How one scenario ended.
#[derive(Debug)]
pub enum Ended {
    Judged(Box<Verdict>),
    /// It could not run to its end (a server did not start, a fault could not be injected).
    Error(String),
    /// A tool it needs is missing and CI is not set.
    Skipped(String),
}

#[derive(Debug)]
pub struct Scenario {
    pub name: &'static str,
    pub store: &'static str,
    pub ended: Ended,
    pub seconds: f64,
}

impl Scenario {
    pub fn failed(&self) -> bool {
        match &self.ended {
            Ended::Judged(v) => !v.pass(),
            Ended::Error(_) => true,
            Ended::Skipped(_) => false,
        }
    }
}

/// The summary table, then one section per scenario.
pub fn render(header: &str, scenarios: &[Scenario], max_rows: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# idemgate chaos\n\n{header}\n");
    out.push_str("| scenario | store | events | attempts | processed once | lost | processed more than once | 2nd processings in flight at a kill | unexplained | unacked deliveries | p99 during fault | recovery | time | verdict |\n");
    out.push_str("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for s in scenarios {
        let time = format!("{:.1} s", s.seconds);
        match &s.ended {
            Ended::Judged(v) => {
                let verdict = if v.pass() { "pass" } else { "**FAIL**" };
                let verdict = match &v.headline {
                    Some(h) => format!("{verdict} ({h})"),
                    None => verdict.to_owned(),
                };
                let (p99, recovery) = v
                    .fault
                    .as_ref()
                    .map_or((String::new(), String::new()), |f| {
                        (f.p99_cell(), crate::fault::seconds(f.recovery_us))
                    });
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {p99} | {recovery} | {time} | {verdict} |",
                    s.name,
                    s.store,
                    v.events,
                    v.attempts,
                    v.processed_once,
                    v.lost.len(),
                    v.events_twice(),
                    v.explained(),
                    v.unexplained(),
                    v.unacked_deliveries,
                );
            }
            Ended::Error(e) => {
                let first = e.lines().next().unwrap_or_default();
                let _ = writeln!(
                    out,
                    "| {} | {} | | | | | | | | | | | {time} | **ERROR**: {} |",
                    s.name,
                    s.store,
                    first.replace('|', "\\|")
                );
            }
            Ended::Skipped(why) => {
                let _ = writeln!(
                    out,
                    "| {} | {} | | | | | | | | | | | {time} | skipped: {} |",
                    s.name,
                    s.store,
                    why.replace('|', "\\|")
                );
            }
        }
    }
    for s in scenarios {
        let _ = writeln!(out, "\n## {} ({})\n", s.name, s.store);
        match &s.ended {
            Ended::Judged(v) => section(&mut out, v, max_rows),
            Ended::Error(e) => {
                let _ = writeln!(out, "Could not run to its end:\n\n```\n{e}\n```");
            }
            Ended::Skipped(why) => {
                let _ = writeln!(out, "Skipped: {why}");
            }
        }
    }
    out
}

fn section(out: &mut String, v: &Verdict, max_rows: usize) {
    for f in &v.failures {
        let _ = writeln!(out, "- **failed check**: {f}");
    }
    if let Some(f) = &v.fault {
        let _ = writeln!(out, "- {}", f.line());
    }
    for n in &v.notes {
        let _ = writeln!(out, "- {n}");
    }
    let answers: Vec<String> = v.outcomes.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(out, "- answers to the senders: {}", answers.join(", "));
    if v.unacked_deliveries > 0 {
        let _ = writeln!(
            out,
            "- {} deliveries ({} events) gave up at their deadline without a 2xx",
            v.unacked_deliveries, v.unacked_events
        );
    }
    if v.logged.is_empty() {
        out.push_str("- the gateways logged no warning\n");
    } else {
        out.push_str("- the gateways logged:\n");
        for l in &v.logged {
            let _ = writeln!(out, "  - {l}");
        }
    }
    if !v.lost.is_empty() {
        let shown: Vec<String> = v.lost.iter().take(max_rows).map(u32::to_string).collect();
        let _ = writeln!(
            out,
            "\n**Lost** ({}): events {}{}",
            v.lost.len(),
            shown.join(", "),
            if v.lost.len() > max_rows { ", ..." } else { "" }
        );
    }
    if !v.doubles.is_empty() {
        let _ = writeln!(
            out,
            "\n**Processed more than once** ({} second processings, {} in flight at a kill, {} unexplained; unexplained first):\n",
            v.doubles.len(),
            v.explained(),
            v.unexplained()
        );
        out.push_str("| event | first: attempt, process, received -> 2xx (a broker copy: its place) | SIGKILL of that process | second: the same | judged |\n");
        out.push_str("|--:|---|---|---|---|\n");
        let mut doubles: Vec<_> = v.doubles.iter().collect();
        doubles.sort_by_key(|d| (d.explained, d.first.received));
        for d in doubles.iter().take(max_rows) {
            let kill = match (d.kill, d.first.stored) {
                (Some(k), None) => format!(
                    "{} (first's 2xx {} from it)",
                    ms(k.at),
                    delta_ms(d.first.answered, k.at)
                ),
                (Some(k), Some(s)) if s.timed => format!(
                    "{} (first stored {} from it)",
                    ms(k.at),
                    delta_ms(d.first.received, k.at)
                ),
                (Some(k), Some(_)) => ms(k.at),
                (None, _) => "none".to_owned(),
            };
            let judged = if d.explained {
                d.why.clone()
            } else {
                format!("**{}**", d.why)
            };
            let _ = writeln!(
                out,
                "| {} | {}, {}, {} | {kill} | {}, {}, {} | {judged} |",
                d.event,
                d.first.attempt,
                d.first.via,
                copy_at(&d.first),
                d.second.attempt,
                d.second.via,
                copy_at(&d.second),
            );
        }
        if doubles.len() > max_rows {
            let _ = writeln!(out, "\n... and {} more", doubles.len() - max_rows);
        }
    }
    if !v.evidence.is_empty() {
        out.push_str("\nWhat was seen of the lost and the unexplained (run times):\n\n");
        for e in &v.evidence {
            let _ = writeln!(out, "- {e}");
        }
    }
}
