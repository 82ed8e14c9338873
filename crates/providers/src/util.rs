//! Crate-private helpers shared by the schemes: hex and base64, header access, timestamps, and
//! event-id extraction (the keyed MACs are `keyed.rs`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use http::{HeaderMap, HeaderName};
use idemgate_core::{EventId, KeyError};

use crate::error::VerifyError;

pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Decodes hex in either case; `None` for an empty text, an odd length or a non-hex digit.
pub(crate) fn hex_decode(text: &str) -> Option<Vec<u8>> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

/// Standard base64 (RFC 4648 §4), padding optional on input, always written on output.
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// `None` for an empty text or invalid base64.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    BASE64.decode(text).ok().filter(|bytes| !bytes.is_empty())
}

/// A header's value as text.
///
/// # Errors
/// [`VerifyError::MissingHeader`] when absent, [`VerifyError::MalformedHeader`] when the value is
/// not UTF-8.
pub(crate) fn header<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<&'a str, VerifyError> {
    match headers.get(name) {
        None => Err(VerifyError::MissingHeader {
            header: name.clone(),
        }),
        Some(value) => value_text(value, name),
    }
}

pub(crate) fn value_text<'a>(
    value: &'a http::HeaderValue,
    name: &HeaderName,
) -> Result<&'a str, VerifyError> {
    std::str::from_utf8(value.as_bytes()).map_err(|_| malformed(name, "not UTF-8"))
}

pub(crate) fn malformed(name: &HeaderName, why: &'static str) -> VerifyError {
    VerifyError::MalformedHeader {
        header: name.clone(),
        why,
    }
}

/// Parses a Unix time in whole seconds: ASCII digits only, no sign, no fraction.
///
/// # Errors
/// [`VerifyError::MalformedHeader`] naming `name`.
pub(crate) fn parse_unix_seconds(text: &str, name: &HeaderName) -> Result<SystemTime, VerifyError> {
    let bad = || malformed(name, "timestamp is not a Unix time in whole seconds");
    if text.is_empty() || text.len() > 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let secs: u64 = text.parse().map_err(|_| bad())?;
    UNIX_EPOCH
        .checked_add(Duration::from_secs(secs))
        .ok_or_else(bad)
}

/// Rejects a signed timestamp older than `tolerance` or further than `tolerance` in the future.
///
/// # Errors
/// [`VerifyError::StaleTimestamp`] or [`VerifyError::FutureTimestamp`].
pub(crate) fn check_fresh(
    signed_at: SystemTime,
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    match now.duration_since(signed_at) {
        Ok(age) if age > tolerance => Err(VerifyError::StaleTimestamp { age }),
        Ok(_) => Ok(()),
        Err(e) if e.duration() > tolerance => Err(VerifyError::FutureTimestamp {
            ahead: e.duration(),
        }),
        Err(_) => Ok(()),
    }
}

/// Validates an RFC 6901 JSON pointer naming a field (not the whole document).
///
/// # Errors
/// A short reason.
pub(crate) fn check_json_pointer(pointer: &str) -> Result<(), &'static str> {
    if pointer.is_empty() {
        return Err("an empty pointer names the whole document, not a field");
    }
    if !pointer.starts_with('/') {
        return Err("must start with '/' (RFC 6901), e.g. /data/id");
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err("'~' must be followed by 0 or 1 (RFC 6901 escapes ~0 and ~1)");
        }
    }
    Ok(())
}

/// Reads the event id at `pointer` in a JSON body.
///
/// A string is taken as is; a number as its exact JSON text (some senders use integer ids), never
/// through a float: `18446744073709551616` and `18446744073709551617` are two ids.
///
/// # Errors
/// [`VerifyError::InvalidJson`] when the body does not parse, [`VerifyError::MissingEventId`] when
/// the field is absent or null, [`VerifyError::InvalidEventId`] for any other kind of value or an
/// id that [`EventId::new`] refuses.
pub(crate) fn event_id_from_body(body: &[u8], pointer: &str) -> Result<EventId, VerifyError> {
    use serde_json::value::RawValue;
    let missing = || VerifyError::MissingEventId {
        location: format!("body {pointer}"),
    };
    // The whole body is parsed (and so checked) once; each step below re-reads only the value
    // it descends into, keeping every value's text as the sender wrote it.
    let mut at: &RawValue = serde_json::from_slice(body).map_err(VerifyError::InvalidJson)?;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let text = at.get().trim_start();
        let next = if text.starts_with('{') {
            let mut object: std::collections::HashMap<String, &RawValue> =
                serde_json::from_str(at.get()).map_err(VerifyError::InvalidJson)?;
            object.remove(&token)
        } else if text.starts_with('[') {
            let array: Vec<&RawValue> =
                serde_json::from_str(at.get()).map_err(VerifyError::InvalidJson)?;
            // RFC 6901: an index is digits without a leading zero.
            let index = (token == "0" || !token.starts_with('0'))
                .then(|| token.parse::<usize>().ok())
                .flatten();
            index.and_then(|i| array.get(i).copied())
        } else {
            None
        };
        at = next.ok_or_else(missing)?;
    }
    let text = at.get().trim();
    match text.as_bytes().first() {
        Some(b'"') => {
            let id: String = serde_json::from_str(text).map_err(VerifyError::InvalidJson)?;
            EventId::new(id).map_err(VerifyError::InvalidEventId)
        }
        Some(b'-' | b'0'..=b'9') => EventId::new(text).map_err(VerifyError::InvalidEventId),
        _ if text == "null" => Err(missing()),
        _ => Err(VerifyError::InvalidEventId(KeyError::EventId {
            why: format!("the value at {pointer} is not a string or a number"),
        })),
    }
}

/// Reads the event id from the first parameter called `name` of a form-encoded body.
///
/// # Errors
/// [`VerifyError::MissingEventId`] when absent or empty, [`VerifyError::InvalidEventId`] when not
/// UTF-8 or when [`EventId::new`] refuses it.
pub(crate) fn event_id_from_form(body: &[u8], name: &str) -> Result<EventId, VerifyError> {
    let value = form_params(body)
        .into_iter()
        .find(|(n, _)| n == name.as_bytes())
        .map(|(_, v)| v)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| VerifyError::MissingEventId {
            location: format!("form parameter {name}"),
        })?;
    let id = String::from_utf8(value).map_err(|_| {
        VerifyError::InvalidEventId(KeyError::EventId {
            why: format!("form parameter {name} is not UTF-8"),
        })
    })?;
    EventId::new(id).map_err(VerifyError::InvalidEventId)
}

/// Reads the event id from a header.
///
/// # Errors
/// [`VerifyError::MissingEventId`] when absent, [`VerifyError::InvalidEventId`] when not UTF-8 or
/// when [`EventId::new`] refuses it.
pub(crate) fn event_id_from_header(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<EventId, VerifyError> {
    match event_id_header_text(headers, name)? {
        None => Err(VerifyError::MissingEventId {
            location: format!("header {name}"),
        }),
        Some(id) => EventId::new(id).map_err(VerifyError::InvalidEventId),
    }
}

/// A header that carries (part of) an event id, as text; `None` when absent. The sender is
/// already authenticated when this is read, so a value that is not UTF-8 is a bad event id
/// (400), not a bad signature.
///
/// # Errors
/// [`VerifyError::InvalidEventId`] when the value is not UTF-8.
pub(crate) fn event_id_header_text<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'a str>, VerifyError> {
    headers
        .get(name)
        .map(|v| {
            std::str::from_utf8(v.as_bytes()).map_err(|_| {
                VerifyError::InvalidEventId(KeyError::EventId {
                    why: format!("header {name} is not UTF-8"),
                })
            })
        })
        .transpose()
}

/// The parameters of an `application/x-www-form-urlencoded` text, in order, as bytes: split on
/// `&` (empty pieces skipped), name and value at the first `=` (a piece without one is a name with
/// an empty value), `+` as a space, `%XX` decoded (an invalid escape is kept as written).
///
/// Bytes rather than text, so that two bodies that differ in a byte that is not UTF-8 never read
/// alike.
pub(crate) fn form_params(text: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    text.split(|&b| b == b'&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| match piece.iter().position(|&b| b == b'=') {
            Some(at) => (form_decode(&piece[..at]), form_decode(&piece[at + 1..])),
            None => (form_decode(piece), Vec::new()),
        })
        .collect()
}

/// Percent-decodes one form name or value, `+` as a space.
pub(crate) fn form_decode(text: &[u8]) -> Vec<u8> {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < text.len() => match (hex(text[i + 1]), hex(text[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// Equality of two digests in time that does not depend on where they differ (`subtle`, as the
/// gateway's token check and the `hmac` crate's own verification compare).
pub(crate) fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(hex_decode(&hex_encode(&bytes)), Some(bytes));
        assert_eq!(hex_decode("ABcd"), Some(vec![0xab, 0xcd]));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode(""), None);
        assert_eq!(base64_decode(""), None);
        assert_eq!(base64_decode("aGk"), Some(b"hi".to_vec()));
        assert_eq!(base64_decode("aGk="), Some(b"hi".to_vec()));
        assert_eq!(hex_decode("zz"), None);
        assert_eq!(hex_decode("é1"), None);
    }

    #[test]
    fn numeric_ids_keep_their_exact_text() {
        let id = |body: &str, pointer: &str| {
            event_id_from_body(body.as_bytes(), pointer).map(|id| id.as_str().to_owned())
        };
        // Past u64 and past f64's integers: two ids, not one float.
        assert_eq!(
            id(r#"{"id": 18446744073709551616}"#, "/id").unwrap(),
            "18446744073709551616"
        );
        assert_eq!(
            id(r#"{"id": 18446744073709551617}"#, "/id").unwrap(),
            "18446744073709551617"
        );
        assert_eq!(
            id(r#"{"id": 9007199254740993}"#, "/id").unwrap(),
            "9007199254740993"
        );
        assert_eq!(id(r#"{"id": -12}"#, "/id").unwrap(), "-12");
        assert_eq!(
            id(r#"{"a": {"b/c": [1, {"~d": "x\"y"}]}}"#, "/a/b~1c/1/~0d").unwrap(),
            "x\"y"
        );
        assert_eq!(id(r#" [ "first", 7 ] "#, "/1").unwrap(), "7");
        assert!(matches!(
            id(r#"{"id": null}"#, "/id"),
            Err(VerifyError::MissingEventId { .. })
        ));
        assert!(matches!(
            id(r#"{"id": 1}"#, "/nope"),
            Err(VerifyError::MissingEventId { .. })
        ));
        assert!(matches!(
            id(r#"[1, 2]"#, "/01"),
            Err(VerifyError::MissingEventId { .. })
        ));
        assert!(matches!(
            id(r#"{"id": 1}"#, "/id/x"),
            Err(VerifyError::MissingEventId { .. })
        ));
        assert!(matches!(
            id(r#"{"id": true}"#, "/id"),
            Err(VerifyError::InvalidEventId(_))
        ));
        assert!(matches!(
            id(r#"{"id": {}}"#, "/id"),
            Err(VerifyError::InvalidEventId(_))
        ));
        assert!(matches!(
            id(r#"{"id": 1"#, "/id"),
            Err(VerifyError::InvalidJson(_))
        ));
    }

    #[test]
    fn json_pointers() {
        for ok in ["/id", "/data/id", "/a~0b/c~1d", "/items/0", "/"] {
            assert!(check_json_pointer(ok).is_ok(), "{ok}");
        }
        for bad in ["", "id", "/a~2", "/a~"] {
            assert!(check_json_pointer(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn freshness_is_symmetric() {
        let t = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let tol = Duration::from_secs(300);
        assert!(check_fresh(t, t + tol, tol).is_ok());
        assert!(check_fresh(t, t - tol, tol).is_ok());
        assert!(matches!(
            check_fresh(t, t + tol + Duration::from_secs(1), tol),
            Err(VerifyError::StaleTimestamp { age }) if age == Duration::from_secs(301)
        ));
        assert!(matches!(
            check_fresh(t, t - tol - Duration::from_secs(1), tol),
            Err(VerifyError::FutureTimestamp { .. })
        ));
    }

    #[test]
    fn unix_seconds() {
        let name = HeaderName::from_static("x-ts");
        assert_eq!(
            parse_unix_seconds("1614265330", &name).ok(),
            Some(UNIX_EPOCH + Duration::from_secs(1_614_265_330))
        );
        for bad in ["", "-1", "+1", "1.5", " 1", "99999999999999999999", "１"] {
            assert!(parse_unix_seconds(bad, &name).is_err(), "{bad:?}");
        }
    }
}
