//! Configuration errors as a person reads them: the key as written in the file (sources by name,
//! not by index), where it was written (the file and line, or the environment variable), and
//! what is wrong.
//!
//! `store.sweep_intervall in idemgate.toml (line 3): unknown key (known: kind, path, ...)`

use std::path::Path;

use figment::error::{Error, Kind};
use figment::{Figment, Source};

/// Renders every error figment found, one after the other.
pub(crate) fn render(error: &Error, figment: &Figment) -> String {
    error
        .clone()
        .into_iter()
        .map(|e| one(&e, figment))
        .collect::<Vec<_>>()
        .join("; ")
}

fn one(e: &Error, figment: &Figment) -> String {
    // figment prefixes its profile ("default") to every path.
    let mut path: Vec<String> = e.path.clone();
    if let Some(profile) = &e.profile
        && path.first().is_some_and(|p| p == profile.as_str())
    {
        path.remove(0);
    }
    let field: Option<&str> = match &e.kind {
        Kind::UnknownField(field, _) => Some(field),
        Kind::MissingField(field) => Some(field),
        _ => None,
    };
    if let Some(field) = field
        && path.last().map(String::as_str) != Some(field)
    {
        path.push(field.to_owned());
    }
    let key = key_name(&path, figment);
    let what = match &e.kind {
        Kind::UnknownField(_, []) => "unknown key".to_owned(),
        Kind::UnknownField(field, known) => match nearest(field, known) {
            Some(near) => format!(
                "unknown key; did you mean {near}? (known: {})",
                known.join(", ")
            ),
            None => format!("unknown key (known: {})", known.join(", ")),
        },
        Kind::MissingField(_) => "required, but not set".to_owned(),
        Kind::InvalidType(actual, expected) => format!("expected {expected}, found {actual}"),
        // Durations (humantime-serde) say only "a duration": say what one looks like.
        Kind::InvalidValue(actual, expected) if expected == "a duration" => format!(
            "{actual} is not a duration (expected a number and a unit, such as 90s, 10m, 4h or 3d)"
        ),
        Kind::InvalidValue(actual, expected) => format!("expected {expected}, found {actual}"),
        Kind::UnknownVariant(actual, known) => {
            format!("{actual:?} is not one of {}", quoted(known))
        }
        Kind::Message(m) => m.clone(),
        other => other.to_string(),
    };
    let place = match e.metadata.as_ref().and_then(|m| m.source.as_ref()) {
        Some(Source::File(file)) => {
            let line = line_of(file, &path)
                .map(|n| format!(" (line {n})"))
                .unwrap_or_default();
            format!(" in {}{line}", file.display())
        }
        _ if e
            .metadata
            .as_ref()
            .is_some_and(|m| m.name.contains("environment")) =>
        {
            format!(" in IDEMGATE_{}", path.join("__").to_ascii_uppercase())
        }
        _ => String::new(),
    };
    if key.is_empty() {
        format!("configuration{place}: {what}")
    } else {
        format!("{key}{place}: {what}")
    }
}

/// The known name closest to `typed`, if it is a plausible typo (at most a third of it off).
fn nearest<'a>(typed: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (distance(typed, k), *k))
        .filter(|(d, k)| *d > 0 && *d <= (k.len() / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over bytes.
fn distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, x) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(x != *y));
            diagonal = above;
        }
    }
    row[b.len()]
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The key as a person wrote it: `source "stripe-live".lease` for `source.0.lease`.
fn key_name(path: &[String], figment: &Figment) -> String {
    let mut out = String::new();
    let mut at = String::new();
    for (i, part) in path.iter().enumerate() {
        let is_index = part.bytes().all(|b| b.is_ascii_digit()) && i > 0;
        if is_index {
            let name = figment
                .find_value(&at)
                .ok()
                .and_then(|v| v.into_array())
                .and_then(|items| items.into_iter().nth(part.parse().ok()?))
                .and_then(|item| item.find("name"))
                .and_then(|v| v.into_string());
            match name {
                Some(name) => out.push_str(&format!(" {name:?}")),
                None => out.push_str(&format!(" #{}", part.parse::<usize>().unwrap_or(0) + 1)),
            }
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
        if !at.is_empty() {
            at.push('.');
        }
        at.push_str(part);
    }
    out
}

/// The 1-based line in `file` where the key at `path` is written, found by walking the TOML's
/// table headers (`[a.b]`, `[[source]]`) and keys. `None` when it cannot tell.
pub(crate) fn line_of(file: &Path, path: &[String]) -> Option<usize> {
    let text = std::fs::read_to_string(file).ok()?;
    line_in(&text, path)
}

fn line_in(text: &str, path: &[String]) -> Option<usize> {
    let (last, table) = path.split_last()?;
    let mut current: Vec<String> = Vec::new();
    let mut arrays: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split("]]").next()) {
            let name = name.trim().to_owned();
            let index = arrays.entry(name.clone()).or_insert(0);
            current = name.split('.').map(str::to_owned).collect();
            current.push(index.to_string());
            *index += 1;
            if current == path {
                return Some(n + 1);
            }
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.split(']').next()) {
            // `[source.dispatch]` under `[[source]]` is a table of the array's latest element.
            current = Vec::new();
            let mut prefix = String::new();
            for part in name.trim().split('.') {
                let part = part.trim();
                if !prefix.is_empty() {
                    prefix.push('.');
                }
                prefix.push_str(part);
                current.push(part.to_owned());
                if let Some(count) = arrays.get(&prefix) {
                    current.push(count.saturating_sub(1).to_string());
                }
            }
            if current == path {
                return Some(n + 1);
            }
            continue;
        }
        if current.as_slice() == table
            && let Some((k, _)) = line.split_once('=')
            && k.trim().trim_matches('"') == last
        {
            return Some(n + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn typos_get_a_suggestion() {
        let known = ["sweep_interval", "history_interval", "kind", "path"];
        assert_eq!(nearest("sweep_intervall", &known), Some("sweep_interval"));
        assert_eq!(nearest("knd", &known), Some("kind"));
        assert_eq!(nearest("frobnicate", &known), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn tables_of_an_array_element_are_found() {
        let text = "[[source]]\nname = \"a\"\n[source.dispatch]\nconcurrency = 0\n[[source]]\nname = \"b\"\n[source.dispatch]\ntimeout = \"x\"\n";
        assert_eq!(
            line_in(text, &path("source.0.dispatch.concurrency")),
            Some(4)
        );
        assert_eq!(line_in(text, &path("source.1.dispatch.timeout")), Some(8));
    }

    #[test]
    fn lines_are_found_through_tables_and_arrays_of_tables() {
        let text = "listen = \"x\"\n[store]\n# a comment\nsweep_intervall = \"1m\"\n[store.postgres]\nschema = \"s\"\n[[source]]\nname = \"a\"\n[[source]]\nname = \"b\"\nlease = \"soon\"\n";
        assert_eq!(line_in(text, &path("listen")), Some(1));
        assert_eq!(line_in(text, &path("store.sweep_intervall")), Some(4));
        assert_eq!(line_in(text, &path("store.postgres.schema")), Some(6));
        assert_eq!(line_in(text, &path("source.1.lease")), Some(11));
        assert_eq!(line_in(text, &path("source.0.lease")), None);
        assert_eq!(line_in(text, &path("source.1")), Some(9));
    }
}
