//! Configuration errors as a person reads them: the key as written in the file (sources by name,
//! not by index), where it was written (the file and line, or the environment variable), and
//! what is wrong.
//!
//! `store.sweep_intervall in idemgate.toml (line 3): unknown key (known: kind, path, ...)`

use std::path::Path;

use figment::error::{Error, Kind};
use figment::{Figment, Source};

/// Most errors one extraction reports before it gives up.
const MOST_ERRORS: usize = 32;

/// Deserializes `figment` into `T`, reporting every error, not only the first: serde stops at
/// the first (an unknown key, a value of the wrong type), so each one found is rendered, its key
/// taken out of the data, and the rest deserialized again, until nothing more is wrong (or a
/// missing key, which no removal mends). Every error is located in the original `figment`.
///
/// # Errors
/// Each error, rendered as a person reads it, in the order found.
pub(crate) fn extract_all<T: serde::de::DeserializeOwned>(
    figment: &Figment,
) -> Result<T, Vec<String>> {
    let mut errors: Vec<String> = Vec::new();
    let mut seen: Vec<Vec<String>> = Vec::new();
    let mut current = figment.clone();
    while errors.len() < MOST_ERRORS {
        let e = match current.extract::<T>() {
            Ok(value) if errors.is_empty() => return Ok(value),
            Ok(_) => break,
            Err(e) => e,
        };
        let mut removable = Vec::new();
        for one in e.clone() {
            let path = key_path(&one);
            if seen.contains(&path) {
                continue;
            }
            errors.push(render_one(&one, figment));
            if !matches!(one.kind, Kind::MissingField(_)) {
                removable.push(path.clone());
            }
            seen.push(path);
        }
        match without(&current, &removable) {
            Some(next) if !removable.is_empty() => current = next,
            _ => break,
        }
    }
    Err(errors)
}

/// `figment`'s data without the keys at `paths` (as [`key_path`] gives them).
fn without(figment: &Figment, paths: &[Vec<String>]) -> Option<Figment> {
    use figment::Provider;
    use figment::value::{Dict, Value};
    let mut data = figment.data().ok()?;
    let profile = figment.profile().clone();
    let dict = data.get_mut(&profile)?;
    fn remove(value: &mut Value, path: &[String]) -> bool {
        let Some((first, rest)) = path.split_first() else {
            return false;
        };
        match value {
            Value::Dict(_, dict) if rest.is_empty() => dict.remove(first).is_some(),
            Value::Dict(_, dict) => dict.get_mut(first).is_some_and(|v| remove(v, rest)),
            Value::Array(_, items) => first
                .parse::<usize>()
                .ok()
                .and_then(|i| items.get_mut(i))
                .is_some_and(|v| {
                    if rest.is_empty() {
                        false
                    } else {
                        remove(v, rest)
                    }
                }),
            _ => false,
        }
    }
    let mut root = Value::from(std::mem::take(dict));
    let removed = paths.iter().filter(|p| remove(&mut root, p)).count() > 0;
    if !removed {
        return None;
    }
    let dict: Dict = match root {
        Value::Dict(_, dict) => dict,
        _ => return None,
    };
    Some(Figment::from(figment::providers::Serialized::from(
        dict, profile,
    )))
}

/// The path of the key an error is about, without figment's profile, with the field of an
/// unknown or missing key (`["source", "0", "leese"]`).
fn key_path(e: &Error) -> Vec<String> {
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
    path
}

/// Where the value at `path` of `figment` was written: `in FILE (line N)`, `in IDEMGATE_...`,
/// or nothing when it cannot tell.
pub(crate) fn place(figment: &Figment, path: &[String]) -> Option<String> {
    let metadata = metadata_at(figment, path)?;
    match metadata.source.as_ref() {
        Some(Source::File(file)) => {
            let line = line_of(file, path)
                .map(|n| format!(" (line {n})"))
                .unwrap_or_default();
            Some(format!("in {}{line}", file.display()))
        }
        _ if metadata.name.contains("environment") => {
            Some(format!("in the environment variable {}", env_name(path)))
        }
        _ => None,
    }
}

/// The metadata (where it was written) of the value at `path`, array elements included
/// (`source.1.lease`; figment's own lookup goes through tables only).
pub(crate) fn metadata_at<'f>(
    figment: &'f Figment,
    path: &[String],
) -> Option<&'f figment::Metadata> {
    use figment::value::Value;
    let (first, rest) = path.split_first()?;
    let mut value = figment.find_value(first).ok()?;
    for part in rest {
        value = match value {
            Value::Dict(_, mut dict) => dict.remove(part)?,
            Value::Array(_, mut items) => {
                let i: usize = part.parse().ok()?;
                if i >= items.len() {
                    return None;
                }
                items.swap_remove(i)
            }
            _ => return None,
        };
    }
    figment.get_metadata(value.tag())
}

/// The environment variable that sets the key at `path`.
pub(crate) fn env_name(path: &[String]) -> String {
    format!("IDEMGATE_{}", path.join("__").to_ascii_uppercase())
}

fn render_one(e: &Error, figment: &Figment) -> String {
    let path = key_path(e);
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
    // Where the value was written, read off the original figment (the error's own metadata is
    // a re-extraction's, after earlier errors' keys were taken out); a missing key has no value,
    // so its table's place, and failing that the error's own.
    let place = place(figment, &path)
        .or_else(|| place(figment, path.split_last()?.1).filter(|_| path.len() > 1))
        .or_else(
            || match e.metadata.as_ref().and_then(|m| m.source.as_ref()) {
                Some(Source::File(file)) => Some(format!("in {}", file.display())),
                _ if e
                    .metadata
                    .as_ref()
                    .is_some_and(|m| m.name.contains("environment")) =>
                {
                    Some(format!("in the environment variable {}", env_name(&path)))
                }
                _ => None,
            },
        )
        .map(|p| format!(" {p}"))
        .unwrap_or_default();
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
