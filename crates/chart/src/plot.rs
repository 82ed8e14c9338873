//! What the charts share: the plot rectangle, headings, axes, tick labels and marks.

use crate::place::{self, RowPlace, Slot, Span};
use crate::scale::{Linear, Ticks};
use crate::style::Style;
use crate::svg::{El, Svg, el};
use crate::text::{self, SMALL, TEXT, line_height};

/// The margin at the frame's edges.
pub(crate) const EDGE: f64 = 12.0;
/// Text and axis colours.
pub(crate) const INK: &str = "#1a1a1a";
pub(crate) const MUTED: &str = "#4d4d4d";
const GRID: &str = "#e2e2e2";
const AXIS: &str = "#333";
/// The height of a row of mark labels above a plot.
pub(crate) const ROW_H: f64 = 19.0;

/// The rectangle data is drawn in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Area {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

impl Area {
    pub(crate) fn right(&self) -> f64 {
        self.x + self.w
    }
    pub(crate) fn bottom(&self) -> f64 {
        self.y + self.h
    }
}

/// `<text>` at `(x, y)` (the baseline), anchored `start`, `middle` or `end`.
pub(crate) fn label(x: f64, y: f64, anchor: &'static str) -> El {
    let e = el("text").n("x", x).n("y", y);
    if anchor == "start" {
        e
    } else {
        e.a("text-anchor", anchor)
    }
}

/// A group whose text gets a white outline, so it stays legible over lines and bars.
pub(crate) fn halo() -> El {
    el("g")
        .a("paint-order", "stroke")
        .a("stroke", "#fff")
        .n("stroke-width", 3.0)
        .a("stroke-linejoin", "round")
}

/// A panel's heading (bold) and note (muted), each wrapped to `width`, from `y`; returns the
/// `y` below them.
pub(crate) fn heading(
    svg: &mut Svg,
    x: f64,
    mut y: f64,
    width: f64,
    heading: Option<&str>,
    note: Option<&str>,
) -> f64 {
    if let Some(h) = heading {
        for line in text::wrap(h, text::HEADING, width) {
            y += line_height(text::HEADING);
            svg.text(
                label(x, y - 4.0, "start")
                    .n("font-size", text::HEADING)
                    .a("font-weight", "bold"),
                &line,
            );
        }
    }
    if let Some(n) = note {
        for line in text::wrap(n, SMALL, width) {
            y += line_height(SMALL);
            svg.text(
                label(x, y - 3.0, "start")
                    .n("font-size", SMALL)
                    .a("fill", MUTED),
                &line,
            );
        }
    }
    y
}

/// A line of muted text at `(x, y)`: the y axis's name, above the plot.
pub(crate) fn axis_name(svg: &mut Svg, x: f64, y: f64, anchor: &'static str, name: &str) {
    svg.text(label(x, y, anchor).a("fill", MUTED), name);
}

/// The width of the widest y tick label.
pub(crate) fn y_labels_width(ticks: &Ticks) -> f64 {
    ticks
        .values
        .iter()
        .map(|v| text::width(&ticks.label(*v), TEXT))
        .fold(0.0, f64::max)
}

/// Gridlines and labels at each y tick, the left and bottom axis lines.
pub(crate) fn y_axis(svg: &mut Svg, area: Area, ticks: &Ticks, y: Linear) {
    for v in &ticks.values {
        let py = y.at(*v);
        svg.leaf(
            el("line")
                .n("x1", area.x)
                .n("x2", area.right())
                .n("y1", py)
                .n("y2", py)
                .a("stroke", GRID),
        );
        svg.text(
            label(area.x - 6.0, py + TEXT * 0.35, "end"),
            &ticks.label(*v),
        );
    }
    axes(svg, area);
}

/// The left and bottom axis lines.
pub(crate) fn axes(svg: &mut Svg, area: Area) {
    svg.leaf(
        el("path")
            .a(
                "d",
                format!(
                    "M{},{}V{}H{}",
                    crate::svg::N(area.x),
                    crate::svg::N(area.y),
                    crate::svg::N(area.bottom()),
                    crate::svg::N(area.right())
                ),
            )
            .a("fill", "none")
            .a("stroke", AXIS),
    );
}

/// The height under a plot taken by x tick labels.
pub(crate) const X_TICKS_H: f64 = 22.0;

/// Tick marks and labels under the plot at `(x, label)`, thinned so that none overlap, kept
/// inside a frame `frame_w` wide.
pub(crate) fn x_ticks(svg: &mut Svg, area: Area, frame_w: f64, ticks: &[(f64, String)]) {
    let sizes: Vec<(f64, f64)> = ticks
        .iter()
        .map(|(x, l)| (*x, text::width(l, TEXT)))
        .collect();
    let sizes: Vec<(f64, f64)> = sizes
        .into_iter()
        .map(|(x, w)| {
            (
                x.min(frame_w - EDGE / 2.0 - w / 2.0)
                    .max(EDGE / 2.0 + w / 2.0),
                w,
            )
        })
        .collect();
    let keep = place::thin(&sizes, 10.0);
    for ((x, l), keep) in ticks.iter().zip(keep) {
        if !keep {
            continue;
        }
        svg.leaf(
            el("line")
                .n("x1", *x)
                .n("x2", *x)
                .n("y1", area.bottom())
                .n("y2", area.bottom() + 5.0)
                .a("stroke", AXIS),
        );
        // Labels at the ends stay inside the frame.
        let w = text::width(l, TEXT);
        let cx = x
            .min(frame_w - EDGE / 2.0 - w / 2.0)
            .max(EDGE / 2.0 + w / 2.0);
        svg.text(label(cx, area.bottom() + 18.0, "middle"), l);
    }
}

/// A vertical mark: a line at `x` with a label.
#[derive(Debug, Clone)]
pub(crate) struct VMark {
    pub x: f64,
    pub label: String,
    pub style: Style,
}

impl VMark {
    /// The finite `marks`, placed by the x scale `x_of`.
    pub(crate) fn placed(marks: &[crate::Mark], x_of: impl Fn(f64) -> f64) -> Vec<Self> {
        marks
            .iter()
            .filter(|m| m.at.is_finite())
            .map(|m| Self {
                x: x_of(m.at),
                label: m.label.clone(),
                style: m.style,
            })
            .collect()
    }
}

/// Where the labels of vertical marks go: rows above the plot, inside `[lo, hi]`.
pub(crate) fn mark_band(marks: &[VMark], lo: f64, hi: f64) -> (Vec<RowPlace>, usize) {
    let sizes: Vec<(f64, f64)> = marks
        .iter()
        .map(|m| (m.x, text::width(&m.label, TEXT)))
        .collect();
    let places = place::mark_rows(&sizes, lo, hi);
    let rows = places.iter().map(|p| p.row + 1).max().unwrap_or(0);
    (places, rows)
}

/// Draws vertical marks, each line rising from the plot's bottom to its label's row.
pub(crate) fn draw_vmarks(svg: &mut Svg, area: Area, marks: &[VMark], places: &[RowPlace]) {
    for (m, p) in marks.iter().zip(places) {
        let row_top = area.y - (p.row as f64 + 1.0) * ROW_H + 3.0;
        svg.leaf(
            m.style
                .stroke(el("line"), 2.0)
                .n("x1", m.x)
                .n("x2", m.x)
                .n("y1", area.bottom())
                .n("y2", row_top),
        );
    }
    svg.open(halo());
    for (m, p) in marks.iter().zip(places) {
        let baseline = area.y - p.row as f64 * ROW_H - 5.0;
        svg.text(label(p.span.x0, baseline, "start"), &m.label);
    }
    svg.close();
}

/// A horizontal mark: a line across the plot at `y` (pixels), labelled at its right end.
#[derive(Debug, Clone)]
pub(crate) struct HMark {
    pub y: f64,
    pub label: String,
    pub style: Style,
}

impl HMark {
    /// The finite `marks`, placed by the y scale `y_of`.
    pub(crate) fn placed(marks: &[crate::Mark], y_of: impl Fn(f64) -> f64) -> Vec<Self> {
        marks
            .iter()
            .filter(|m| m.at.is_finite())
            .map(|m| Self {
                y: y_of(m.at),
                label: m.label.clone(),
                style: m.style,
            })
            .collect()
    }
}

/// Draws horizontal marks, their labels above the line at the right, nudged apart.
pub(crate) fn draw_hmarks(svg: &mut Svg, area: Area, marks: &[HMark]) {
    let h = line_height(TEXT);
    let slots: Vec<Slot> = marks
        .iter()
        .map(|m| {
            let w = text::width(&m.label, TEXT);
            Slot {
                span: Span {
                    x0: area.right() - 4.0 - w,
                    x1: area.right() - 4.0,
                },
                y: m.y - h / 2.0 - 2.0,
                h,
            }
        })
        .collect();
    let ys = place::spread(&slots, area.y, area.bottom(), 1.0);
    for m in marks {
        svg.leaf(
            m.style
                .stroke(el("line"), 1.5)
                .n("x1", area.x)
                .n("x2", area.right())
                .n("y1", m.y)
                .n("y2", m.y),
        );
    }
    svg.open(halo());
    for (m, y) in marks.iter().zip(ys) {
        svg.text(label(area.right() - 4.0, y + TEXT * 0.35, "end"), &m.label);
    }
    svg.close();
}

/// The y ticks for data from `lo` to `hi` in a plot `height` tall.
pub(crate) fn y_ticks(lo: f64, hi: f64, height: f64, integers: bool) -> Ticks {
    let target = (height / 45.0).round().clamp(2.0, 8.0) as usize;
    crate::scale::linear_ticks(lo, hi, target, integers)
}
