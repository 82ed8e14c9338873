//! Values against their limits: one bar per row, the limit a line across it, the reading in
//! words beside it ("850 of 1,000 (85%)", "over the limit by 15%").

use crate::Frame;
use crate::plot::{self, EDGE, INK};
use crate::scale;
use crate::style::{Colour, Fill, Style};
use crate::svg::{Svg, el};
use crate::text::{self, TEXT, line_height};

#[derive(Debug, Clone)]
struct Row {
    label: String,
    value: f64,
    limit: f64,
}

/// Bars of values against limits, one row each.
#[derive(Debug, Clone)]
pub struct Gauge {
    frame: Frame,
    rows: Vec<Row>,
}

/// The height of a bar.
const BAR: f64 = 14.0;

impl Gauge {
    pub fn new(frame: Frame) -> Self {
        Self {
            frame,
            rows: Vec::new(),
        }
    }

    /// A row: `label`, its `value` and its `limit` (a limit that is not above zero, or not
    /// finite, means none: the value is shown alone).
    pub fn row(mut self, label: impl Into<String>, value: f64, limit: f64) -> Self {
        self.rows.push(Row {
            label: label.into(),
            value,
            limit,
        });
        self
    }

    /// The reading of a row in words.
    fn reading(row: &Row) -> String {
        let value = scale::number(row.value);
        if !(row.limit.is_finite() && row.limit > 0.0) {
            return format!("{value} (no limit)");
        }
        let pct = row.value / row.limit * 100.0;
        let limit = scale::number(row.limit);
        if row.value > row.limit {
            format!(
                "{value} of {limit}: over the limit by {}%",
                scale::number((pct - 100.0).round().max(1.0))
            )
        } else {
            format!("{value} of {limit} ({}%)", scale::number(pct.round()))
        }
    }

    /// The SVG document.
    pub fn render(&self) -> String {
        let w = self.frame.w();
        let id = self.frame.id().to_owned();
        let over = Style::nth(1).colour(Colour::Vermillion).fill(Fill::Hatch);
        let mut body = Svg::new();
        body.open(el("defs"));
        over.pattern(&mut body, &format!("{id}-over"));
        body.close();
        let mut y = self.frame.title_block(&mut body);
        let track_w = w - 2.0 * EDGE;
        for row in &self.rows {
            y += line_height(TEXT);
            let reading = Self::reading(row);
            let reading_w = text::width(&reading, TEXT);
            // The label left, the reading right; on separate lines when they do not fit side by side.
            body.text(
                plot::label(EDGE, y - 3.0, "start").a("font-weight", "bold"),
                &row.label,
            );
            if text::width(&row.label, TEXT) * 1.1 + reading_w + 16.0 > track_w {
                y += line_height(TEXT);
            }
            body.text(plot::label(w - EDGE, y - 3.0, "end"), &reading);
            let top = y + 4.0;
            body.leaf(
                el("rect")
                    .n("x", EDGE)
                    .n("y", top)
                    .n("width", track_w)
                    .n("height", BAR)
                    .a("fill", "#ececec")
                    .a("stroke", "#b5b5b5"),
            );
            let value = if row.value.is_finite() {
                row.value.max(0.0)
            } else {
                0.0
            };
            if row.limit.is_finite() && row.limit > 0.0 {
                let full = value.max(row.limit);
                let at = |v: f64| EDGE + v / full * track_w;
                body.leaf(
                    el("rect")
                        .n("x", EDGE)
                        .n("y", top)
                        .n("width", at(value.min(row.limit)) - EDGE)
                        .n("height", BAR)
                        .a("fill", Colour::Blue.hex()),
                );
                if value > row.limit {
                    body.leaf(
                        el("rect")
                            .n("x", at(row.limit))
                            .n("y", top)
                            .n("width", at(value) - at(row.limit))
                            .n("height", BAR)
                            .a("fill", over.fill_value(&format!("{id}-over"))),
                    );
                }
                body.leaf(
                    el("line")
                        .n("x1", at(row.limit))
                        .n("x2", at(row.limit))
                        .n("y1", top - 4.0)
                        .n("y2", top + BAR + 4.0)
                        .a("stroke", INK)
                        .n("stroke-width", 2.0),
                );
            }
            y = top + BAR + 12.0;
        }
        let summary: Vec<String> = self
            .rows
            .iter()
            .map(|r| format!("{}: {}.", r.label, Self::reading(r)))
            .collect();
        self.frame.document(y + 4.0, &summary.join(" "), body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xml;

    #[test]
    fn readings_in_words() {
        let r = |value, limit| {
            Gauge::reading(&Row {
                label: String::new(),
                value,
                limit,
            })
        };
        assert_eq!(r(850.0, 1000.0), "850 of 1,000 (85%)");
        assert_eq!(
            r(11_500.0, 10_000.0),
            "11,500 of 10,000: over the limit by 15%"
        );
        assert_eq!(r(5.0, 0.0), "5 (no limit)");
    }

    #[test]
    fn over_the_limit_is_hatched_and_said() {
        let svg = Gauge::new(Frame::new("g", "Rows against the cap"))
            .row("live rows", 850.0, 1000.0)
            .row("stripe-live <prod>", 1_200.0, 1000.0)
            .render();
        xml::check(&svg).unwrap();
        assert!(svg.contains("url(#g-over)"));
        assert!(svg.contains("over the limit by 20%"));
        assert!(svg.contains("stripe-live &lt;prod&gt;"));
        assert_eq!(
            svg.matches("url(#g-over)").count(),
            1,
            "only the row over its limit"
        );
    }
}
