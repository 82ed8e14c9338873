//! Bars over categories, stacked or side by side: counts by outcome per time bucket.

use crate::place;
use crate::plot::{self, Area, EDGE, HMark, X_TICKS_H};
use crate::scale::{self, Linear};
use crate::style::Style;
use crate::svg::{Svg, el};
use crate::text::{self, SMALL, TEXT, line_height};
use crate::{Frame, Mark, Series};

/// How the series of a bar chart share a category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarLayout {
    /// One bar per category, the series on top of each other (totals on top).
    Stacked,
    /// One bar per series, side by side (values on top where they fit).
    Grouped,
}

/// A bar chart. Each series has a fill pattern as well as a colour, shown in the legend above
/// the plot; every bar carries its value as a tooltip.
#[derive(Debug, Clone)]
pub struct Bars {
    frame: Frame,
    categories: Vec<String>,
    x_label: String,
    y_label: String,
    series: Vec<Series>,
    layout: BarLayout,
    y_marks: Vec<Mark>,
    plot_height: Option<f64>,
}

impl Bars {
    /// Bars over `categories` (the x axis, named `x_label`), measuring `y_label`.
    pub fn new(
        frame: Frame,
        categories: Vec<String>,
        x_label: impl Into<String>,
        y_label: impl Into<String>,
    ) -> Self {
        Self {
            frame,
            categories,
            x_label: x_label.into(),
            y_label: y_label.into(),
            series: Vec::new(),
            layout: BarLayout::Stacked,
            y_marks: Vec::new(),
            plot_height: None,
        }
    }

    /// Adds a series: its `i`-th value ([`Series::new`]) belongs to the `i`-th category.
    /// Negative values and missing ones draw as zero.
    pub fn series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }

    /// Stacked (the default) or grouped.
    pub fn layout(mut self, layout: BarLayout) -> Self {
        self.layout = layout;
        self
    }

    /// A horizontal line at y value `mark.at`.
    pub fn y_mark(mut self, mark: Mark) -> Self {
        self.y_marks.push(mark);
        self
    }

    /// The height of the plot area (default: in proportion to the width).
    pub fn plot_height(mut self, height: f64) -> Self {
        self.plot_height = Some(height.clamp(60.0, 2000.0));
        self
    }

    /// Series `n`'s value in category `i`, as drawn.
    fn value(&self, n: usize, i: usize) -> f64 {
        self.series[n]
            .points
            .get(i)
            .map(|p| p.1)
            .filter(|v| v.is_finite())
            .unwrap_or(0.0)
            .max(0.0)
    }

    fn total(&self, i: usize) -> f64 {
        (0..self.series.len()).map(|n| self.value(n, i)).sum()
    }

    fn styles(&self) -> Vec<Style> {
        self.series
            .iter()
            .enumerate()
            .map(|(n, s)| s.style_or(n))
            .collect()
    }

    /// The SVG document.
    pub fn render(&self) -> String {
        let w = self.frame.w();
        let id = self.frame.id().to_owned();
        let mut body = Svg::new();
        let styles = self.styles();
        let pattern_id = |n: usize| format!("{id}-fill-{n}");
        body.open(el("defs"));
        for (n, s) in styles.iter().enumerate() {
            s.pattern(&mut body, &pattern_id(n));
        }
        body.close();
        let mut y = self.frame.title_block(&mut body);
        y = self.legend(&mut body, y, &styles, &pattern_id);
        let plot_h = self
            .plot_height
            .unwrap_or_else(|| (w * 0.36).clamp(160.0, 300.0));
        let cats = self.categories.len();
        let highest = match self.layout {
            BarLayout::Stacked => (0..cats).map(|i| self.total(i)).fold(0.0, f64::max),
            BarLayout::Grouped => (0..self.series.len())
                .flat_map(|n| (0..cats).map(move |i| (n, i)))
                .map(|(n, i)| self.value(n, i))
                .fold(0.0, f64::max),
        };
        let highest = self
            .y_marks
            .iter()
            .map(|m| m.at)
            .filter(|v| v.is_finite())
            .fold(highest, f64::max);
        let integers = self
            .series
            .iter()
            .all(|s| s.values().all(|v| v.fract() == 0.0));
        // Room above the tallest bar for its value.
        let ticks = plot::y_ticks(0.0, highest * 1.08, plot_h, integers);
        let left = EDGE + plot::y_labels_width(&ticks) + 10.0;
        y += line_height(TEXT);
        plot::axis_name(&mut body, EDGE, y - 3.0, "start", &self.y_label);
        let area = Area {
            x: left,
            y: y + 10.0,
            w: (w - left - EDGE - 8.0).max(40.0),
            h: plot_h,
        };
        let ys = Linear {
            d0: 0.0,
            d1: ticks.hi(),
            r0: area.bottom(),
            r1: area.y,
        };
        plot::y_axis(&mut body, area, &ticks, ys);
        let slot = area.w / cats.max(1) as f64;
        let centre = |i: usize| area.x + slot * (i as f64 + 0.5);
        let widest = self
            .categories
            .iter()
            .map(|c| text::width(c, TEXT))
            .fold(0.0, f64::max);
        let every = place::every(slot, widest, 10.0);
        let ticks_x: Vec<(f64, String)> = self
            .categories
            .iter()
            .enumerate()
            .filter(|(i, _)| i % every == 0 || i + 1 == cats)
            .map(|(i, c)| (centre(i), c.clone()))
            .collect();
        plot::x_ticks(&mut body, area, w, &ticks_x);
        let bar_w = (slot * 0.72).min(90.0);
        let mut values = Svg::new();
        for (i, cat) in self.categories.iter().enumerate() {
            match self.layout {
                BarLayout::Stacked => {
                    let mut base = 0.0;
                    for (n, s) in self.series.iter().enumerate() {
                        let v = self.value(n, i);
                        if v <= 0.0 {
                            continue;
                        }
                        let (top, bottom) = (ys.at(base + v), ys.at(base));
                        body.with_tip(
                            el("rect")
                                .n("x", centre(i) - bar_w / 2.0)
                                .n("y", top)
                                .n("width", bar_w)
                                .n("height", bottom - top)
                                .a("fill", styles[n].fill_value(&pattern_id(n)))
                                .a("stroke", "#fff")
                                .n("stroke-width", 0.5),
                            &format!("{cat}, {}: {}", s.name, scale::number(v)),
                        );
                        base += v;
                    }
                    let total = scale::number(base);
                    if base > 0.0 && text::width(&total, SMALL) <= slot - 2.0 {
                        values.text(
                            plot::label(centre(i), ys.at(base) - 4.0, "middle")
                                .n("font-size", SMALL),
                            &total,
                        );
                    }
                }
                BarLayout::Grouped => {
                    let k = self.series.len().max(1) as f64;
                    let each = bar_w / k;
                    for (n, s) in self.series.iter().enumerate() {
                        let v = self.value(n, i);
                        let x = centre(i) - bar_w / 2.0 + each * n as f64;
                        let top = ys.at(v);
                        body.with_tip(
                            el("rect")
                                .n("x", x + 0.5)
                                .n("y", top)
                                .n("width", (each - 1.0).max(1.0))
                                .n("height", area.bottom() - top)
                                .a("fill", styles[n].fill_value(&pattern_id(n))),
                            &format!("{cat}, {}: {}", s.name, scale::number(v)),
                        );
                        let text = scale::number(v);
                        if text::width(&text, SMALL) <= each + 4.0 {
                            values.text(
                                plot::label(x + each / 2.0, top - 4.0, "middle")
                                    .n("font-size", SMALL),
                                &text,
                            );
                        }
                    }
                }
            }
        }
        body.open(plot::halo());
        body.append(values);
        body.close();
        let hmarks = HMark::placed(&self.y_marks, |v| ys.at(v));
        plot::draw_hmarks(&mut body, area, &hmarks);
        y = area.bottom() + X_TICKS_H + line_height(TEXT);
        plot::axis_name(
            &mut body,
            area.x + area.w / 2.0,
            y - 3.0,
            "middle",
            &self.x_label,
        );
        y += 14.0;
        self.frame.document(y, &self.describe(), body)
    }

    /// The legend: a swatch and a name per series, in rows that wrap; returns the `y` below.
    fn legend(
        &self,
        svg: &mut Svg,
        y: f64,
        styles: &[Style],
        pattern_id: &dyn Fn(usize) -> String,
    ) -> f64 {
        let w = self.frame.w();
        let h = line_height(TEXT) + 4.0;
        let (mut x, mut row_y) = (EDGE, y);
        for (n, s) in self.series.iter().enumerate() {
            let item = 16.0 + 6.0 + text::width(&s.name, TEXT) + 18.0;
            if x > EDGE && x + item > w - EDGE {
                x = EDGE;
                row_y += h;
            }
            svg.leaf(
                el("rect")
                    .n("x", x)
                    .n("y", row_y + 2.0)
                    .n("width", 16.0)
                    .n("height", 12.0)
                    .a("fill", styles[n].fill_value(&pattern_id(n)))
                    .a("stroke", styles[n].colour.hex()),
            );
            svg.text(plot::label(x + 22.0, row_y + 12.5, "start"), &s.name);
            x += item;
        }
        if self.series.is_empty() { y } else { row_y + h }
    }

    fn describe(&self) -> String {
        let layout = match self.layout {
            BarLayout::Stacked => "stacked",
            BarLayout::Grouped => "grouped",
        };
        let series: Vec<String> = self
            .series
            .iter()
            .enumerate()
            .map(|(n, s)| {
                let values: Vec<f64> = (0..self.categories.len())
                    .map(|i| self.value(n, i))
                    .collect();
                let (at, max) = values.iter().enumerate().fold((0, 0.0), |best, (i, v)| {
                    if *v > best.1 { (i, *v) } else { best }
                });
                let total: f64 = values.iter().sum();
                match self.categories.get(at) {
                    Some(cat) if max > 0.0 => format!(
                        "{}: total {}, most {} at {cat}",
                        s.name,
                        scale::number(total),
                        scale::number(max)
                    ),
                    _ => format!("{}: none", s.name),
                }
            })
            .collect();
        format!(
            "{} by {}, {layout} bars over {}: {}.",
            self.y_label,
            self.x_label,
            text::count(self.categories.len() as u64, "category", "categories"),
            if series.is_empty() {
                "no series".to_owned()
            } else {
                series.join("; ")
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xml;

    fn buckets(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10:{:02}", i * 5)).collect()
    }

    fn outcomes() -> Bars {
        Bars::new(
            Frame::new("outcomes", "Deliveries by outcome"),
            buckets(4),
            "time (UTC)",
            "deliveries",
        )
        .series(Series::new("claimed", [10.0, 20.0, 0.0, 5.0]))
        .series(Series::new("duplicate", [2.0, 0.0, 0.0, 1.0]))
        .series(Series::new("late duplicate", [0.0, 1.0, 0.0, f64::NAN]))
    }

    #[test]
    fn stacked_bars_total_on_top_with_a_tooltip_per_segment() {
        let svg = outcomes().render();
        xml::check(&svg).unwrap();
        assert!(svg.contains("<title>10:05, late duplicate: 1</title>"));
        assert!(svg.contains(">21</text>"), "the 10:05 total");
        assert!(svg.contains(">12</text>") && svg.contains(">6</text>"));
        assert_eq!(
            svg.matches("<title>10:").count(),
            6,
            "zero segments are not drawn"
        );
        assert!(svg.contains("claimed: total 35, most 20 at 10:05"));
    }

    #[test]
    fn series_are_told_apart_by_pattern_as_well_as_colour() {
        let svg = outcomes().render();
        assert!(svg.contains("<pattern id=\"outcomes-fill-1\""));
        assert!(svg.contains("<pattern id=\"outcomes-fill-2\""));
        assert!(!svg.contains("outcomes-fill-0\""), "the first is solid");
        assert!(svg.contains("fill=\"url(#outcomes-fill-1)\""));
        for name in ["claimed", "duplicate", "late duplicate"] {
            assert!(
                svg.contains(&format!(">{name}</text>")),
                "{name} in the legend"
            );
        }
    }

    #[test]
    fn grouped_bars_stand_side_by_side() {
        let svg = outcomes().layout(BarLayout::Grouped).render();
        xml::check(&svg).unwrap();
        assert_eq!(
            svg.matches("<title>10:").count(),
            12,
            "every bar, zeros included"
        );
        let t = plot::y_ticks(0.0, 20.0 * 1.08, 259.0, true);
        assert!(t.hi() >= 20.0 && t.step >= 1.0);
    }

    #[test]
    fn many_categories_thin_their_labels() {
        let mut bars = Bars::new(Frame::new("b", "b").width(420.0), buckets(12), "t", "n");
        bars = bars.series(Series::new("a", (0..12).map(f64::from)));
        let svg = bars.render();
        let shown = buckets(12)
            .iter()
            .filter(|b| svg.contains(&format!(">{b}</text>")))
            .count();
        assert!((3..12).contains(&shown), "{shown}");
        assert!(svg.contains(">10:55</text>"), "the last");
    }
}
