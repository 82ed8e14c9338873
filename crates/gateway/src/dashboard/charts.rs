//! The dashboard's charts, drawn by `idemgate-chart`: deliveries over time by outcome, the gap
//! histogram against the TTL and the retry window (the chart `idemgate advise --plot` draws),
//! and gauges of live rows and queue lag against what they are held to.

use std::time::Duration;

use idemgate_chart::{
    Bars, Colour, Dash, Fill, Frame, Gauge, HistogramPanel, Mark, Series, Style, TimeHistogram,
    count,
};
use idemgate_core::advise::Advice;
use idemgate_core::{HistoryOutcome, Human, TimelineCounts};

/// The outcomes a deliveries chart stacks, in order, with their names on the page. A takeover
/// (`reclaimed`) is a claim too; completions and dead letters are not deliveries.
pub(crate) const OUTCOMES: [(HistoryOutcome, &str); 7] = [
    (HistoryOutcome::Claimed, "claimed"),
    (HistoryOutcome::Reclaimed, "reclaimed"),
    (HistoryOutcome::Duplicate, "duplicate"),
    (HistoryOutcome::InFlight, "in flight"),
    (HistoryOutcome::Conflict, "conflict"),
    (HistoryOutcome::LateDuplicate, "late duplicate"),
    (HistoryOutcome::Released, "released"),
];

/// The widths charts are laid out for, so that their text reads at 12 to 15 px: half of a wide
/// screen's column, all of it, and a phone.
pub(crate) const HALF: f64 = 560.0;
pub(crate) const FULL: f64 = 1_160.0;
pub(crate) const NARROW: f64 = 420.0;

/// Stacked bars of `t`'s counts by outcome, one bar per bucket labelled with its start (UTC).
pub(crate) fn deliveries(id: &str, title: &str, t: &TimelineCounts, width: f64) -> String {
    let categories: Vec<String> = (0..t.buckets)
        .map(|n| hh_mm(&t.bucket_start(n).to_string()))
        .collect();
    let unit = format!("deliveries per {}", Human(t.bucket));
    let total: u64 = OUTCOMES.iter().map(|(o, _)| t.total(*o)).sum();
    let desc = format!(
        "{title}: {} in all; {}.",
        count(total, "delivery", "deliveries"),
        OUTCOMES
            .iter()
            .map(|(o, name)| format!("{name} {}", t.total(*o)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    OUTCOMES
        .iter()
        .enumerate()
        .fold(
            Bars::new(
                Frame::new(id, title).width(width).fluid().desc(&desc),
                categories,
                "bucket start (UTC, by the store's clock)",
                unit,
            ),
            |bars, (n, (o, name))| {
                let values = (0..t.buckets).map(|i| t.count(i, *o) as f64);
                bars.series(Series::new(*name, values).style(outcome_style(n, *o)))
            },
        )
        .render()
}

/// Each outcome's colour and fill. The five fills go first to the five outcomes that matter
/// most (claimed, duplicate, in flight, conflict, late duplicate, the last in a warning colour);
/// reclaimed and released share a fill with conflict and duplicate, and differ from them in
/// colour and in their place in the stack (the legend's order).
fn outcome_style(n: usize, o: HistoryOutcome) -> Style {
    let (colour, fill) = match o {
        HistoryOutcome::Claimed => (Colour::Blue, Fill::Solid),
        HistoryOutcome::Duplicate => (Colour::Sky, Fill::Dots),
        HistoryOutcome::InFlight => (Colour::Orange, Fill::Crosshatch),
        HistoryOutcome::Conflict => (Colour::Purple, Fill::Stripes),
        HistoryOutcome::LateDuplicate => (Colour::Vermillion, Fill::Hatch),
        HistoryOutcome::Reclaimed => (Colour::Green, Fill::Stripes),
        _ => (Colour::Grey, Fill::Dots),
    };
    Style::nth(n).colour(colour).fill(fill)
}

/// `HH:MM` of an RFC 3339 time.
fn hh_mm(rfc3339: &str) -> String {
    rfc3339.get(11..16).unwrap_or(rfc3339).to_owned()
}

/// The gap histogram of the sources in `sources`, one panel each, over the last `since`.
pub(crate) fn gaps(
    id: &str,
    sources: &[(&Advice, &[Duration])],
    since: Duration,
    width: f64,
) -> String {
    gap_chart(
        |title| Frame::new(id, title).width(width).fluid(),
        sources.iter().copied(),
        since,
    )
}

/// The gap histogram over the last `since`, one panel per `(advice, gaps)` ([`gap_panel`]), in
/// the frame `frame` makes of its title: the dashboard's and `idemgate advise --plot`'s.
pub fn gap_chart<'a>(
    frame: impl FnOnce(&str) -> Frame,
    sources: impl IntoIterator<Item = (&'a Advice, &'a [Duration])>,
    since: Duration,
) -> String {
    let title = format!(
        "Gap between first receipt and each repeated delivery, last {}",
        Human(since)
    );
    sources
        .into_iter()
        .fold(
            TimeHistogram::new(
                frame(&title),
                "gap since first receipt (log scale)",
                "repeated deliveries",
            ),
            |chart, (advice, gaps)| chart.panel(gap_panel(advice, gaps)),
        )
        .render()
}

/// One source's panel of the gap histogram: the gaps, with the TTL in force, the documented
/// retry window and the recommended TTL as labelled vertical lines (those at the same time
/// share one line and one label, "TTL = retry window 3d"), headed by the advisor's verdict.
pub fn gap_panel(a: &Advice, gaps: &[Duration]) -> HistogramPanel {
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

/// Live dedup records against the rows projected from the arrival rate x TTL, and the
/// expired records the sweeper has not removed yet against the live ones.
pub(crate) fn rows(id: &str, source: &str, a: &Advice, expired: u64, width: f64) -> String {
    Gauge::new(
        Frame::new(id, &format!("{source}: dedup records"))
            .width(width)
            .fluid(),
    )
    .row(
        "live, of projected (arrival rate x TTL)",
        a.live_rows as f64,
        a.projected_rows as f64,
    )
    .row(
        "expired, not yet swept, of live",
        expired as f64,
        a.live_rows as f64,
    )
    .render()
}

/// An inbox source's oldest pending item against its `queue_lag` margin, in seconds.
pub(crate) fn queue_lag(
    id: &str,
    source: &str,
    oldest: Option<Duration>,
    margin: Duration,
    width: f64,
) -> String {
    Gauge::new(
        Frame::new(id, &format!("{source}: inbox queue lag"))
            .width(width)
            .fluid(),
    )
    .row(
        "oldest pending item, seconds, of the queue_lag margin",
        oldest.map_or(0.0, |d| d.as_secs_f64().round()),
        margin.as_secs_f64(),
    )
    .render()
}
