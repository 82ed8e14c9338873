//! Line charts: series over shared x values, in panels stacked top to bottom.

use crate::place::{self, Slot, Span};
use crate::plot::{self, Area, EDGE, HMark, ROW_H, VMark, X_TICKS_H};
use crate::scale::{self, Linear, Ticks};
use crate::svg::{N, Svg, el};
use crate::text::{self, TEXT, line_height};
use crate::{Frame, Mark, Series};

/// What the x values of a line chart are.
#[derive(Debug, Clone, PartialEq)]
pub enum XAxis {
    /// Named, evenly spaced positions: a series' i-th value (x = i) sits at the i-th name.
    Categories(Vec<String>),
    /// Numbers, ticked at round values.
    Numbers,
    /// Unix seconds, ticked at round clock times (UTC).
    UtcTime,
}

/// One panel: a y axis, its series and marks.
#[derive(Debug, Clone)]
pub struct LinePanel {
    y_label: String,
    heading: Option<String>,
    series: Vec<Series>,
    x_marks: Vec<Mark>,
    y_marks: Vec<Mark>,
    from_zero: bool,
}

impl LinePanel {
    /// A panel whose y axis reads `y_label` (the quantity and its unit: `claims/s`).
    pub fn new(y_label: impl Into<String>) -> Self {
        Self {
            y_label: y_label.into(),
            heading: None,
            series: Vec::new(),
            x_marks: Vec::new(),
            y_marks: Vec::new(),
            from_zero: true,
        }
    }

    /// A bold line above the panel.
    pub fn heading(mut self, text: impl Into<String>) -> Self {
        self.heading = Some(text.into());
        self
    }

    /// Adds a series; without a style of its own it takes the `n`-th, `n` its place here.
    pub fn series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }

    /// Adds series.
    pub fn all_series(mut self, series: impl IntoIterator<Item = Series>) -> Self {
        self.series.extend(series);
        self
    }

    /// A vertical line at x value `mark.at` (a category's index on a category axis).
    pub fn x_mark(mut self, mark: Mark) -> Self {
        self.x_marks.push(mark);
        self
    }

    /// A horizontal line at y value `mark.at`.
    pub fn y_mark(mut self, mark: Mark) -> Self {
        self.y_marks.push(mark);
        self
    }

    /// Lets the y axis start near the data instead of at zero.
    pub fn y_from_data(mut self) -> Self {
        self.from_zero = false;
        self
    }

    fn y_range(&self) -> (f64, f64) {
        let values = || {
            self.series
                .iter()
                .flat_map(Series::values)
                .chain(self.y_marks.iter().map(|m| m.at).filter(|v| v.is_finite()))
        };
        let lo = values().fold(f64::INFINITY, f64::min);
        let hi = values().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            return (0.0, 1.0);
        }
        let lo = if self.from_zero { lo.min(0.0) } else { lo };
        let hi = if self.from_zero { hi.max(0.0) } else { hi };
        // A little headroom so a line at the maximum does not run along the frame.
        (lo, hi + (hi - lo).abs() * 0.02)
    }
}

/// A line chart. Each series is named in the right margin, level with its last value, after a
/// sample of its dash and marker; panels share the x axis and the series styles (the `n`-th
/// series of each panel looks the same).
#[derive(Debug, Clone)]
pub struct LineChart {
    frame: Frame,
    x: XAxis,
    x_label: String,
    panels: Vec<LinePanel>,
    plot_height: Option<f64>,
}

/// The line-and-marker sample before a series' name.
const SAMPLE: f64 = 24.0;

impl LineChart {
    /// A chart over `x`, the x axis named `x_label`.
    pub fn new(frame: Frame, x: XAxis, x_label: impl Into<String>) -> Self {
        Self {
            frame,
            x,
            x_label: x_label.into(),
            panels: Vec::new(),
            plot_height: None,
        }
    }

    /// Adds a panel below the others.
    pub fn panel(mut self, panel: LinePanel) -> Self {
        self.panels.push(panel);
        self
    }

    /// The height of each panel's plot area (default: in proportion to the width).
    pub fn plot_height(mut self, height: f64) -> Self {
        self.plot_height = Some(height.clamp(60.0, 2000.0));
        self
    }

    fn x_range(&self) -> (f64, f64) {
        if let XAxis::Categories(c) = &self.x {
            return (0.0, c.len().saturating_sub(1) as f64);
        }
        let xs = || {
            self.panels
                .iter()
                .flat_map(|p| {
                    p.series
                        .iter()
                        .flat_map(|s| s.points.iter().map(|p| p.0))
                        .chain(p.x_marks.iter().map(|m| m.at))
                })
                .filter(|x| x.is_finite())
        };
        let lo = xs().fold(f64::INFINITY, f64::min);
        let hi = xs().fold(f64::NEG_INFINITY, f64::max);
        if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) }
    }

    fn x_ticks(&self, x: Linear, width: f64) -> Vec<(f64, String)> {
        let (lo, hi) = (x.d0, x.d1);
        let target = (width / 90.0).round().max(2.0) as usize;
        match &self.x {
            XAxis::Categories(names) => {
                let slot = if names.len() > 1 {
                    width / (names.len() - 1) as f64
                } else {
                    width
                };
                let widest = names
                    .iter()
                    .map(|n| text::width(n, TEXT))
                    .fold(0.0, f64::max);
                let every = place::every(slot, widest, 10.0);
                names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % every == 0 || i + 1 == names.len())
                    .map(|(i, n)| (x.at(i as f64), n.clone()))
                    .collect()
            }
            XAxis::Numbers => {
                let t = scale::linear_ticks(lo, hi, target, false);
                t.values
                    .iter()
                    .filter(|v| **v >= lo - 1e-9 * t.step && **v <= hi + 1e-9 * t.step)
                    .map(|v| (x.at(*v), t.label(*v)))
                    .collect()
            }
            XAxis::UtcTime => scale::utc_ticks(lo, hi, target)
                .into_iter()
                .map(|(t, l)| (x.at(t), l))
                .collect(),
        }
    }

    /// The SVG document.
    pub fn render(&self) -> String {
        let w = self.frame.w();
        let mut body = Svg::new();
        let mut y = self.frame.title_block(&mut body);
        let plot_h = self
            .plot_height
            .unwrap_or_else(|| (w * 0.36).clamp(160.0, 300.0));
        let ticks: Vec<Ticks> = self
            .panels
            .iter()
            .map(|p| {
                let (lo, hi) = p.y_range();
                plot::y_ticks(lo, hi, plot_h, false)
            })
            .collect();
        let left = EDGE + ticks.iter().map(plot::y_labels_width).fold(0.0, f64::max) + 10.0;
        let (x_lo, x_hi) = self.x_range();
        // Each series' name goes in the right margin, level with its last value: as wide as
        // the widest name (wrapped beyond a cap).
        let cap = (w * 0.36).max(130.0);
        let margin_text = self
            .panels
            .iter()
            .flat_map(|p| p.series.iter())
            .map(|s| text::width(&s.name, TEXT).min(cap - SAMPLE - 14.0))
            .fold(0.0, f64::max);
        let right = if margin_text > 0.0 {
            SAMPLE + 14.0 + margin_text + EDGE
        } else {
            EDGE + 8.0
        };
        let area_w = (w - left - right).max(40.0);
        let mut summary = Vec::new();
        for (panel, ticks) in self.panels.iter().zip(&ticks) {
            y = plot::heading(
                &mut body,
                EDGE,
                y,
                w - 2.0 * EDGE,
                panel.heading.as_deref(),
                None,
            );
            y += line_height(TEXT);
            plot::axis_name(&mut body, EDGE, y - 3.0, "start", &panel.y_label);
            let xs = Linear {
                d0: x_lo,
                d1: x_hi,
                r0: left,
                r1: left + area_w,
            };
            let vmarks = VMark::placed(&panel.x_marks, |v| xs.at(v));
            let (places, rows) = plot::mark_band(&vmarks, EDGE, w - EDGE);
            let area = Area {
                x: left,
                y: y + 8.0 + rows as f64 * ROW_H,
                w: area_w,
                h: plot_h,
            };
            let ys = Linear {
                d0: ticks.lo(),
                d1: ticks.hi(),
                r0: area.bottom(),
                r1: area.y,
            };
            plot::y_axis(&mut body, area, ticks, ys);
            plot::x_ticks(&mut body, area, w, &self.x_ticks(xs, area_w));
            let hmarks = HMark::placed(&panel.y_marks, |v| ys.at(v));
            plot::draw_hmarks(&mut body, area, &hmarks);
            plot::draw_vmarks(&mut body, area, &vmarks, &places);
            self.draw_series(&mut body, panel, area, xs, ys, cap);
            y = area.bottom() + X_TICKS_H + line_height(TEXT);
            plot::axis_name(
                &mut body,
                area.x + area.w / 2.0,
                y - 3.0,
                "middle",
                &self.x_label,
            );
            // Room between panels.
            y += 22.0;
            summary.push(describe(panel, &self.x, &self.x_label));
        }
        if self.panels.is_empty() {
            y += line_height(TEXT);
            body.text(
                plot::label(EDGE, y, "start").a("fill", plot::MUTED),
                "no data",
            );
            y += 10.0;
            summary.push("No data.".to_owned());
        }
        self.frame.document(y, &summary.join(" "), body)
    }

    fn draw_series(
        &self,
        svg: &mut Svg,
        panel: &LinePanel,
        area: Area,
        xs: Linear,
        ys: Linear,
        cap: f64,
    ) {
        let count = panel.series.len().max(1);
        let mut ends = Vec::new();
        for (n, s) in panel.series.iter().enumerate() {
            let style = s.style_or(n);
            let pts: Vec<Option<(f64, f64)>> = s
                .points
                .iter()
                .map(|(x, y)| (x.is_finite() && y.is_finite()).then(|| (xs.at(*x), ys.at(*y))))
                .collect();
            svg.open(el("g"));
            svg.text(el("title"), &s.name);
            for run in pts.split(Option::is_none) {
                let run: Vec<(f64, f64)> = run.iter().flatten().copied().collect();
                if run.is_empty() {
                    continue;
                }
                let points: Vec<String> = run
                    .iter()
                    .map(|(x, y)| format!("{},{}", N(*x), N(*y)))
                    .collect();
                svg.leaf(
                    style
                        .stroke(el("polyline"), 2.2)
                        .a("stroke-linejoin", "round")
                        .a("points", points.join(" ")),
                );
            }
            // Markers on every point when they can be told apart, else on about a dozen,
            // staggered between series so that they do not sit on each other.
            let every = if pts.len() <= 40 {
                1
            } else {
                pts.len().div_ceil(12)
            };
            let offset = if every > 1 { n * every / count } else { 0 };
            for (i, p) in pts.iter().enumerate() {
                if let Some((x, y)) = p
                    && (i + every - offset % every) % every == 0
                {
                    style.draw_marker(svg, *x, *y, 3.5);
                }
            }
            svg.close();
            if let Some((px, py)) = pts.iter().rev().flatten().next().copied() {
                let lines = text::wrap(&s.name, TEXT, cap - SAMPLE - 14.0);
                let tw = lines
                    .iter()
                    .map(|l| text::width(l, TEXT))
                    .fold(0.0, f64::max);
                let at_right = px >= area.right() - 0.5;
                ends.push((style, at_right, px, py, lines, SAMPLE + 6.0 + tw));
            }
        }
        let h = line_height(TEXT);
        let x0 = area.right() + 8.0;
        let slots: Vec<Slot> = ends
            .iter()
            .map(|(_, _, _, py, lines, tw)| Slot {
                span: Span { x0, x1: x0 + tw },
                y: *py + (lines.len() as f64 - 1.0) * h / 2.0,
                h: lines.len() as f64 * h,
            })
            .collect();
        // Series that reach the right end get the places level with their ends first; those
        // that end early take the nearest free places.
        let (top, bottom) = (area.y - ROW_H / 2.0, area.bottom() + X_TICKS_H);
        let full: Vec<usize> = (0..ends.len()).filter(|i| ends[*i].1).collect();
        let spread = place::spread(
            &full.iter().map(|i| slots[*i]).collect::<Vec<_>>(),
            top,
            bottom,
            2.0,
        );
        let mut centres = vec![0.0; ends.len()];
        let mut placed = Vec::new();
        for (i, y) in full.iter().zip(spread) {
            centres[*i] = y;
            placed.push((slots[*i], y));
        }
        let mut early: Vec<usize> = (0..ends.len()).filter(|i| !ends[*i].1).collect();
        early.sort_by(|a, b| slots[*a].y.total_cmp(&slots[*b].y));
        for i in early {
            let y = place::nearest_free(&placed, slots[i], top, bottom, 2.0);
            centres[i] = y;
            placed.push((slots[i], y));
        }
        svg.open(plot::halo());
        for ((style, at_right, px, py, lines, _), centre) in ends.iter().zip(&centres) {
            let first = centre - (lines.len() as f64 - 1.0) * h / 2.0;
            if *at_right && (first - py).abs() > 4.0 {
                // Nudged away from its line's end: a thin leader back to it.
                svg.leaf(
                    el("line")
                        .n("x1", px + 3.0)
                        .n("y1", *py)
                        .n("x2", x0 - 1.0)
                        .n("y2", first)
                        .a("stroke", style.colour.hex())
                        .a("stroke-width", 1),
                );
            }
            svg.leaf(
                style
                    .stroke(el("line"), 2.2)
                    .n("x1", x0)
                    .n("x2", x0 + SAMPLE)
                    .n("y1", first)
                    .n("y2", first),
            );
            style.draw_marker(svg, x0 + SAMPLE / 2.0, first, 3.5);
            for (i, l) in lines.iter().enumerate() {
                svg.text(
                    plot::label(
                        x0 + SAMPLE + 6.0,
                        first + i as f64 * h + TEXT * 0.35,
                        "start",
                    ),
                    l,
                );
            }
        }
        svg.close();
    }
}

/// A sentence per panel: each series' range and last value.
fn describe(panel: &LinePanel, x: &XAxis, x_label: &str) -> String {
    let what = match x {
        XAxis::Categories(c) => format!("over {} {x_label} values", c.len()),
        _ => format!("against {x_label}"),
    };
    let series: Vec<String> = panel
        .series
        .iter()
        .map(|s| {
            let v: Vec<f64> = s.values().collect();
            match (v.first(), v.last()) {
                (Some(_), Some(last)) => format!(
                    "{}: {} to {}, last {}",
                    s.name,
                    scale::number(v.iter().copied().fold(f64::INFINITY, f64::min)),
                    scale::number(v.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
                    scale::number(*last)
                ),
                _ => format!("{}: no values", s.name),
            }
        })
        .collect();
    format!(
        "{}, {} {what}: {}.",
        panel.y_label,
        text::count(panel.series.len() as u64, "series", "series"),
        series.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Style, xml};

    fn chart(xs: usize) -> LineChart {
        let names: Vec<String> = (0..xs).map(|i| format!("x{i}")).collect();
        LineChart::new(Frame::new("t", "Test"), XAxis::Categories(names), "step")
    }

    /// Every `<text>`'s content, in order.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].to_owned()))
            .collect()
    }

    #[test]
    fn panels_share_x_thin_their_labels_and_name_their_lines() {
        let series = vec![
            Series::new("a", vec![1.0; 100]),
            Series::new("b <&>", (0..100).map(f64::from)),
        ];
        let svg = chart(100)
            .panel(
                LinePanel::new("one")
                    .all_series(series.clone())
                    .x_mark(Mark::new(10.0, "start"))
                    .y_mark(Mark::new(0.8, "80%")),
            )
            .panel(LinePanel::new("two").all_series(series))
            .render();
        xml::check(&svg).unwrap();
        let t = texts(&svg);
        assert!(t.contains(&"start".to_owned()) && t.contains(&"80%".to_owned()));
        let x_labels = t.iter().filter(|l| l.starts_with('x')).count();
        assert!((2 * 5..=2 * 20).contains(&x_labels), "{x_labels} x labels");
        assert!(t.contains(&"x99".to_owned()), "the last label is kept");
        assert_eq!(
            t.iter().filter(|l| *l == "b &lt;&amp;&gt;").count(),
            2,
            "named beside the line in each panel"
        );
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(t.iter().filter(|l| *l == "step").count(), 2);
    }

    #[test]
    fn series_differ_by_dash_and_marker_not_only_colour() {
        let svg = chart(3)
            .panel(
                LinePanel::new("y")
                    .series(Series::new("a", [1.0, 2.0, 3.0]))
                    .series(Series::new("b", [3.0, 2.0, 1.0])),
            )
            .render();
        let lines: Vec<&str> = svg.lines().filter(|l| l.starts_with("<polyline")).collect();
        assert_eq!(lines.len(), 2);
        assert!(!lines[0].contains("stroke-dasharray") && lines[1].contains("stroke-dasharray"));
        assert_eq!(
            svg.matches("<circle").count(),
            3 + 1,
            "a's circles and its sample"
        );
        assert_eq!(
            svg.matches("<rect x=").count(),
            3 + 1,
            "b's squares and its sample"
        );
    }

    #[test]
    fn missing_values_break_the_line() {
        let svg = chart(5)
            .panel(LinePanel::new("y").series(Series::new("a", [1.0, 2.0, f64::NAN, 4.0, 5.0])))
            .render();
        assert_eq!(svg.matches("<polyline").count(), 2);
        xml::check(&svg).unwrap();
    }

    #[test]
    fn y_axis_is_round_and_from_zero() {
        let p = LinePanel::new("y").series(Series::new("a", [30_000.0, 38_900.0]));
        let (lo, hi) = p.y_range();
        assert_eq!(lo, 0.0);
        let t = plot::y_ticks(lo, hi, 260.0, false);
        assert_eq!((t.lo(), t.hi(), t.step), (0.0, 40_000.0, 10_000.0));
        let svg = chart(2).panel(p).render();
        assert!(texts(&svg).contains(&"40k".to_owned()));
        let near = LinePanel::new("y")
            .series(Series::new("a", [95.0, 105.0]))
            .y_from_data();
        assert!(near.y_range().0 >= 90.0);
    }

    #[test]
    fn end_labels_of_close_lines_do_not_overlap() {
        let svg = chart(3)
            .panel(
                LinePanel::new("y")
                    .series(Series::new("first series", [1.0, 2.0, 10.0]))
                    .series(Series::new("second series", [1.0, 2.0, 10.1]))
                    .series(Series::new("third", [1.0, 2.0, 9.9])),
            )
            .render();
        let ys: Vec<f64> = svg
            .lines()
            .filter(|l| l.starts_with("<text") && (l.contains("series<") || l.contains("third<")))
            .map(|l| {
                let at = l.find(" y=\"").unwrap() + 4;
                l[at..at + l[at..].find('"').unwrap()].parse().unwrap()
            })
            .collect();
        assert_eq!(ys.len(), 3);
        for (i, a) in ys.iter().enumerate() {
            for b in &ys[i + 1..] {
                assert!((a - b).abs() >= line_height(TEXT) - 0.2, "{ys:?}");
            }
        }
    }

    #[test]
    fn numeric_and_time_axes_tick_at_round_values() {
        let svg = LineChart::new(Frame::new("n", "n"), XAxis::Numbers, "x")
            .panel(LinePanel::new("y").series(Series::xy("a", [(0.0, 1.0), (1000.0, 2.0)])))
            .render();
        let t = texts(&svg);
        assert!(
            t.contains(&"0".to_owned()) && t.contains(&"1000".to_owned()),
            "{t:?}"
        );
        let start = 1_796_119_620.0; // 2026-12-01T10:07:00Z
        let svg = LineChart::new(Frame::new("u", "u"), XAxis::UtcTime, "time (UTC)")
            .panel(
                LinePanel::new("y").series(Series::xy("a", [(start, 1.0), (start + 3_300.0, 2.0)])),
            )
            .render();
        let t = texts(&svg);
        assert!(t.contains(&"10:30".to_owned()), "{t:?}");
    }

    #[test]
    fn an_own_style_is_kept_and_empty_charts_say_so() {
        let svg = chart(2)
            .panel(LinePanel::new("y").series(Series::new("a", [1.0, 2.0]).style(Style::nth(3))))
            .render();
        assert!(svg.contains(Style::nth(3).colour.hex()));
        let empty = chart(0).render();
        xml::check(&empty).unwrap();
        assert!(empty.contains(">no data<") && empty.contains("No data."));
    }
}
