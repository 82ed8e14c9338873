//! Small SVG charts for the scenarios' results: plain SVG, no scripts.

use std::fmt::Write;

const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#7f7f7f", "#9467bd", "#ff7f0e",
];

/// A line chart: categorical x values, one series per `(name, ys)`.
pub fn lines(
    title: &str,
    x_label: &str,
    y_label: &str,
    xs: &[String],
    series: &[(String, Vec<f64>)],
) -> String {
    let (w, h, left, right, top, bottom) = (820.0, 420.0, 80.0, 250.0, 50.0, 60.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let max = series
        .iter()
        .flat_map(|(_, ys)| ys.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let x = |i: usize| {
        left + if xs.len() > 1 {
            plot_w * i as f64 / (xs.len() - 1) as f64
        } else {
            plot_w / 2.0
        }
    };
    let y = |v: f64| top + plot_h - v / max * plot_h;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="28" font-size="16" font-weight="bold">{title}</text>"#
    );
    let _ = writeln!(
        out,
        r#"<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>"#,
        top + plot_h,
        left + plot_w,
        top + plot_h,
        top + plot_h
    );
    for t in 0..=5 {
        let v = max / 5.0 * t as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"##,
            y(v),
            left + plot_w,
            y(v),
            left - 6.0,
            y(v) + 4.0
        );
    }
    for (i, label) in xs.iter().enumerate() {
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
        h - 18.0
    );
    let _ = writeln!(
        out,
        r#"<text x="20" y="{:.1}" text-anchor="middle" transform="rotate(-90 20 {:.1})">{y_label}</text>"#,
        top + plot_h / 2.0,
        top + plot_h / 2.0
    );
    for (n, (name, ys)) in series.iter().enumerate() {
        let colour = COLOURS[n % COLOURS.len()];
        let points: Vec<String> = ys
            .iter()
            .enumerate()
            .map(|(i, v)| format!("{:.1},{:.1}", x(i), y(*v)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            points.join(" ")
        );
        for p in &points {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                out,
                r#"<circle cx="{px}" cy="{py}" r="3" fill="{colour}"/>"#
            );
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
    out.push_str("</svg>\n");
    out
}
