//! The overview's HTML: the health row, then one section per source.

use std::fmt::Write as _;
use std::time::Duration;

use idemgate_core::Human;
use idemgate_core::advise::{Advice, Verdict};

use super::charts::{self, FULL, HALF, NARROW};
use super::html::{esc, figure, search_form, shell};
use super::{ADVICE_PERIOD, Advised, Deliveries, Light, Overview};
use crate::AppState;
use crate::state::Counted;

/// `hits / (hits + misses)` in words: `93.1% (1,204 hits, 89 misses)`.
pub(crate) fn hit_rate(hits: u64, misses: u64) -> String {
    let total = hits + misses;
    if total == 0 {
        return "- (no claims through it yet)".to_owned();
    }
    format!(
        "{:.1}% ({hits} hits, {misses} misses)",
        hits as f64 * 100.0 / total as f64
    )
}

fn light_class(light: Light) -> (&'static str, &'static str) {
    match light {
        Light::Green => ("green", "\u{2713} OK"),
        Light::Amber => ("amber", "! WARNING"),
        Light::Red => ("red", "\u{2715} FAILING"),
        Light::Off => ("off", "\u{2013} n/a"),
    }
}

/// A duration in whole seconds, in words (`3d`, `1h 5m`).
fn human(d: Duration) -> String {
    Human(Duration::from_secs(d.as_secs())).to_string()
}

pub(crate) fn render(o: &Overview, state: &AppState) -> String {
    let mut b = String::with_capacity(64 * 1024);
    let names: Vec<&str> = state
        .known_names()
        .into_iter()
        .map(|n| n.as_str())
        .collect();
    b.push_str("<header>\n<div class=\"bar\"><h1>idemgate</h1>");
    let _ = write!(
        b,
        "<span class=\"muted\">store <strong>{}</strong></span>",
        esc(o.engine)
    );
    match &o.counted {
        Counted::Fresh(None) => {}
        Counted::Pending => b.push_str(
            "<span class=\"muted\" id=\"rows-total\" data-stats-pending>records are being counted; the figures appear on the next reload</span>",
        ),
        Counted::Fresh(Some(s)) | Counted::Stale(s, _) => {
            let _ = write!(
                b,
                "<span class=\"muted\" id=\"rows-total\">live records <strong>{}</strong>, expired not yet swept <strong>{}</strong>, history rows <strong>{}</strong>",
                s.live, s.expired, s.history_rows
            );
            if let Counted::Stale(_, age) = &o.counted {
                let _ = write!(
                    b,
                    " (counted {} ago; counting again)",
                    human(*age)
                );
            }
            b.push_str("</span>");
        }
    }
    b.push_str("</div>\n");
    b.push_str(&search_form(&names, None, ""));
    b.push_str("</header>\n<main>\n");
    if let Some(notice) = &o.notice {
        let _ = writeln!(
            b,
            "<p class=\"notice\" role=\"status\" data-notice>{}</p>",
            esc(notice)
        );
    }
    b.push_str("<h2 id=\"health\">Health</h2>\n<ul class=\"health\">\n");
    for h in &o.health {
        let (class, word) = light_class(h.light);
        let _ = writeln!(
            b,
            "<li class=\"{class}\" data-component=\"{}\"><h3>{}</h3><span class=\"state\">{word}</span> {}</li>",
            esc(h.name),
            esc(h.name),
            esc(&h.why)
        );
    }
    b.push_str("</ul>\n");
    tier_and_sweeps(&mut b, o, state);
    let advised = match &o.advised {
        Ok(Some(a)) => Some(a.as_ref()),
        Ok(None) => {
            let _ = writeln!(
                b,
                "<p class=\"muted\" data-advice-pending>The advisor's figures over the last {} are being computed from history; they appear on the next reload.</p>",
                human(ADVICE_PERIOD)
            );
            None
        }
        Err(e) => {
            let _ = writeln!(
                b,
                "<p class=\"flag\">The advisor cannot read history: {}</p>",
                esc(e)
            );
            None
        }
    };
    for (name, deliveries) in &o.deliveries {
        source_section(&mut b, o, state, name.as_str(), deliveries, advised);
    }
    b.push_str("</main>\n<footer>");
    if o.refresh {
        b.push_str(
            "This page reloads every 30 seconds (<a href=\"/dashboard?refresh=off\">stop</a>). ",
        );
    } else {
        b.push_str("Automatic reload is off (<a href=\"/dashboard\">turn it on</a>). ");
    }
    b.push_str("Times are UTC, by the store's clock. The same figures: <code>/metrics</code>, <code>idemgate advise</code>, <code>idemgate lookup</code>.</footer>\n");
    shell("idemgate dashboard", o.refresh, &b)
}

fn tier_and_sweeps(b: &mut String, o: &Overview, state: &AppState) {
    b.push_str("<div class=\"grid\">\n");
    if let Some(t) = o.tier {
        let _ = writeln!(
            b,
            "<section class=\"card\" aria-labelledby=\"tier-h\"><h3 id=\"tier-h\">Redis tier</h3><dl class=\"facts\"><dt>hit rate</dt><dd id=\"tier-hit-rate\">{}</dd><dt>errors</dt><dd>{}</dd><dt>bypassed</dt><dd>{}</dd></dl><p class=\"muted\">Since this gateway started (<code>idemgate_redis_tier</code>).</p></section>",
            esc(&hit_rate(t.hits, t.misses)),
            t.errors,
            t.bypassed
        );
    }
    let (runs, rows, failures) = state.metrics.sweeper_totals();
    let _ = write!(
        b,
        "<section class=\"card\" aria-labelledby=\"sweeps-h\"><h3 id=\"sweeps-h\">Sweeper: last runs</h3><p class=\"muted\" id=\"sweeper-totals\">Since start: {runs} runs, {rows} expired records deleted, {failures} failed (<code>idemgate_sweeper_*</code>).</p>"
    );
    if o.sweeps.is_empty() {
        b.push_str("<p>No run yet.</p>");
    } else {
        b.push_str("<div class=\"table\"><table><thead><tr><th scope=\"col\">ended</th><th scope=\"col\" class=\"n\">deleted</th><th scope=\"col\" class=\"n\">batches</th><th scope=\"col\" class=\"n\">took</th><th scope=\"col\">result</th></tr></thead><tbody>");
        for s in &o.sweeps {
            let result = match &s.error {
                Some(e) => format!("<span class=\"flag\">failed:</span> {}", esc(e)),
                None if s.partitions > 0 => {
                    format!("ok, {} partitions created or dropped", s.partitions)
                }
                None => "ok".to_owned(),
            };
            let _ = write!(
                b,
                "<tr><td>{} ago</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} ms</td><td>{result}</td></tr>",
                human(s.at.elapsed()),
                s.rows,
                s.batches,
                s.elapsed.as_millis()
            );
        }
        b.push_str("</tbody></table></div>");
    }
    b.push_str("</section>\n</div>\n");
}

fn source_section(
    b: &mut String,
    o: &Overview,
    state: &AppState,
    name: &str,
    deliveries: &Result<Option<Deliveries>, String>,
    advised: Option<&Advised>,
) {
    let Some(src) = state.sources.get(name) else {
        return;
    };
    // Chart ids: the source's position, not its name (names hold characters ids cannot).
    let n = o
        .deliveries
        .iter()
        .position(|(s, _)| s.as_str() == name)
        .unwrap_or(0);
    let id = |what: &str| format!("s{n}-{what}");
    let _ = writeln!(
        b,
        "<section aria-labelledby=\"{}\" data-source=\"{}\"><h2 id=\"{}\">Source {}</h2>",
        id("h"),
        esc(name),
        id("h"),
        esc(name)
    );
    let _ = writeln!(
        b,
        "<p class=\"muted\">mode {}; TTL {} (retry window {}, queue_lag {}, clock_skew {}, replay_margin {})</p>",
        esc(src.mode.as_str()),
        human(src.policy.ttl.ttl),
        human(src.policy.ttl.contract.retry_window),
        human(src.policy.ttl.contract.queue_lag),
        human(src.policy.ttl.contract.clock_skew),
        human(src.policy.ttl.contract.replay_margin)
    );
    b.push_str("<div class=\"grid\">\n");
    match deliveries {
        Err(e) => {
            let _ = writeln!(
                b,
                "<div class=\"card full\"><p class=\"flag\">Cannot count deliveries: {}</p></div>",
                esc(e)
            );
        }
        Ok(None) => {
            b.push_str("<div class=\"card full\"><p class=\"muted\" data-deliveries-pending>Deliveries over time are being counted from history; they appear on the next reload.</p></div>\n");
        }
        Ok(Some(Deliveries {
            hour: Some(hour),
            day: Some(day),
        })) => {
            for (what, title, t) in [
                ("hour", "Deliveries by outcome, last hour", hour),
                ("day", "Deliveries by outcome, last day", day),
            ] {
                let title = format!("{name}: {title}");
                let _ = writeln!(
                    b,
                    "<div class=\"card\">{}</div>",
                    figure(
                        &charts::deliveries(&id(what), &title, t, HALF),
                        &charts::deliveries(&id(&format!("{what}-narrow")), &title, t, NARROW)
                    )
                );
            }
        }
        Ok(_) => {
            b.push_str("<div class=\"card full\"><p>Deliveries over time are not available on this store: the Redis store keeps each event's history in a stream of its own, which it cannot count by time. Use a SQL store (optionally behind the Redis tier) for this chart.</p></div>\n");
        }
    }
    if let Some(advised) = advised
        && let Some(at) = advised
            .sources
            .iter()
            .position(|(a, _)| a.source.as_str() == name)
    {
        advice_cards(
            b,
            o,
            &id,
            name,
            &advised.sources[at].0,
            &advised.gap_figures[at],
            advised.at.elapsed(),
        );
    }
    inbox_card(b, o, state, &id, name);
    dead_letters_card(b, o, name);
    downstream_card(b, state, name);
    recent_card(b, o, name);
    counters_card(b, o, name);
    b.push_str("</div>\n</section>\n");
}

/// An inbox source's dead letters: each one's id, attempts and last error, a button to replay
/// it, and one to replay them all, each with the reason recorded in history.
fn dead_letters_card(b: &mut String, o: &Overview, name: &str) {
    let Some((_, letters)) = o.dead.iter().find(|(s, _)| s.as_str() == name) else {
        return;
    };
    let _ = write!(
        b,
        "<div class=\"card full\" data-dead-letters=\"{}\"><h3>{}: dead letters</h3>",
        esc(name),
        esc(name)
    );
    let letters = match letters {
        Err(e) => {
            let _ = writeln!(
                b,
                "<p class=\"flag\">Cannot read the dead letters: {}</p></div>",
                esc(e)
            );
            return;
        }
        Ok(letters) if letters.is_empty() => {
            b.push_str("<p>None.</p></div>\n");
            return;
        }
        Ok(letters) => letters,
    };
    let form = |b: &mut String, event_id: Option<&str>, label: &str| {
        let _ = write!(
            b,
            "<form method=\"post\" action=\"/dashboard/replay\" class=\"replay\"><input type=\"hidden\" name=\"form_token\" value=\"{}\"><input type=\"hidden\" name=\"source\" value=\"{}\">",
            esc(&o.form_token),
            esc(name)
        );
        if let Some(id) = event_id {
            let _ = write!(
                b,
                "<input type=\"hidden\" name=\"event_id\" value=\"{}\">",
                esc(id)
            );
        }
        let _ = write!(
            b,
            "<input name=\"reason\" required placeholder=\"reason (kept in history)\" aria-label=\"reason\"> <button type=\"submit\">{}</button></form>",
            esc(label)
        );
    };
    b.push_str("<div class=\"table\"><table><thead><tr><th scope=\"col\">event</th><th scope=\"col\" class=\"n\">attempts</th><th scope=\"col\">last error</th><th scope=\"col\">died</th><th scope=\"col\">replay</th></tr></thead><tbody>");
    for d in letters {
        let id = d.key.event_id.as_str();
        let _ = write!(
            b,
            "<tr data-dead=\"{}\"><td><a href=\"{}\">{}</a></td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>",
            esc(id),
            esc(&super::html::event_path(name, id)),
            esc(id),
            d.attempts.len(),
            esc(d.attempts.last().map_or("-", |a| a.error.as_str())),
            d.dead_at
        );
        form(b, Some(id), "replay");
        b.push_str("</td></tr>");
    }
    b.push_str("</tbody></table></div>");
    if letters.len() as u32 == super::DEAD_LISTED.get() {
        let _ = write!(
            b,
            "<p class=\"muted\">The oldest {}; <code>idemgate dead-letters --source {}</code> lists them all.</p>",
            super::DEAD_LISTED.get(),
            esc(name)
        );
    }
    form(b, None, "replay every dead letter of this source");
    b.push_str("<p class=\"muted\">A replay moves the dead letter back to the queue with a fresh attempt budget; history records it with the reason, as <code>idemgate replay --dead-letters</code> does.</p></div>\n");
}

/// What a source's downstream answered last, and how fast it answers, since this gateway started.
fn downstream_card(b: &mut String, state: &AppState, name: &str) {
    let Some(src) = state.sources.get(name) else {
        return;
    };
    let Some(target) = src.destination() else {
        return;
    };
    let _ = write!(
        b,
        "<div class=\"card\" data-downstream=\"{}\"><h3>{}: downstream</h3><dl class=\"facts\">",
        esc(name),
        esc(name)
    );
    match state.metrics.downstream(name) {
        None => b.push_str("<dt>last answer</dt><dd data-field=\"downstream_last\">none since this gateway started</dd>"),
        Some(seen) => {
            let answer = match (&seen.error, seen.status) {
                (None, Some(status)) => format!("HTTP {status}"),
                (Some(e), _) => format!("failed: {e}"),
                (None, None) => "acknowledged by the broker".to_owned(),
            };
            let ago = seen.at.elapsed().unwrap_or_default();
            let class = if seen.error.is_some() { " class=\"flag\"" } else { "" };
            let _ = write!(
                b,
                "<dt>last answer</dt><dd{class} data-field=\"downstream_last\">{} in {} ms, {} ago</dd>",
                esc(&answer),
                seen.took.as_millis(),
                human(ago)
            );
        }
    }
    if let Some(l) = state.metrics.downstream_latency_summary(name) {
        let _ = write!(
            b,
            "<dt>p50 / p99</dt><dd data-field=\"downstream_latency\">at most {} / {} ms over {} answers</dd>",
            l.p50.as_millis(),
            l.p99.as_millis(),
            l.count
        );
    }
    if let Some(l) = state.metrics.request_latency_summary(name) {
        let _ = write!(
            b,
            "<dt>sender's wait p50 / p99</dt><dd>at most {} / {} ms over {} requests</dd>",
            l.p50.as_millis(),
            l.p99.as_millis(),
            l.count
        );
    }
    if let Some(audit) = src.destination.as_ref().and_then(|d| d.audit()) {
        let class = if audit.degrades() {
            " class=\"flag\""
        } else {
            ""
        };
        let _ = write!(
            b,
            "<dt>dedup window</dt><dd{class} data-field=\"window_audit\">{}{}</dd>",
            esc(&audit.to_string()),
            audit
                .advice()
                .map(|a| format!(": {}", esc(&a)))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        b,
        "</dl><p class=\"muted\">{} to <code>{}</code>, since this gateway started (<code>idemgate_{}_duration_seconds</code>).</p></div>",
        if src.mode == crate::config::Mode::Inbox {
            "Deliveries from the queue"
        } else {
            "Forwards"
        },
        esc(&target.to_string()),
        if src.mode == crate::config::Mode::Inbox {
            "dispatch"
        } else {
            "forward"
        }
    );
}

/// A source's latest history rows, newest first, each linked to its event's page.
fn recent_card(b: &mut String, o: &Overview, name: &str) {
    let Some((_, rows)) = o.recent.iter().find(|(s, _)| s.as_str() == name) else {
        return;
    };
    let _ = write!(
        b,
        "<div class=\"card\" data-recent=\"{}\"><h3>{}: latest deliveries</h3>",
        esc(name),
        esc(name)
    );
    match rows {
        Err(e) => {
            let _ = write!(b, "<p class=\"muted\">{}</p>", esc(e));
        }
        Ok(rows) if rows.is_empty() => b.push_str("<p>None yet.</p>"),
        Ok(rows) => {
            b.push_str("<div class=\"table\"><table><thead><tr><th scope=\"col\">at</th><th scope=\"col\">event</th><th scope=\"col\">outcome</th></tr></thead><tbody>");
            for r in rows {
                let id = r.event_id.as_str();
                let _ = write!(
                    b,
                    "<tr><td><time datetime=\"{at}\">{at}</time></td><td><a href=\"{}\">{}</a></td><td data-outcome=\"{o}\">{o}{}</td></tr>",
                    esc(&super::html::event_path(name, id)),
                    esc(id),
                    r.attempt
                        .map(|a| format!(", attempt {a}"))
                        .unwrap_or_default(),
                    at = r.at,
                    o = r.outcome.as_str(),
                );
            }
            b.push_str("</tbody></table></div>");
        }
    }
    b.push_str("<p class=\"muted\">The newest history rows, by the store's clock.</p></div>\n");
}

/// The `n`th advised source's gap histogram, wide and narrow, for its card.
pub(super) fn gap_figure(n: usize, a: &Advice, gaps: &[Duration]) -> String {
    let sources = [(a, gaps)];
    figure(
        &charts::gaps(&format!("a{n}-gaps"), &sources, ADVICE_PERIOD, FULL),
        &charts::gaps(
            &format!("a{n}-gaps-narrow"),
            &sources,
            ADVICE_PERIOD,
            NARROW,
        ),
    )
}

fn advice_cards(
    b: &mut String,
    o: &Overview,
    id: &dyn Fn(&str) -> String,
    name: &str,
    a: &Advice,
    gap_figure: &str,
    age: Duration,
) {
    let _ = writeln!(b, "<div class=\"card full\">{gap_figure}");
    let verdict_class = match a.verdict {
        Verdict::TooShort { .. } => "flag",
        _ => "",
    };
    let ms = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), |d| Human(d).to_string());
    let _ = writeln!(
        b,
        "<dl class=\"facts\" data-advice=\"{src}\"><dt>verdict</dt><dd class=\"{verdict_class}\" data-field=\"verdict\">{verdict}</dd><dt>recommended TTL</dt><dd data-field=\"recommended_ttl_s\" data-value=\"{rec_s}\">{rec}</dd><dt>TTL in force</dt><dd data-field=\"ttl_s\" data-value=\"{ttl_s}\">{ttl}</dd><dt>deliveries</dt><dd data-field=\"deliveries\">{deliveries}</dd><dt>repeats</dt><dd data-field=\"duplicates\">{dups}</dd><dt>late duplicates</dt><dd data-field=\"late_duplicates\">{late}</dd><dt>gap p50 / p99 / max</dt><dd>{p50} / {p99} / {max}</dd></dl>",
        src = esc(name),
        verdict = esc(&a.verdict.to_string()),
        rec_s = a.recommended_ttl.as_secs(),
        // As precise as the chart's marks: a recommendation a fraction of a second above the
        // TTL in force must not read as equal to it.
        rec = Human(a.recommended_ttl),
        ttl_s = a.ttl.as_secs(),
        ttl = Human(a.ttl),
        deliveries = a.deliveries,
        dups = a.duplicates,
        late = a.late_duplicates,
        p50 = ms(a.p50),
        p99 = ms(a.p99),
        max = ms(a.max),
    );
    let _ = writeln!(
        b,
        "<p class=\"muted\">The advisor's figures over the last {}, as <code>idemgate advise</code> gives them; computed {} ago (at most once a minute).</p></div>",
        human(ADVICE_PERIOD),
        human(age)
    );
    let expired = o
        .counted
        .stats()
        .and_then(|s| s.per_source.iter().find(|p| p.source.as_str() == name))
        .map_or(0, |p| p.expired);
    let _ = writeln!(
        b,
        "<div class=\"card\">{}<dl class=\"facts\" data-rows=\"{}\"><dt>live</dt><dd data-field=\"live_rows\">{}</dd><dt>projected</dt><dd data-field=\"projected_rows\">{}</dd><dt>expired, not yet swept</dt><dd data-field=\"expired_rows\">{}</dd></dl><p class=\"muted\">Projected: first receipts per second x TTL, the rate over the {} the source's history covers.</p></div>",
        figure(
            &charts::rows(&id("rows"), name, a, expired, HALF),
            &charts::rows(&id("rows-narrow"), name, a, expired, NARROW)
        ),
        esc(name),
        a.live_rows,
        a.projected_rows,
        expired,
        human(a.projection_basis)
    );
}

fn inbox_card(
    b: &mut String,
    o: &Overview,
    state: &AppState,
    id: &dyn Fn(&str) -> String,
    name: &str,
) {
    let Some(src) = state.sources.get(name) else {
        return;
    };
    if src.mode != crate::config::Mode::Inbox {
        return;
    }
    let stats = o.inbox.iter().find(|s| s.source.as_str() == name);
    let (pending, in_flight, dead, oldest) = stats.map_or((0, 0, 0, None), |s| {
        (s.pending, s.in_flight, s.dead, s.oldest_pending)
    });
    let margin = src.policy.ttl.contract.queue_lag;
    let _ = writeln!(
        b,
        "<div class=\"card\">{}<dl class=\"facts\" data-inbox=\"{}\"><dt>pending</dt><dd data-field=\"pending\">{pending}</dd><dt>in flight</dt><dd data-field=\"in_flight\">{in_flight}</dd><dt>dead letters</dt><dd data-field=\"dead\">{dead}</dd><dt>oldest pending</dt><dd>{}</dd><dt>queue_lag margin</dt><dd>{}</dd></dl></div>",
        figure(
            &charts::queue_lag(&id("lag"), name, oldest, margin, HALF),
            &charts::queue_lag(&id("lag-narrow"), name, oldest, margin, NARROW)
        ),
        esc(name),
        oldest.map_or_else(|| "none".to_owned(), human),
        human(margin)
    );
}

fn counters_card(b: &mut String, o: &Overview, name: &str) {
    let Some(c) = o.counters.iter().find(|c| c.source.as_str() == name) else {
        return;
    };
    let (counts, late) = (&c.deliveries, c.late_duplicates);
    let _ = write!(
        b,
        "<div class=\"card\"><h3>{}: answers since this gateway started</h3><div class=\"table\"><table data-counters=\"{}\"><thead><tr><th scope=\"col\">outcome</th><th scope=\"col\" class=\"n\">count</th></tr></thead><tbody>",
        esc(name),
        esc(name)
    );
    if counts.is_empty() {
        b.push_str("<tr><td colspan=\"2\">none yet</td></tr>");
    }
    for (outcome, n) in counts {
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"n\" data-outcome=\"{}\">{n}</td></tr>",
            esc(outcome),
            esc(outcome)
        );
    }
    let _ = writeln!(
        b,
        "</tbody></table></div><p class=\"muted\">late duplicates counted: <span data-field=\"late_duplicates_metric\">{late}</span>. From <code>idemgate_deliveries</code> and <code>idemgate_late_duplicates</code> in <code>/metrics</code>.</p></div>"
    );
}
