//! The advisor's chart: one panel per source, a histogram of the gaps between first receipt and
//! each repeated delivery on a logarithmic time axis (from a millisecond, or the round time
//! below the shortest gap), with the TTL in force, the documented retry window and the
//! recommended TTL as labelled vertical lines. Lines at the same time share one label
//! ("TTL = retry window 3d"). Drawn by `idemgate-chart`.

use std::time::Duration;

use idemgate_chart::{Colour, Dash, Frame, HistogramPanel, Mark, Style, TimeHistogram, count};
use idemgate_core::Human;
use idemgate_core::advise::Advice;

/// Renders the chart for each `(advice, gaps)` pair, over the last `since`.
pub(crate) fn svg(sources: &[(Advice, Vec<Duration>)], since: Duration) -> String {
    let title = format!(
        "Gap between first receipt and each repeated delivery, last {}",
        Human(since)
    );
    sources
        .iter()
        .fold(
            TimeHistogram::new(
                Frame::new("gaps", &title),
                "gap since first receipt (log scale)",
                "repeated deliveries",
            ),
            |chart, (advice, gaps)| chart.panel(panel(advice, gaps)),
        )
        .render()
}

fn panel(a: &Advice, gaps: &[Duration]) -> HistogramPanel {
    let heading = format!(
        "{}: {}, {}, {}; verdict: {}",
        a.source,
        count(a.deliveries, "delivery", "deliveries"),
        count(a.duplicates, "repeat", "repeats"),
        count(a.late_duplicates, "late duplicate", "late duplicates"),
        a.verdict
    );
    let mut panel = HistogramPanel::new(heading)
        .durations(gaps.iter().copied())
        .empty_text("no repeated deliveries");
    if let (Some(p50), Some(p90), Some(p99), Some(max)) = (a.p50, a.p90, a.p99, a.max) {
        panel = panel.note(format!(
            "gap p50 {} | p90 {} | p99 {} | max {}",
            Human(p50),
            Human(p90),
            Human(p99),
            Human(max)
        ));
    }
    marks(a).into_iter().fold(panel, HistogramPanel::mark)
}

/// The TTL, the retry window and the recommended TTL, each its own line and style; those at the
/// same time are one line (the first one's style) with one label naming them all.
fn marks(a: &Advice) -> Vec<Mark> {
    let lines = [
        (
            "TTL",
            a.ttl,
            Style::nth(1).colour(Colour::Vermillion).dash(Dash::Solid),
        ),
        (
            "retry window",
            a.retry_window,
            Style::nth(0).colour(Colour::Blue).dash(Dash::Dashed),
        ),
        (
            "recommended TTL",
            a.recommended_ttl,
            Style::nth(2).colour(Colour::Green).dash(Dash::Dotted),
        ),
    ];
    let mut groups: Vec<(Duration, Vec<&str>, Style)> = Vec::new();
    for (name, at, style) in lines {
        match groups.iter_mut().find(|g| g.0 == at) {
            Some(group) => group.1.push(name),
            None => groups.push((at, vec![name], style)),
        }
    }
    groups
        .into_iter()
        .map(|(at, names, style)| {
            Mark::new(
                at.as_secs_f64(),
                format!("{} {}", names.join(" = "), Human(at)),
            )
            .style(style)
        })
        .collect()
}
