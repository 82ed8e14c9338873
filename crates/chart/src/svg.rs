//! Writing SVG text: elements built attribute by attribute, every value and text escaped, and
//! open elements tracked so the output is balanced by construction.

use std::fmt::{self, Display, Write};

/// Escapes `text` for XML text and attribute values: the five special characters become
/// entities, and characters XML 1.0 cannot carry at all (most control characters) become U+FFFD.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// A coordinate or length, written with at most one decimal and no trailing `.0`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct N(pub f64);

impl Display for N {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = if self.0.is_finite() { self.0 } else { 0.0 };
        let tenths = (v * 10.0).round();
        if tenths == 0.0 {
            // No "-0".
            return f.write_str("0");
        }
        if tenths % 10.0 == 0.0 {
            write!(f, "{}", tenths / 10.0)
        } else {
            write!(f, "{:.1}", tenths / 10.0)
        }
    }
}

/// One element's start tag, attribute by attribute.
#[derive(Debug)]
pub(crate) struct El {
    name: &'static str,
    attrs: String,
}

/// Starts an element.
pub(crate) fn el(name: &'static str) -> El {
    El {
        name,
        attrs: String::new(),
    }
}

impl El {
    /// Adds an attribute; the value is escaped.
    pub(crate) fn a(mut self, key: &'static str, value: impl Display) -> Self {
        let value = value.to_string();
        let _ = write!(self.attrs, r#" {key}="{}""#, escape(&value));
        self
    }

    /// Adds an attribute when there is a value.
    pub(crate) fn opt(self, key: &'static str, value: Option<impl Display>) -> Self {
        match value {
            Some(v) => self.a(key, v),
            None => self,
        }
    }

    /// Adds a numeric attribute (a coordinate or length).
    pub(crate) fn n(self, key: &'static str, value: f64) -> Self {
        self.a(key, N(value))
    }
}

/// SVG text under construction.
#[derive(Debug, Default)]
pub(crate) struct Svg {
    out: String,
    open: Vec<&'static str>,
}

impl Svg {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// `<name .../>`.
    pub(crate) fn leaf(&mut self, e: El) {
        let _ = writeln!(self.out, "<{}{}/>", e.name, e.attrs);
    }

    /// `<name ...>`; closed by [`Svg::close`].
    pub(crate) fn open(&mut self, e: El) {
        let _ = writeln!(self.out, "<{}{}>", e.name, e.attrs);
        self.open.push(e.name);
    }

    /// Closes the innermost open element.
    pub(crate) fn close(&mut self) {
        if let Some(name) = self.open.pop() {
            let _ = writeln!(self.out, "</{name}>");
        }
    }

    /// `<name ...>text</name>`, the text escaped.
    pub(crate) fn text(&mut self, e: El, text: &str) {
        let _ = writeln!(
            self.out,
            "<{}{}>{}</{}>",
            e.name,
            e.attrs,
            escape(text),
            e.name
        );
    }

    /// `<name ...><title>tip</title></name>`: a shape with a tooltip (and an accessible name).
    pub(crate) fn with_tip(&mut self, e: El, tip: &str) {
        let _ = writeln!(
            self.out,
            "<{}{}><title>{}</title></{}>",
            e.name,
            e.attrs,
            escape(tip),
            e.name
        );
    }

    /// Appends another fragment (balanced: it was built by an [`Svg`] too).
    pub(crate) fn append(&mut self, other: Svg) {
        self.out.push_str(&other.finish());
    }

    /// The text, every element closed.
    pub(crate) fn finish(mut self) -> String {
        while !self.open.is_empty() {
            self.close();
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_quotes_and_control_characters() {
        assert_eq!(
            escape(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"
        );
        assert_eq!(escape("bell\u{7}"), "bell\u{FFFD}");
        assert_eq!(escape("tab\tok"), "tab\tok");
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(N(12.0).to_string(), "12");
        assert_eq!(N(12.34).to_string(), "12.3");
        assert_eq!(N(-0.01).to_string(), "0");
        assert_eq!(N(-3.25).to_string(), "-3.3");
        assert_eq!(N(f64::NAN).to_string(), "0");
    }

    #[test]
    fn elements_close_in_order_and_escape_attributes() {
        let mut s = Svg::new();
        s.open(el("g").a("id", "x\"y"));
        s.leaf(el("line").n("x1", 1.25));
        s.text(el("text"), "<&>");
        let out = s.finish();
        assert_eq!(
            out,
            "<g id=\"x&quot;y\">\n<line x1=\"1.3\"/>\n<text>&lt;&amp;&gt;</text>\n</g>\n"
        );
    }
}
