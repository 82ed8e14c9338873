//! The advisor's chart: one panel per source, a histogram of the gaps between first receipt and
//! each repeated delivery on a logarithmic time axis (from a millisecond, or the round time
//! below the shortest gap), with the TTL in force, the documented retry window and the
//! recommended TTL as labelled vertical lines. Lines at the same time share one label
//! ("TTL = retry window 3d"). Drawn by `idemgate-chart`; each panel is the dashboard's
//! ([`gap_chart`]), so the file and the page draw the same chart.

use std::time::Duration;

use idemgate_chart::Frame;
use idemgate_core::advise::Advice;
use idemgate_gateway::dashboard::gap_chart;

/// Renders the chart for each `(advice, gaps)` pair, over the last `since`.
pub(crate) fn svg(sources: &[(Advice, Vec<Duration>)], since: Duration) -> String {
    gap_chart(
        |title| Frame::new("gaps", title),
        sources.iter().map(|(a, g)| (a, g.as_slice())),
        since,
    )
}
