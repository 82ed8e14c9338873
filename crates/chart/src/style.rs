//! How a series or a mark looks. Colour is never the only cue: every style also has a dash
//! pattern and a point marker (lines) or a fill pattern (bars), and text is always dark.

use crate::svg::{El, N, Svg, el};

/// Colours from the Okabe-Ito set, which stays distinct under the common colour-vision
/// deficiencies; all read against white.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    Blue,
    Vermillion,
    Green,
    Purple,
    Orange,
    Sky,
    Grey,
    Black,
}

impl Colour {
    const CYCLE: [Colour; 6] = [
        Colour::Blue,
        Colour::Vermillion,
        Colour::Green,
        Colour::Purple,
        Colour::Orange,
        Colour::Sky,
    ];

    /// The `#rrggbb` value.
    pub fn hex(self) -> &'static str {
        match self {
            Self::Blue => "#0072b2",
            Self::Vermillion => "#d55e00",
            Self::Green => "#009e73",
            Self::Purple => "#cc79a7",
            Self::Orange => "#e69f00",
            Self::Sky => "#56b4e9",
            Self::Grey => "#6b6b6b",
            Self::Black => "#1a1a1a",
        }
    }
}

/// A line's dash pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dash {
    Solid,
    Dashed,
    Dotted,
    DashDot,
    LongDash,
}

impl Dash {
    const CYCLE: [Dash; 5] = [
        Dash::Solid,
        Dash::Dashed,
        Dash::Dotted,
        Dash::DashDot,
        Dash::LongDash,
    ];

    /// The `stroke-dasharray` value (none for solid).
    pub fn dasharray(self) -> Option<&'static str> {
        match self {
            Self::Solid => None,
            Self::Dashed => Some("8 4"),
            Self::Dotted => Some("2 3"),
            Self::DashDot => Some("10 3 2 3"),
            Self::LongDash => Some("16 5"),
        }
    }
}

/// A point marker's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Circle,
    Square,
    Triangle,
    Diamond,
    Cross,
    Plus,
    None,
}

impl Marker {
    const CYCLE: [Marker; 6] = [
        Marker::Circle,
        Marker::Square,
        Marker::Triangle,
        Marker::Diamond,
        Marker::Cross,
        Marker::Plus,
    ];
}

/// A bar's fill pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    Solid,
    /// Diagonal stripes.
    Hatch,
    Dots,
    /// Crossed diagonal stripes.
    Crosshatch,
    /// Horizontal stripes.
    Stripes,
}

impl Fill {
    const CYCLE: [Fill; 5] = [
        Fill::Solid,
        Fill::Hatch,
        Fill::Dots,
        Fill::Crosshatch,
        Fill::Stripes,
    ];
}

/// The look of one series or mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub colour: Colour,
    pub dash: Dash,
    pub marker: Marker,
    pub fill: Fill,
}

impl Style {
    /// The `n`-th series' style: colour, dash, marker and fill each cycle, so neighbours differ
    /// in all four and the first 30 series differ in at least two.
    pub fn nth(n: usize) -> Self {
        Self {
            colour: Colour::CYCLE[n % Colour::CYCLE.len()],
            dash: Dash::CYCLE[n % Dash::CYCLE.len()],
            marker: Marker::CYCLE[n % Marker::CYCLE.len()],
            fill: Fill::CYCLE[n % Fill::CYCLE.len()],
        }
    }

    /// A style for reference marks: dark grey, dashed, no marker.
    pub fn mark() -> Self {
        Self {
            colour: Colour::Grey,
            dash: Dash::Dashed,
            marker: Marker::None,
            fill: Fill::Solid,
        }
    }

    /// This style with another colour.
    pub fn colour(self, colour: Colour) -> Self {
        Self { colour, ..self }
    }

    /// This style with another dash pattern.
    pub fn dash(self, dash: Dash) -> Self {
        Self { dash, ..self }
    }

    /// This style with another marker.
    pub fn marker(self, marker: Marker) -> Self {
        Self { marker, ..self }
    }

    /// This style with another fill.
    pub fn fill(self, fill: Fill) -> Self {
        Self { fill, ..self }
    }

    /// Adds the stroke of this style to a line, path or polyline.
    pub(crate) fn stroke(self, e: El, width: f64) -> El {
        e.a("fill", "none")
            .a("stroke", self.colour.hex())
            .n("stroke-width", width)
            .opt("stroke-dasharray", self.dash.dasharray())
    }

    /// The `fill` attribute value for a bar of this style; `pattern_id` names the pattern this
    /// style's [`Style::pattern`] wrote, when it is not solid.
    pub(crate) fn fill_value(self, pattern_id: &str) -> String {
        match self.fill {
            Fill::Solid => self.colour.hex().to_owned(),
            _ => format!("url(#{pattern_id})"),
        }
    }

    /// Writes this style's fill pattern (nothing for solid) into `defs`, under `id`.
    pub(crate) fn pattern(self, defs: &mut Svg, id: &str) {
        let size = 7.0;
        let base = |defs: &mut Svg, rotate: Option<f64>| {
            defs.open(
                el("pattern")
                    .a("id", id)
                    .a("patternUnits", "userSpaceOnUse")
                    .n("width", size)
                    .n("height", size)
                    .opt("patternTransform", rotate.map(|r| format!("rotate({r})"))),
            );
            defs.leaf(
                el("rect")
                    .n("width", size)
                    .n("height", size)
                    .a("fill", self.colour.hex()),
            );
        };
        let white = |e: El| e.a("stroke", "#fff").n("stroke-width", 2.2);
        match self.fill {
            Fill::Solid => return,
            Fill::Hatch => {
                base(defs, Some(45.0));
                defs.leaf(white(el("line").n("x1", 1.0).n("x2", 1.0).n("y2", size)));
            }
            Fill::Crosshatch => {
                base(defs, Some(45.0));
                defs.leaf(white(el("line").n("x1", 1.0).n("x2", 1.0).n("y2", size)));
                defs.leaf(white(el("line").n("y1", 1.0).n("y2", 1.0).n("x2", size)));
            }
            Fill::Stripes => {
                base(defs, None);
                defs.leaf(white(el("line").n("y1", 1.0).n("y2", 1.0).n("x2", size)));
            }
            Fill::Dots => {
                base(defs, None);
                defs.leaf(
                    el("circle")
                        .n("cx", size / 2.0)
                        .n("cy", size / 2.0)
                        .n("r", 1.5)
                        .a("fill", "#fff"),
                );
            }
        }
        defs.close();
    }

    /// Draws this style's marker centred on `(x, y)`, `r` its half-size.
    pub(crate) fn draw_marker(self, svg: &mut Svg, x: f64, y: f64, r: f64) {
        let c = self.colour.hex();
        let p = |dx: f64, dy: f64| format!("{},{}", N(x + dx), N(y + dy));
        match self.marker {
            Marker::None => {}
            Marker::Circle => svg.leaf(el("circle").n("cx", x).n("cy", y).n("r", r).a("fill", c)),
            Marker::Square => svg.leaf(
                el("rect")
                    .n("x", x - r * 0.9)
                    .n("y", y - r * 0.9)
                    .n("width", r * 1.8)
                    .n("height", r * 1.8)
                    .a("fill", c),
            ),
            Marker::Triangle => svg.leaf(
                el("polygon")
                    .a(
                        "points",
                        format!(
                            "{} {} {}",
                            p(0.0, -r * 1.2),
                            p(r * 1.1, r * 0.8),
                            p(-r * 1.1, r * 0.8)
                        ),
                    )
                    .a("fill", c),
            ),
            Marker::Diamond => svg.leaf(
                el("polygon")
                    .a(
                        "points",
                        format!(
                            "{} {} {} {}",
                            p(0.0, -r * 1.3),
                            p(r * 1.1, 0.0),
                            p(0.0, r * 1.3),
                            p(-r * 1.1, 0.0)
                        ),
                    )
                    .a("fill", c),
            ),
            Marker::Cross | Marker::Plus => {
                let d = if self.marker == Marker::Cross {
                    r
                } else {
                    r * 1.3
                };
                let path = if self.marker == Marker::Cross {
                    format!("M{}L{}M{}L{}", p(-d, -d), p(d, d), p(-d, d), p(d, -d))
                } else {
                    format!("M{}L{}M{}L{}", p(-d, 0.0), p(d, 0.0), p(0.0, -d), p(0.0, d))
                };
                svg.leaf(
                    el("path")
                        .a("d", path)
                        .a("stroke", c)
                        .n("stroke-width", 2.0)
                        .a("fill", "none"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbouring_styles_differ_in_more_than_colour() {
        for n in 0..30 {
            for m in (n + 1)..30 {
                let (a, b) = (Style::nth(n), Style::nth(m));
                let differ = [
                    a.colour != b.colour,
                    a.dash != b.dash,
                    a.marker != b.marker,
                    a.fill != b.fill,
                ]
                .iter()
                .filter(|d| **d)
                .count();
                assert!(differ >= 2, "styles {n} and {m}: {a:?} {b:?}");
            }
            let (a, b) = (Style::nth(n), Style::nth(n + 1));
            assert!(a.dash != b.dash && a.marker != b.marker && a.fill != b.fill);
        }
    }
}
