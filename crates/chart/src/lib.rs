//! idemgate's charts, as SVG text: plain markup, no scripts, no external fonts or styles, no
//! I/O. The same output works as a file (the benchmark results, `idemgate advise --plot`) and
//! inline in server-rendered HTML (no XML prolog; a `viewBox`, so CSS sizes it).
//!
//! # Layout
//!
//! - [`LineChart`]: series over shared x values (categories, numbers or UTC times), in one
//!   or more panels stacked top to bottom, with vertical and horizontal marks.
//! - [`Bars`]: stacked or grouped bars over categories (counts by outcome over time).
//! - [`TimeHistogram`]: counts of durations on a logarithmic time axis (1ms, 10ms, ... 1s,
//!   1m, 1h, 1d), one panel per group, with labelled vertical marks.
//! - [`Gauge`]: values against their limits, one bar each.
//! - [`Frame`]: what every chart has: an id, a title, a description, a width.
//! - [`xml::check`]: a small well-formedness check, for tests here and in the programs that
//!   embed these charts.
//!
//! # Accessibility and sizing
//!
//! Every chart is `role="img"` with a `<title>` and a `<desc>` it is labelled by (the
//! description defaults to a summary of the data); axis labels, ticks and values are real
//! `<text>`; series differ in dash pattern and marker (bars: fill pattern) as well as colour,
//! and each line carries its name beside it. Ids are the frame's id plus a suffix, so charts
//! with distinct ids can share a page.
//!
//! Coordinates are user units of the `viewBox`, laid out for [`Frame::width`] (720 by
//! default) with text of 12 to 17 units. A viewer scales the whole drawing: at 720 wide it
//! reads well from about 540 px up (1280 px screens included, with a `max-width` in the
//! page's CSS); for a phone, render at `width(420)`, which reflows the chart (fewer ticks,
//! wrapped labels) so that text stays 11 px or more on a 390 px screen.
//!
//! Text cannot be measured before a viewer renders it; widths are estimated on the generous
//! side of common sans-serif faces, and labels are placed by those estimates so that none
//! overlap.

mod bars;
mod gauge;
mod histogram;
mod line;
mod place;
mod plot;
mod scale;
mod style;
mod svg;
mod text;
pub mod xml;

pub use bars::{BarLayout, Bars};
pub use gauge::Gauge;
pub use histogram::{HistogramPanel, TimeHistogram};
pub use line::{LineChart, LinePanel, XAxis};
pub use scale::{duration, number};
pub use style::{Colour, Dash, Fill, Marker, Style};
pub use svg::escape;
pub use text::count;

/// The size of body text (tick and mark labels, names beside lines), in user units.
pub const TEXT_SIZE: f64 = text::TEXT;

/// The estimated width of `text` at `font_size`: what the charts place labels by (generous
/// for common sans-serif faces).
pub fn text_width(text: &str, font_size: f64) -> f64 {
    text::width(text, font_size)
}

use crate::svg::{Svg, el};

/// A named run of values: a line, or a row of bars.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    style: Option<Style>,
}

impl Series {
    /// Values at x = 0, 1, 2, ... (the categories of a [`XAxis::Categories`] axis or of
    /// [`Bars`]). A value that is not finite (`f64::NAN`) is missing: a line breaks there.
    pub fn new(name: impl Into<String>, ys: impl IntoIterator<Item = f64>) -> Self {
        Self {
            name: name.into(),
            points: ys
                .into_iter()
                .enumerate()
                .map(|(i, y)| (i as f64, y))
                .collect(),
            style: None,
        }
    }

    /// Values at given x (numbers, or Unix seconds on a [`XAxis::UtcTime`] axis), in order.
    pub fn xy(name: impl Into<String>, points: impl IntoIterator<Item = (f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points: points.into_iter().collect(),
            style: None,
        }
    }

    /// A style of its own instead of the `n`-th of its chart ([`Style::nth`]).
    pub fn style(mut self, style: Style) -> Self {
        self.style = Some(style);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn style_or(&self, n: usize) -> Style {
        self.style.unwrap_or_else(|| Style::nth(n))
    }

    /// The finite values.
    pub(crate) fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.points.iter().map(|p| p.1).filter(|v| v.is_finite())
    }
}

/// A reference line at a value, with a label: a deadline, a target, a limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    at: f64,
    label: String,
    style: Style,
}

impl Mark {
    /// A mark at `at` (an x value, a y value or seconds, as the chart's axis reads it), drawn
    /// as [`Style::mark`].
    pub fn new(at: f64, label: impl Into<String>) -> Self {
        Self {
            at,
            label: label.into(),
            style: Style::mark(),
        }
    }

    /// Drawn in `style` (its colour and dash; markers and fills are not used).
    pub fn style(mut self, style: Style) -> Self {
        self.style = style;
        self
    }
}

/// What every chart has: an id (the prefix of the ids inside it), a title, an optional
/// description, and the width it is laid out for.
#[derive(Debug, Clone)]
pub struct Frame {
    id: String,
    title: String,
    desc: Option<String>,
    width: f64,
    fluid: bool,
}

impl Frame {
    /// The narrowest and widest layouts.
    pub const MIN_WIDTH: f64 = 320.0;
    pub const MAX_WIDTH: f64 = 2400.0;

    /// A chart titled `title`. `id` prefixes the ids inside the chart; characters other than
    /// ASCII letters, digits, `-` and `_` become `-`, and an id that does not start with a
    /// letter gets a `chart-` prefix.
    pub fn new(id: &str, title: &str) -> Self {
        let mut clean: String = id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if !clean.starts_with(|c: char| c.is_ascii_alphabetic()) {
            clean.insert_str(0, "chart-");
        }
        Self {
            id: clean,
            title: title.to_owned(),
            desc: None,
            width: 720.0,
            fluid: false,
        }
    }

    /// The description (`<desc>`) instead of the generated summary of the data.
    pub fn desc(mut self, text: &str) -> Self {
        self.desc = Some(text.to_owned());
        self
    }

    /// Lays the chart out `width` user units wide (clamped to
    /// [`MIN_WIDTH`](Self::MIN_WIDTH)..=[`MAX_WIDTH`](Self::MAX_WIDTH)).
    pub fn width(mut self, width: f64) -> Self {
        self.width = if width.is_finite() {
            width.clamp(Self::MIN_WIDTH, Self::MAX_WIDTH)
        } else {
            720.0
        };
        self
    }

    /// `width="100%"` and no height, for inline use: the chart fills its container and keeps
    /// its aspect ratio. Without it the root has its natural size in pixels (for files).
    pub fn fluid(mut self) -> Self {
        self.fluid = true;
        self
    }

    /// The id, as used (cleaned).
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn w(&self) -> f64 {
        self.width
    }

    /// Draws the title from `y`; returns where the content below it starts.
    pub(crate) fn title_block(&self, svg: &mut Svg) -> f64 {
        let lines = text::wrap(&self.title, text::TITLE, self.width - 2.0 * plot::EDGE);
        let mut y = 6.0;
        for line in &lines {
            y += text::line_height(text::TITLE);
            svg.text(
                el("text")
                    .n("x", plot::EDGE)
                    .n("y", y - 4.0)
                    .n("font-size", text::TITLE)
                    .a("font-weight", "bold"),
                line,
            );
        }
        y + 10.0
    }

    /// The whole document: root element, title and description, background, `body`.
    pub(crate) fn document(&self, height: f64, summary: &str, body: Svg) -> String {
        let h = height.ceil();
        let w = self.width;
        let mut svg = Svg::new();
        let root = el("svg")
            .a("xmlns", "http://www.w3.org/2000/svg")
            .a("viewBox", format!("0 0 {} {}", svg::N(w), svg::N(h)));
        let root = if self.fluid {
            root.a("width", "100%")
        } else {
            root.n("width", w).n("height", h)
        };
        svg.open(
            root.a("role", "img")
                .a("aria-labelledby", format!("{0}-title {0}-desc", self.id))
                .a(
                    "font-family",
                    "system-ui, -apple-system, 'Segoe UI', Roboto, Arial, sans-serif",
                )
                .n("font-size", text::TEXT)
                .a("fill", plot::INK),
        );
        svg.text(
            el("title").a("id", format!("{}-title", self.id)),
            &self.title,
        );
        svg.text(
            el("desc").a("id", format!("{}-desc", self.id)),
            self.desc.as_deref().unwrap_or(summary),
        );
        svg.leaf(
            el("rect")
                .a("width", "100%")
                .a("height", "100%")
                .a("fill", "#fff"),
        );
        svg.append(body);
        svg.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_cleaned_for_html() {
        assert_eq!(Frame::new("gaps", "t").id(), "gaps");
        assert_eq!(Frame::new("stripe live/1", "t").id(), "stripe-live-1");
        assert_eq!(Frame::new("1st", "t").id(), "chart-1st");
        assert_eq!(Frame::new("", "t").id(), "chart-");
    }

    #[test]
    fn degenerate_input_still_gives_well_formed_charts() {
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        let frame = || Frame::new("d", "degenerate & <odd>");
        let charts = [
            LineChart::new(frame(), XAxis::Categories(vec!["only".into()]), "x")
                .panel(LinePanel::new("y").series(Series::new("one", [5.0])))
                .render(),
            LineChart::new(frame(), XAxis::Numbers, "x")
                .panel(
                    LinePanel::new("y")
                        .series(Series::xy("flat", [(3.0, 0.0), (3.0, 0.0)]))
                        .series(Series::new("missing", [nan, inf]))
                        .x_mark(Mark::new(inf, "nowhere"))
                        .y_mark(Mark::new(nan, "never")),
                )
                .render(),
            LineChart::new(frame(), XAxis::UtcTime, "t")
                .panel(LinePanel::new("y"))
                .render(),
            LineChart::new(frame(), XAxis::Numbers, "x")
                .panel(LinePanel::new("y").series(Series::xy("neg", [(0.0, -5.0), (1.0, -1.0)])))
                .render(),
            Bars::new(frame(), Vec::new(), "x", "y").render(),
            Bars::new(frame(), vec!["a".into()], "x", "y")
                .series(Series::new("s", [nan]))
                .series(Series::new("t", [-3.0]))
                .render(),
            TimeHistogram::new(frame(), "x", "y").render(),
            TimeHistogram::new(frame(), "x", "y")
                .panel(HistogramPanel::new("empty"))
                .panel(
                    HistogramPanel::new("odd")
                        .seconds([nan, -1.0, inf, 0.0])
                        .mark(Mark::new(0.0, "zero"))
                        .mark(Mark::new(nan, "nan")),
                )
                .render(),
            Gauge::new(frame()).render(),
            Gauge::new(frame())
                .row("nan", nan, 10.0)
                .row("no limit", 5.0, 0.0)
                .row("inf limit", 5.0, inf)
                .render(),
        ];
        for svg in charts {
            if let Err(e) = xml::check(&svg) {
                panic!("{e}: {svg}");
            }
            assert!(!svg.contains("NaN") && !svg.contains("inf\""), "{svg}");
            assert!(svg.contains("degenerate &amp; &lt;odd&gt;"));
        }
    }

    #[test]
    fn width_is_clamped() {
        assert_eq!(Frame::new("a", "t").width(10.0).w(), Frame::MIN_WIDTH);
        assert_eq!(Frame::new("a", "t").width(1e9).w(), Frame::MAX_WIDTH);
        assert_eq!(Frame::new("a", "t").width(f64::NAN).w(), 720.0);
    }

    #[test]
    fn documents_are_labelled_images_and_fluid_on_request() {
        let f = Frame::new("c", "A <title> & more");
        let doc = f.document(100.0, "the summary", Svg::new());
        xml::check(&doc).unwrap();
        assert!(doc.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 720 100\" width=\"720\" height=\"100\" role=\"img\" aria-labelledby=\"c-title c-desc\""), "{doc}");
        assert!(doc.contains("<title id=\"c-title\">A &lt;title&gt; &amp; more</title>"));
        assert!(doc.contains("<desc id=\"c-desc\">the summary</desc>"));
        assert!(!doc.contains("<?xml"));
        let fluid = f
            .clone()
            .fluid()
            .desc("mine")
            .document(100.0, "x", Svg::new());
        assert!(fluid.contains("width=\"100%\" role") && !fluid.contains("height=\"100\""));
        assert!(fluid.contains(">mine</desc>"));
    }
}
