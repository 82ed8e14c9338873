//! Type sizes and text measurement. SVG cannot measure text before a viewer renders it, so
//! widths are estimated from character classes, on the generous side of common sans-serif
//! faces (DejaVu Sans, the widest usual fallback): a label given room by this estimate fits.

/// Font sizes, in user units of the chart's `viewBox`.
pub(crate) const TITLE: f64 = 17.0;
pub(crate) const HEADING: f64 = 15.0;
pub(crate) const TEXT: f64 = 13.0;
pub(crate) const SMALL: f64 = 12.0;

/// The distance between baselines of lines of `size` text.
pub(crate) fn line_height(size: f64) -> f64 {
    (size * 1.3).round()
}

/// The estimated width of `text` at font size `size`.
pub(crate) fn width(text: &str, size: f64) -> f64 {
    text.chars().map(em).sum::<f64>() * size
}

/// The width of one character, in ems.
fn em(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' | 'I' => 0.32,
        ' ' | 'f' | 't' | 'r' | '(' | ')' | '[' | ']' | '-' | '/' => 0.42,
        'm' | 'w' | 'M' | 'W' | '%' | '@' => 1.0,
        '0'..='9' => 0.64,
        c if c.is_ascii_uppercase() => 0.74,
        c if c.is_ascii() => 0.62,
        // Wide scripts and symbols: a full em.
        _ => 1.0,
    }
}

/// Breaks `text` at spaces into lines no wider than `max` (a single word wider than `max`
/// stays whole on its own line).
pub(crate) fn wrap(text: &str, size: f64, max: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let candidate = if line.is_empty() {
            word.to_owned()
        } else {
            format!("{line} {word}")
        };
        if width(&candidate, size) <= max || line.is_empty() {
            line = candidate;
        } else {
            lines.push(std::mem::take(&mut line));
            line = word.to_owned();
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// `n` and the noun, singular for one: `1 batch`, `2 batches`, `0 repeats`.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wider_text_measures_wider() {
        assert!(width("WWW", TEXT) > width("iii", TEXT) * 2.0);
        assert_eq!(width("", TEXT), 0.0);
        // Digits are a fixed width in most faces: labels of equal length measure equal.
        assert_eq!(width("10", TEXT), width("99", TEXT));
        // Generous but close: "100 ms" at 13 px is 48.4 px wide in DejaVu Sans.
        let w = width("100 ms", TEXT);
        assert!((48.4..56.0).contains(&w), "{w}");
    }

    #[test]
    fn wraps_at_spaces_within_the_width() {
        let lines = wrap("one unbounded DELETE (1.3 s)", TEXT, 110.0);
        assert!(lines.len() >= 2, "{lines:?}");
        for l in &lines {
            assert!(width(l, TEXT) <= 110.0 || !l.contains(' '), "{l}");
        }
        assert_eq!(lines.join(" "), "one unbounded DELETE (1.3 s)");
        assert_eq!(wrap("short", TEXT, 500.0), vec!["short"]);
        assert_eq!(wrap("", TEXT, 10.0), vec![""]);
        assert_eq!(wrap("unbreakable", TEXT, 5.0), vec!["unbreakable"]);
    }

    #[test]
    fn plurals() {
        assert_eq!(count(1, "batch", "batches"), "1 batch");
        assert_eq!(count(2, "batch", "batches"), "2 batches");
        assert_eq!(
            count(0, "late duplicate", "late duplicates"),
            "0 late duplicates"
        );
    }
}
