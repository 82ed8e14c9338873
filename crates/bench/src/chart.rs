//! Small SVG charts for the scenarios' results: plain SVG, no scripts.

use std::fmt::Write;

const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#7f7f7f", "#9467bd", "#ff7f0e",
];

/// At most this many x labels are written; the others are skipped evenly.
const MAX_X_LABELS: usize = 16;

/// One panel of a chart: a y axis and its series over the chart's shared x values.
#[derive(Debug)]
pub struct Panel<'a> {
    pub y_label: &'a str,
    /// One line per `(name, ys)`; `ys[i]` belongs to `xs[i]` (a shorter series ends early).
    pub series: &'a [(String, Vec<f64>)],
    /// A dashed vertical line at this x index, with a label.
    pub x_mark: Option<(usize, &'a str)>,
    /// A dashed horizontal line at this y value, with a label.
    pub y_mark: Option<(f64, &'a str)>,
}

/// A line chart: categorical x values, one series per `(name, ys)`.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    panels(
        title,
        x_label,
        xs,
        &[Panel {
            y_label,
            series,
            x_mark: None,
            y_mark: None,
        }],
    )
}

/// Panels stacked top to bottom over the same categorical x values, under one title.
pub fn panels(title: &str, x_label: &str, xs: &[String], panels: &[Panel<'_>]) -> String {
    let (w, panel_h, head) = (820.0, 370.0, 40.0);
    let h = head + panel_h * panels.len() as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="80" y="28" font-size="16" font-weight="bold">{title}</text>"#
    );
    for (i, p) in panels.iter().enumerate() {
        panel(
            &mut out,
            head + panel_h * i as f64,
            w,
            panel_h,
            x_label,
            xs,
            p,
        );
    }
    out.push_str("</svg>\n");
    out
}

fn panel(
    out: &mut String,
    offset: f64,
    w: f64,
    h: f64,
    x_label: &str,
    xs: &[String],
    p: &Panel<'_>,
) {
    let (left, right, top, bottom) = (80.0, 250.0, offset + 10.0, 60.0);
    let plot_w = w - left - right;
    let plot_h = h - 10.0 - bottom;
    let highest = p
        .series
        .iter()
        .flat_map(|(_, ys)| ys.iter().copied())
        .chain(p.y_mark.map(|(v, _)| v))
        .fold(0.0f64, f64::max);
    let tick = nice_step(highest * 1.05 / 5.0);
    let ticks = (highest * 1.05 / tick).ceil().max(1.0) as usize;
    let max = tick * ticks as f64;
    let decimals = if tick < 1.0 { 1 } else { 0 };
    let x = |i: usize| {
        left + if xs.len() > 1 {
            plot_w * i as f64 / (xs.len() - 1) as f64
        } else {
            plot_w / 2.0
        }
    };
    let y = |v: f64| top + plot_h - v / max * plot_h;
    let _ = writeln!(
        out,
        r#"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>"#,
        top + plot_h,
        left + plot_w,
        top + plot_h,
        top + plot_h
    );
    for t in 0..=ticks {
        let v = tick * t as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.decimals$}</text>"##,
            y(v),
            left + plot_w,
            y(v),
            left - 6.0,
            y(v) + 4.0
        );
    }
    let every = xs.len().div_ceil(MAX_X_LABELS).max(1);
    for (i, label) in xs.iter().enumerate() {
        if i % every != 0 && i + 1 != xs.len() {
            continue;
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
            x(i),
            top + plot_h + 18.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{x_label}</text>"#,
        left + plot_w / 2.0,
        top + plot_h + 40.0
    );
    let _ = writeln!(
        out,
        r#"<text x="20" y="{:.1}" text-anchor="middle" transform="rotate(-90 20 {:.1})">{}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0,
        p.y_label
    );
    if let Some((i, label)) = p.x_mark {
        let _ = writeln!(
            out,
            r#"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1:.1}" stroke="black" stroke-dasharray="5,4"/><text x="{2:.1}" y="{3:.1}">{label}</text>"#,
            x(i),
            top + plot_h,
            x(i) + 4.0,
            top + 12.0
        );
    }
    if let Some((v, label)) = p.y_mark {
        let _ = writeln!(
            out,
            r#"<line x1="{left}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="black" stroke-dasharray="5,4"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{label}</text>"#,
            y(v),
            left + plot_w,
            left + plot_w - 4.0,
            y(v) - 5.0
        );
    }
    for (n, (name, ys)) in p.series.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let points: Vec<(f64, f64)> = ys.iter().enumerate().map(|(i, v)| (x(i), y(*v))).collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            points
                .iter()
                .map(|(px, py)| format!("{px:.1},{py:.1}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        // Dots only where there are few enough points to tell apart.
        if points.len() <= 40 {
            for (px, py) in &points {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{px:.1}" cy="{py:.1}" r="3" fill="{colour}"/>"#
                );
            }
        }
        let ly = top + 14.0 + 20.0 * n as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{name}</text>"#,
            left + plot_w + 16.0,
            left + plot_w + 36.0,
            left + plot_w + 42.0,
            ly + 4.0
        );
    }
}

/// The step of y ticks: 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let ten = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * ten)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * ten)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn y_ticks_are_round() {
        assert_eq!(nice_step(8_552.0), 10_000.0);
        assert_eq!(nice_step(1_700.0), 2_000.0);
        assert_eq!(nice_step(12.0), 20.0);
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(5.0), 5.0);
        assert_eq!(nice_step(0.0), 1.0);
    }

    #[test]
    fn panels_stack_and_thin_their_labels() {
        let xs: Vec<String> = (0..100).map(|i| format!("x{i}")).collect();
        let series = vec![("a".to_owned(), vec![1.0; 100])];
        let svg = panels(
            "t",
            "x",
            &xs,
            &[
                Panel {
                    y_label: "one",
                    series: &series,
                    x_mark: Some((10, "start")),
                    y_mark: Some((0.8, "80%")),
                },
                Panel {
                    y_label: "two",
                    series: &series,
                    x_mark: None,
                    y_mark: None,
                },
            ],
        );
        assert!(
            svg.contains(r#"height="780""#),
            "two panels of 370 under a 40 head"
        );
        assert!(svg.contains(">start<") && svg.contains(">80%<"));
        let labels = svg.matches(">x").count();
        assert!(labels <= 2 * (MAX_X_LABELS + 1), "{labels} x labels");
        assert!(svg.contains(">x99<"), "the last label is kept");
    }
}
