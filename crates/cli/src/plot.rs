//! The advisor's chart: one panel per source, a histogram of the gaps between first receipt and
//! each repeated delivery on a logarithmic time axis, with the TTL and the retry window as
//! vertical lines. Plain SVG: no scripts, no external fonts or styles.

use std::fmt::Write;
use std::time::Duration;

use idemgate_core::Human;
use idemgate_core::advise::Advice;

const WIDTH: f64 = 860.0;
const PANEL: f64 = 280.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 70.0;
const PLOT_H: f64 = 170.0;
const BINS: usize = 40;

/// Ticks on the time axis: (seconds, label).
const TICKS: [(f64, &str); 10] = [
    (1.0, "1s"),
    (10.0, "10s"),
    (60.0, "1m"),
    (600.0, "10m"),
    (3_600.0, "1h"),
    (21_600.0, "6h"),
    (86_400.0, "1d"),
    (604_800.0, "7d"),
    (2_592_000.0, "30d"),
    (7_776_000.0, "90d"),
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Renders the chart for each `(advice, gaps)` pair.
pub(crate) fn svg(sources: &[(Advice, Vec<Duration>)]) -> String {
    let height = TOP + PANEL * sources.len().max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="24" font-size="16" font-weight="bold">Gap between first receipt and each repeated delivery</text>"#
    );
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="40" fill="#555">red: TTL in force; blue, dashed: documented retry window; green, dotted: recommended TTL</text>"##
    );
    if sources.is_empty() {
        let _ = writeln!(
            out,
            r#"<text x="{LEFT}" y="{}" >no data</text>"#,
            TOP + 40.0
        );
    }
    for (i, (advice, gaps)) in sources.iter().enumerate() {
        panel(&mut out, TOP + PANEL * i as f64, advice, gaps);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, y0: f64, a: &Advice, gaps: &[Duration]) {
    let plot_w = WIDTH - LEFT - RIGHT;
    let top = y0 + 30.0;
    let bottom = top + PLOT_H;
    // The axis spans 1 s to a little past the largest of gaps, TTL and recommendation.
    let longest = gaps
        .iter()
        .copied()
        .chain([a.ttl, a.recommended_ttl, a.retry_window])
        .max()
        .unwrap_or_default()
        .as_secs_f64()
        .max(60.0);
    let (lo, hi) = (0.0f64, (longest * 1.5).log10());
    let x = |secs: f64| LEFT + (secs.max(1.0).log10() - lo) / (hi - lo) * plot_w;
    let mut counts = [0u64; BINS];
    for g in gaps {
        let f = ((g.as_secs_f64().max(1.0).log10() - lo) / (hi - lo)).clamp(0.0, 0.999_999);
        counts[(f * BINS as f64) as usize] += 1;
    }
    let peak = counts.iter().copied().max().unwrap_or(0).max(1);
    let p = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), |d| Human(d).to_string());
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{}" font-size="14"><tspan font-weight="bold">{}</tspan>: {} deliveries, {} repeats, {} late duplicates; verdict: {}</text><text x="{LEFT}" y="{}" fill="#555">gap p50 {} | p90 {} | p99 {} | max {}</text>"##,
        y0 + 4.0,
        escape(a.source.as_str()),
        a.deliveries,
        a.duplicates,
        a.late_duplicates,
        escape(&a.verdict.to_string()),
        y0 + 20.0,
        p(a.p50),
        p(a.p90),
        p(a.p99),
        p(a.max),
    );
    // Axes.
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="black"/><line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" stroke="black"/>"#,
        LEFT + plot_w
    );
    for (secs, label) in TICKS {
        if secs.log10() > hi {
            break;
        }
        let tx = x(secs);
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.1}" y1="{bottom}" x2="{tx:.1}" y2="{:.1}" stroke="black"/><text x="{tx:.1}" y="{:.1}" text-anchor="middle" fill="#333">{label}</text>"##,
            bottom + 5.0,
            bottom + 18.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">gap since first receipt (log scale)</text>"#,
        LEFT + plot_w / 2.0,
        bottom + 34.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" transform="rotate(-90 {:.1} {:.1})">repeated deliveries</text>"#,
        LEFT - 45.0,
        (top + bottom) / 2.0,
        LEFT - 45.0,
        (top + bottom) / 2.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{peak}</text><text x="{:.1}" y="{bottom}" text-anchor="end">0</text>"#,
        LEFT - 6.0,
        top + 4.0,
        LEFT - 6.0
    );
    // Bars.
    let bar_w = plot_w / BINS as f64;
    for (i, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
        let h = *n as f64 / peak as f64 * PLOT_H;
        let _ = writeln!(
            out,
            r##"<rect class="bar" x="{:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="#8a8a8a"><title>{n}</title></rect>"##,
            LEFT + bar_w * i as f64 + 1.0,
            bottom - h,
            (bar_w - 2.0).max(1.0)
        );
    }
    // The lines. Labels sit left of their line, the recommendation's right of it, so equal TTLs stay legible.
    for (id, secs, colour, dash, shift, label) in [
        (
            "ttl",
            a.ttl,
            "#d62728",
            "",
            -4.0,
            format!("TTL {}", Human(a.ttl)),
        ),
        (
            "retry-window",
            a.retry_window,
            "#1f77b4",
            r#" stroke-dasharray="6 4""#,
            -4.0,
            format!("retry window {}", Human(a.retry_window)),
        ),
        (
            "recommended",
            a.recommended_ttl,
            "#2ca02c",
            r#" stroke-dasharray="2 3""#,
            14.0,
            format!("recommended {}", Human(a.recommended_ttl)),
        ),
    ] {
        let lx = x(secs.as_secs_f64());
        let _ = writeln!(
            out,
            r#"<line id="{}-{id}" x1="{lx:.1}" y1="{top}" x2="{lx:.1}" y2="{bottom}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}" fill="{colour}" text-anchor="end" transform="rotate(-90 {:.1} {:.1})">{}</text>"#,
            escape(a.source.as_str()),
            lx + shift,
            top + 4.0,
            lx + shift,
            top + 4.0,
            escape(&label)
        );
    }
}
