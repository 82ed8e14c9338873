//! Histograms of durations on a logarithmic time axis, one panel per group, with labelled
//! vertical marks (a TTL, a retry window).

use std::time::Duration;

use crate::plot::{self, Area, EDGE, ROW_H, VMark, X_TICKS_H};
use crate::scale::{self, Linear, Log};
use crate::svg::{Svg, el};
use crate::text::{TEXT, line_height};
use crate::{Frame, Mark};

/// One panel: a heading, an optional note, the durations counted and the marks.
#[derive(Debug, Clone)]
pub struct HistogramPanel {
    heading: String,
    note: Option<String>,
    values: Vec<f64>,
    marks: Vec<Mark>,
    empty: String,
}

impl HistogramPanel {
    /// A panel headed `heading`.
    pub fn new(heading: impl Into<String>) -> Self {
        Self {
            heading: heading.into(),
            note: None,
            values: Vec::new(),
            marks: Vec::new(),
            empty: "no data".to_owned(),
        }
    }

    /// A muted line under the heading.
    pub fn note(mut self, text: impl Into<String>) -> Self {
        self.note = Some(text.into());
        self
    }

    /// The durations to count.
    pub fn durations(mut self, values: impl IntoIterator<Item = Duration>) -> Self {
        self.values
            .extend(values.into_iter().map(|d| d.as_secs_f64()));
        self
    }

    /// The durations to count, in seconds (values that are negative or not finite are left out).
    pub fn seconds(mut self, values: impl IntoIterator<Item = f64>) -> Self {
        self.values
            .extend(values.into_iter().filter(|v| v.is_finite() && *v >= 0.0));
        self
    }

    /// A vertical line at `mark.at` seconds. Marks at the same time are drawn over each other
    /// with their labels stacked; to show one label, give one mark ("TTL = retry window 3d").
    pub fn mark(mut self, mark: Mark) -> Self {
        self.marks.push(mark);
        self
    }

    /// What the panel says when it has no durations (default "no data").
    pub fn empty_text(mut self, text: impl Into<String>) -> Self {
        self.empty = text.into();
        self
    }
}

/// Histograms of durations on one logarithmic time axis shared by all panels (each panel a
/// group with the id `{frame id}-panel-{n}`, `n` from 0). The axis starts
/// at the round time (1ms, 10ms, 100ms, 1s, 10s, 1m, 10m, 1h, ...) at or below the shortest
/// duration, never below [`TimeHistogram::floor`] (1ms by default; shorter durations, zero
/// included, count in the first bin), and ends past the longest duration or mark. Bins are
/// equally wide on the log scale, a fixed number per decade, aligned to the axis start.
#[derive(Debug, Clone)]
pub struct TimeHistogram {
    frame: Frame,
    x_label: String,
    y_label: String,
    panels: Vec<HistogramPanel>,
    bins_per_decade: u32,
    floor: f64,
    plot_height: Option<f64>,
}

impl TimeHistogram {
    /// Histograms whose time axis reads `x_label` and count axis `y_label` (what is counted:
    /// `repeated deliveries`).
    pub fn new(frame: Frame, x_label: impl Into<String>, y_label: impl Into<String>) -> Self {
        Self {
            frame,
            x_label: x_label.into(),
            y_label: y_label.into(),
            panels: Vec::new(),
            bins_per_decade: 5,
            floor: 0.001,
            plot_height: None,
        }
    }

    /// Adds a panel below the others.
    pub fn panel(mut self, panel: HistogramPanel) -> Self {
        self.panels.push(panel);
        self
    }

    /// Bins per factor of ten (1 to 20; default 5).
    pub fn bins_per_decade(mut self, n: u32) -> Self {
        self.bins_per_decade = n.clamp(1, 20);
        self
    }

    /// The lowest start of the axis, in seconds (default 0.001; at least 0.0001).
    pub fn floor(mut self, secs: f64) -> Self {
        if secs.is_finite() {
            self.floor = secs.max(0.000_1);
        }
        self
    }

    /// The height of each panel's plot area (default: in proportion to the width).
    pub fn plot_height(mut self, height: f64) -> Self {
        self.plot_height = Some(height.clamp(60.0, 2000.0));
        self
    }

    /// The axis: its start, its end and the bin edges (seconds).
    pub(crate) fn axis(&self) -> (f64, f64, Vec<f64>) {
        let values = || self.panels.iter().flat_map(|p| p.values.iter().copied());
        let marks = || {
            self.panels
                .iter()
                .flat_map(|p| p.marks.iter().map(|m| m.at))
                .filter(|m| m.is_finite() && *m > 0.0)
        };
        let smallest = values()
            .map(|v| v.max(self.floor))
            .fold(f64::INFINITY, f64::min);
        // Without durations, two decades below the first mark.
        let smallest = if smallest.is_finite() {
            smallest
        } else {
            marks().fold(f64::INFINITY, f64::min) / 100.0
        };
        let lo = if smallest.is_finite() {
            scale::log_time_floor(smallest, self.floor)
        } else {
            1.0
        };
        let largest = values().chain(marks()).fold(lo * 100.0, f64::max);
        let b = f64::from(self.bins_per_decade);
        let bins = ((largest * 1.6 / lo).log10() * b).ceil().max(1.0) as i32;
        let edges: Vec<f64> = (0..=bins)
            .map(|k| lo * 10f64.powf(f64::from(k) / b))
            .collect();
        (lo, edges[edges.len() - 1], edges)
    }

    /// The bin of a duration: the first holds everything up to its upper edge.
    fn bin(&self, lo: f64, bins: usize, v: f64) -> usize {
        if v <= lo {
            return 0;
        }
        let k = ((v / lo).log10() * f64::from(self.bins_per_decade) + 1e-9).floor();
        (k.max(0.0) as usize).min(bins - 1)
    }

    /// The SVG document.
    pub fn render(&self) -> String {
        let w = self.frame.w();
        let mut body = Svg::new();
        let mut y = self.frame.title_block(&mut body);
        let plot_h = self
            .plot_height
            .unwrap_or_else(|| (w * 0.24).clamp(120.0, 220.0));
        let (lo, hi, edges) = self.axis();
        let bins = edges.len() - 1;
        let counts: Vec<Vec<u64>> = self
            .panels
            .iter()
            .map(|p| {
                let mut c = vec![0u64; bins];
                for v in &p.values {
                    c[self.bin(lo, bins, *v)] += 1;
                }
                c
            })
            .collect();
        let ticks: Vec<_> = counts
            .iter()
            .map(|c| {
                let peak = c.iter().copied().max().unwrap_or(0).max(1);
                plot::y_ticks(0.0, peak as f64, plot_h, true)
            })
            .collect();
        let left = EDGE + ticks.iter().map(plot::y_labels_width).fold(0.0, f64::max) + 10.0;
        let area_w = (w - left - EDGE - 8.0).max(40.0);
        let xs = Log {
            lo,
            hi,
            r0: left,
            r1: left + area_w,
        };
        let x_ticks: Vec<(f64, String)> = scale::log_time_ticks(lo, hi)
            .into_iter()
            .map(|(t, l)| (xs.at(t), l.to_owned()))
            .collect();
        let mut summary = Vec::new();
        for (n, ((panel, counts), ticks)) in self.panels.iter().zip(&counts).zip(&ticks).enumerate()
        {
            body.open(el("g").a("id", format!("{}-panel-{n}", self.frame.id())));
            y = plot::heading(
                &mut body,
                EDGE,
                y,
                w - 2.0 * EDGE,
                Some(&panel.heading),
                panel.note.as_deref(),
            );
            y += line_height(TEXT) + 2.0;
            plot::axis_name(&mut body, EDGE, y - 3.0, "start", &self.y_label);
            let marks = VMark::placed(&panel.marks, |v| xs.at(v));
            let (places, rows) = plot::mark_band(&marks, EDGE, w - EDGE);
            let area = Area {
                x: left,
                y: y + 8.0 + rows as f64 * ROW_H,
                w: area_w,
                h: plot_h,
            };
            let ys = Linear {
                d0: 0.0,
                d1: ticks.hi(),
                r0: area.bottom(),
                r1: area.y,
            };
            plot::y_axis(&mut body, area, ticks, ys);
            plot::x_ticks(&mut body, area, w, &x_ticks);
            body.open(el("g").a("fill", "#8a8a8a"));
            for (k, n) in counts.iter().enumerate().filter(|(_, n)| **n > 0) {
                let (x0, x1) = (xs.at(edges[k]), xs.at(edges[k + 1]));
                let top = ys.at(*n as f64);
                let tip = if k == 0 {
                    format!("{n} up to {}", scale::duration(edges[1]))
                } else {
                    format!(
                        "{n} from {} to {}",
                        scale::duration(edges[k]),
                        scale::duration(edges[k + 1])
                    )
                };
                body.with_tip(
                    el("rect")
                        .a("class", "bar")
                        .n("x", x0 + 0.5)
                        .n("y", top)
                        .n("width", (x1 - x0 - 1.0).max(1.0))
                        .n("height", area.bottom() - top),
                    &tip,
                );
            }
            body.close();
            if panel.values.is_empty() {
                body.text(
                    plot::label(area.x + area.w / 2.0, area.y + area.h / 2.0, "middle")
                        .a("fill", plot::MUTED),
                    &panel.empty,
                );
            }
            plot::draw_vmarks(&mut body, area, &marks, &places);
            y = area.bottom() + X_TICKS_H + line_height(TEXT);
            plot::axis_name(
                &mut body,
                area.x + area.w / 2.0,
                y - 3.0,
                "middle",
                &self.x_label,
            );
            y += 18.0;
            body.close();
            summary.push(describe(panel, &self.y_label));
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
}

fn describe(panel: &HistogramPanel, counted: &str) -> String {
    let v = &panel.values;
    let range = if v.is_empty() {
        panel.empty.clone()
    } else {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(
            "{} {counted}, from {} to {}",
            v.len(),
            scale::duration(min),
            scale::duration(max)
        )
    };
    let marks: Vec<&str> = panel.marks.iter().map(|m| m.label.as_str()).collect();
    if marks.is_empty() {
        format!("{}: {range}.", panel.heading)
    } else {
        format!("{}: {range}; marks: {}.", panel.heading, marks.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::place::Span;
    use crate::{Dash, Style, xml};

    const MIN: f64 = 60.0;
    const DAY: f64 = 86_400.0;

    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].to_owned()))
            .collect()
    }

    fn chart() -> TimeHistogram {
        TimeHistogram::new(Frame::new("h", "Gaps"), "gap", "repeats")
    }

    #[test]
    fn sub_second_values_get_bins_of_their_own() {
        let h = chart().panel(HistogramPanel::new("a").seconds([0.002, 0.02, 0.2, 0.9, 5.0]));
        let (lo, hi, edges) = h.axis();
        assert_eq!(lo, 0.001, "starts at the round time below the shortest");
        assert!(hi >= 5.0 * 1.6);
        let bins: Vec<usize> = [0.002, 0.02, 0.2, 0.9, 5.0]
            .iter()
            .map(|v| h.bin(lo, edges.len() - 1, *v))
            .collect();
        let mut distinct = bins.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), 5, "one bin each: {bins:?}");
        let svg = h.render();
        xml::check(&svg).unwrap();
        let t = texts(&svg);
        for tick in ["1ms", "10ms", "100ms", "1s"] {
            assert!(t.contains(&tick.to_owned()), "tick {tick} in {t:?}");
        }
        assert_eq!(svg.matches("class=\"bar\"").count(), 5);
    }

    #[test]
    fn the_axis_starts_at_the_round_time_below_the_shortest_and_counts_zero_in_the_first_bin() {
        let h = chart().panel(HistogramPanel::new("a").seconds([75.0, 6_000.0]));
        assert_eq!(h.axis().0, 60.0);
        let h = chart().panel(HistogramPanel::new("a").seconds([0.0, 0.0005, 3.0]));
        let (lo, _, edges) = h.axis();
        assert_eq!(lo, 0.001);
        assert_eq!(h.bin(lo, edges.len() - 1, 0.0), 0);
        assert_eq!(h.bin(lo, edges.len() - 1, 0.0005), 0);
        let svg = h.render();
        assert!(svg.contains("<title>2 up to 1.6ms</title>"), "{svg}");
        // A bin's edges: values on an edge go up.
        let h = chart().panel(HistogramPanel::new("a").seconds([1.0, 10.0]));
        let (lo, _, e) = h.axis();
        assert_eq!(lo, 1.0);
        assert_eq!(h.bin(lo, e.len() - 1, 10.0), 5);
        assert_eq!(h.bin(lo, e.len() - 1, 9.99), 4);
    }

    #[test]
    fn no_values_start_two_decades_below_the_first_mark() {
        let h = chart().panel(
            HistogramPanel::new("quiet")
                .mark(Mark::new(3_600.0, "retry window 1h"))
                .empty_text("no repeated deliveries"),
        );
        assert_eq!(h.axis().0, 10.0);
        let svg = h.render();
        assert!(texts(&svg).contains(&"no repeated deliveries".to_owned()));
        assert!(svg.contains("quiet: no repeated deliveries; marks: retry window 1h."));
    }

    /// The extents of the labels drawn in the mark rows, read back from the SVG.
    fn label_boxes(svg: &str, labels: &[&str]) -> Vec<(f64, f64, Span)> {
        svg.lines()
            .filter(|l| {
                l.starts_with("<text") && labels.iter().any(|m| l.contains(&format!(">{m}<")))
            })
            .map(|l| {
                let attr = |name: &str| -> f64 {
                    let at = l.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
                    l[at..at + l[at..].find('"').unwrap()].parse().unwrap()
                };
                let content = &l[l.find('>').unwrap() + 1..l.find("</text>").unwrap()];
                let (x, y) = (attr("x"), attr("y"));
                (
                    x,
                    y,
                    Span {
                        x0: x,
                        x1: x + crate::text::width(content, TEXT),
                    },
                )
            })
            .collect()
    }

    #[test]
    fn mark_labels_never_overlap_even_when_marks_coincide() {
        let labels = [
            "TTL 7d 10m",
            "retry window 7d 10m",
            "recommended 7d 10m",
            "retry window 3d",
        ];
        let h = chart().panel(
            HistogramPanel::new("stripe")
                .seconds((1..=100).map(|i| i as f64 * MIN))
                .mark(Mark::new(7.0 * DAY + 600.0, labels[0]).style(Style::nth(1)))
                .mark(
                    Mark::new(7.0 * DAY + 600.0, labels[1]).style(Style::nth(0).dash(Dash::Dashed)),
                )
                .mark(Mark::new(7.0 * DAY + 600.0, labels[2]).style(Style::nth(2)))
                .mark(Mark::new(3.0 * DAY, labels[3])),
        );
        let svg = h.render();
        xml::check(&svg).unwrap();
        let boxes = label_boxes(&svg, &labels);
        assert_eq!(boxes.len(), 4, "{svg}");
        for (i, a) in boxes.iter().enumerate() {
            assert!(a.2.x0 >= 0.0 && a.2.x1 <= 720.0, "inside the frame: {a:?}");
            for b in &boxes[i + 1..] {
                let same_row = (a.1 - b.1).abs() < ROW_H - 1.0;
                let apart = a.2.x1 <= b.2.x0 || b.2.x1 <= a.2.x0;
                assert!(!same_row || apart, "{a:?} overlaps {b:?}");
            }
        }
    }

    #[test]
    fn panels_share_one_axis() {
        let h = chart()
            .panel(HistogramPanel::new("fast").seconds([0.01]))
            .panel(HistogramPanel::new("slow").seconds([30.0 * DAY]));
        let svg = h.render();
        let t = texts(&svg);
        assert_eq!(t.iter().filter(|l| *l == "10ms").count(), 2);
        assert_eq!(t.iter().filter(|l| *l == "30d").count(), 2);
    }
}
