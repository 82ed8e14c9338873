//! A small well-formedness check for the SVG this crate writes (and for tests of the programs
//! that embed it): one root element, tags that nest and close by name, attributes quoted and
//! not repeated, and text and values with no bare `<` or `&` (only the five named entities and
//! character references). No DTDs or CDATA: this crate writes neither.

use std::fmt;

/// Why a text is not well-formed XML, and where (a byte offset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XmlError {
    pub offset: usize,
    pub what: String,
}

impl fmt::Display for XmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not well-formed at byte {}: {}", self.offset, self.what)
    }
}

impl std::error::Error for XmlError {}

/// Checks that `text` is one well-formed XML element (an optional `<?xml ...?>` prolog,
/// comments and whitespace around it allowed).
///
/// # Errors
///
/// The first problem found, with its byte offset.
pub fn check(text: &str) -> Result<(), XmlError> {
    let err = |offset: usize, what: String| Err(XmlError { offset, what });
    let bytes = text.as_bytes();
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        if bytes[i] != b'<' {
            // Character data runs to the next '<'.
            let end = text[i..].find('<').map_or(text.len(), |n| i + n);
            let data = &text[i..end];
            if stack.is_empty() && !data.trim().is_empty() {
                return err(i, "text outside the root element".into());
            }
            check_data(data, i)?;
            i = end;
            continue;
        }
        let rest = &text[i..];
        if let Some(body) = rest.strip_prefix("<!--") {
            let Some(end) = body.find("-->") else {
                return err(i, "comment never closed".into());
            };
            i += 4 + end + 3;
            continue;
        }
        if rest.starts_with("<?") {
            let Some(end) = rest.find("?>") else {
                return err(i, "processing instruction never closed".into());
            };
            if roots > 0 || !stack.is_empty() {
                return err(i, "processing instruction after the root started".into());
            }
            i += end + 2;
            continue;
        }
        if rest.starts_with("<!") {
            return err(i, "DTDs and CDATA are not expected".into());
        }
        let Some(end) = find_tag_end(rest) else {
            return err(i, "tag never closed".into());
        };
        let tag = &rest[1..end];
        if let Some(name) = tag.strip_prefix('/') {
            let name = name.trim_end();
            match stack.pop() {
                Some(open) if open == name => {}
                Some(open) => return err(i, format!("</{name}> closes <{open}>")),
                None => return err(i, format!("</{name}> closes nothing")),
            }
        } else {
            let empty = tag.ends_with('/');
            let tag = tag.strip_suffix('/').unwrap_or(tag);
            let name_len = tag.find(|c: char| c.is_whitespace()).unwrap_or(tag.len());
            let name = &tag[..name_len];
            if !is_name(name) {
                return err(i, format!("bad element name {name:?}"));
            }
            check_attributes(&tag[name_len..], i + 1 + name_len)?;
            if stack.is_empty() {
                roots += 1;
                if roots > 1 {
                    return err(i, format!("a second root element <{name}>"));
                }
            }
            if !empty {
                stack.push(name);
            }
        }
        i += end + 1;
    }
    if let Some(open) = stack.last() {
        return err(text.len(), format!("<{open}> never closed"));
    }
    if roots == 0 {
        return err(0, "no root element".into());
    }
    Ok(())
}

/// The index of the `>` ending the tag at the start of `rest`, skipping quoted values.
fn find_tag_end(rest: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in rest.char_indices().skip(1) {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '>') => return Some(i),
            (None, '<') => return None,
            _ => {}
        }
    }
    None
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '-' | '.'))
}

fn check_attributes(mut text: &str, mut offset: usize) -> Result<(), XmlError> {
    let mut seen: Vec<&str> = Vec::new();
    loop {
        let trimmed = text.trim_start();
        offset += text.len() - trimmed.len();
        text = trimmed;
        if text.is_empty() {
            return Ok(());
        }
        let Some(eq) = text.find('=') else {
            return Err(XmlError {
                offset,
                what: format!("attribute without a value: {text:?}"),
            });
        };
        let name = text[..eq].trim_end();
        if !is_name(name) {
            return Err(XmlError {
                offset,
                what: format!("bad attribute name {name:?}"),
            });
        }
        if seen.contains(&name) {
            return Err(XmlError {
                offset,
                what: format!("attribute {name} given twice"),
            });
        }
        seen.push(name);
        let after = text[eq + 1..].trim_start();
        let value_at = offset + (text.len() - after.len());
        let Some(q) = after.chars().next().filter(|c| matches!(c, '"' | '\'')) else {
            return Err(XmlError {
                offset: value_at,
                what: format!("attribute {name} is not quoted"),
            });
        };
        let Some(close) = after[1..].find(q) else {
            return Err(XmlError {
                offset: value_at,
                what: format!("attribute {name} never closes its quote"),
            });
        };
        let value = &after[1..1 + close];
        if value.contains('<') {
            return Err(XmlError {
                offset: value_at,
                what: format!("'<' in the value of {name}"),
            });
        }
        check_data(value, value_at + 1)?;
        let consumed = text.len() - after.len() + close + 2;
        offset += consumed;
        text = &text[consumed..];
        if !text.is_empty() && !text.starts_with(char::is_whitespace) {
            return Err(XmlError {
                offset,
                what: format!("no space after the value of {name}"),
            });
        }
    }
}

/// Text may hold `&` only as an entity or a character reference.
fn check_data(data: &str, offset: usize) -> Result<(), XmlError> {
    let mut rest = data;
    let mut at = offset;
    while let Some(amp) = rest.find('&') {
        let after = &rest[amp + 1..];
        let ok = after.find(';').is_some_and(|semi| {
            let entity = &after[..semi];
            matches!(entity, "amp" | "lt" | "gt" | "quot" | "apos")
                || entity
                    .strip_prefix("#x")
                    .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
                || entity
                    .strip_prefix('#')
                    .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
        });
        if !ok {
            return Err(XmlError {
                offset: at + amp,
                what: "'&' that starts no entity".into(),
            });
        }
        at += amp + 1;
        rest = after;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn accepts_well_formed_documents() {
        for ok in [
            "<svg/>",
            "<svg a=\"1\" b='2'><g><text>x &amp; y &#38; &#x26;</text></g></svg>\n",
            "<?xml version=\"1.0\"?>\n<!-- c --><svg><title>a &gt; b</title></svg>",
            "<svg><text a=\"x > y\">t</text></svg>",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn refuses_what_a_parser_would() {
        for (bad, says) in [
            ("<svg><g></svg>", "closes <g>"),
            ("<svg><g>", "never closed"),
            ("<svg></svg><svg/>", "second root"),
            ("<svg>a & b</svg>", "'&'"),
            ("<svg><text>1 < 2</text></svg>", "tag"),
            ("<svg a=1/>", "not quoted"),
            ("<svg a=\"1\" a=\"2\"/>", "twice"),
            ("<svg a=\"1\"b=\"2\"/>", "no space"),
            ("<svg a=\"x<y\"/>", "'<'"),
            ("<svg></g>", "closes <svg>"),
            ("text<svg/>", "outside"),
            ("", "no root"),
        ] {
            let e = check(bad).expect_err(bad);
            assert!(e.what.contains(says), "{bad}: {e}");
        }
    }
}
