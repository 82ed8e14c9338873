//! Validated keys: every record is scoped by `(source, event_id)`.

use std::fmt;

/// Why a source name, event id or fingerprint was refused. Nothing refused is ever stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The source name does not match `[a-z0-9][a-z0-9._-]{0,63}`.
    #[error("invalid source name {name:?}: {why} (expected [a-z0-9][a-z0-9._-]{{0,63}})")]
    SourceName { name: String, why: &'static str },
    /// The event id is empty, longer than 255 characters, or holds a control character.
    #[error("invalid event id: {why} (expected 1 to 255 characters, none a control character)")]
    EventId { why: String },
    /// A fingerprint that is not 64 hex digits.
    #[error("invalid fingerprint {text:?}: expected 64 hex digits (SHA-256)")]
    Fingerprint { text: String },
    /// The instance name is not 1 to 64 characters of ASCII letters, digits, '.', '_' and '-'.
    #[error(
        "invalid instance name {name:?}: {why} (expected 1 to 64 characters of ASCII letters, digits, '.', '_' and '-')"
    )]
    InstanceName { name: String, why: &'static str },
}

/// A named sender endpoint (`stripe-live`, `github-app-42`, `orders-bus`).
///
/// Matches `[a-z0-9][a-z0-9._-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceName(String);

impl SourceName {
    /// The longest source name, in bytes.
    pub const MAX_LEN: usize = 64;

    /// Validates a source name.
    ///
    /// # Errors
    /// [`KeyError::SourceName`] naming what is wrong.
    pub fn new(name: impl Into<String>) -> Result<Self, KeyError> {
        let name = name.into();
        let why = if name.is_empty() {
            Some("empty")
        } else if name.len() > Self::MAX_LEN {
            Some("longer than 64 characters")
        } else if !name.as_bytes()[0].is_ascii_lowercase() && !name.as_bytes()[0].is_ascii_digit() {
            Some("must start with a lowercase letter or a digit")
        } else if !name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        }) {
            Some("may hold only lowercase letters, digits, '.', '_' and '-'")
        } else {
            None
        };
        match why {
            Some(why) => Err(KeyError::SourceName { name, why }),
            None => Ok(Self(name)),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so width and alignment flags work in tables.
        f.pad(&self.0)
    }
}

impl std::str::FromStr for SourceName {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Self::new(s)
    }
}

/// A sender's event id: 1 to 255 characters (Unicode scalar values, so at most 1,020 bytes of
/// UTF-8), none of them a control character. Counted in characters so that the rule is what a
/// JSON Schema `maxLength` says.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(String);

impl EventId {
    /// The longest event id, in characters.
    pub const MAX_LEN: usize = 255;

    /// Validates an event id.
    ///
    /// # Errors
    /// [`KeyError::EventId`] naming what is wrong.
    pub fn new(id: impl Into<String>) -> Result<Self, KeyError> {
        let id = id.into();
        let why = if id.is_empty() {
            Some("empty".to_owned())
        } else if id.len() > Self::MAX_LEN && id.chars().count() > Self::MAX_LEN {
            Some(format!("{} characters, more than 255", id.chars().count()))
        } else {
            id.char_indices()
                .find(|(_, c)| c.is_control())
                .map(|(at, c)| format!("control character U+{:04X} at byte {at}", c as u32))
        };
        match why {
            Some(why) => Err(KeyError::EventId { why }),
            None => Ok(Self(id)),
        }
    }

    /// Validates an event id given as bytes (a header value, say).
    ///
    /// # Errors
    /// [`KeyError::EventId`] when the bytes are not UTF-8 or the text is not a valid id.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::new(text),
            Err(e) => Err(KeyError::EventId {
                why: format!("not UTF-8 (invalid byte at {})", e.valid_up_to()),
            }),
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so width and alignment flags work in tables.
        f.pad(&self.0)
    }
}

impl std::str::FromStr for EventId {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Self::new(s)
    }
}

/// The key of one record: an event id scoped by its source.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub source: SourceName,
    pub event_id: EventId,
}

impl Key {
    pub fn new(source: SourceName, event_id: EventId) -> Self {
        Self { source, event_id }
    }

    /// Validates both parts.
    ///
    /// # Errors
    /// The first [`KeyError`] found.
    pub fn parse(source: &str, event_id: &str) -> Result<Self, KeyError> {
        Ok(Self::new(SourceName::new(source)?, EventId::new(event_id)?))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.source, self.event_id)
    }
}

/// The name of one gateway process (`gw-1`, `eu-west.a`), as its configuration gives it: what
/// the claims it holds are recorded under, so that at its next start it can free them at once.
///
/// 1 to 64 characters of ASCII letters, digits, '.', '_' and '-'.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceName(String);

impl InstanceName {
    /// The longest instance name, in bytes.
    pub const MAX_LEN: usize = 64;

    /// Validates an instance name.
    ///
    /// # Errors
    /// [`KeyError::InstanceName`] naming what is wrong.
    pub fn new(name: impl Into<String>) -> Result<Self, KeyError> {
        let name = name.into();
        let why = if name.is_empty() {
            Some("empty")
        } else if name.len() > Self::MAX_LEN {
            Some("longer than 64 characters")
        } else if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            Some("may hold only ASCII letters, digits, '.', '_' and '-'")
        } else {
            None
        };
        match why {
            Some(why) => Err(KeyError::InstanceName { name, why }),
            None => Ok(Self(name)),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for InstanceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl std::str::FromStr for InstanceName {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Self::new(s)
    }
}

/// The SHA-256 of a delivery's payload. Two deliveries of one id with different fingerprints are
/// a conflict.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// Parses 64 hex digits.
    ///
    /// # Errors
    /// [`KeyError::Fingerprint`] for anything else.
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let bad = || KeyError::Fingerprint {
            text: text.chars().take(80).collect(),
        };
        if text.len() != 64 {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, pair) in text.as_bytes().chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16).ok_or_else(bad)?;
            let lo = (pair[1] as char).to_digit(16).ok_or_else(bad)?;
            out[i] = (hi * 16 + lo) as u8;
        }
        Ok(Self(out))
    }

    /// Reads 32 raw bytes, as stored.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        use fmt::Write;
        self.0.iter().fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({})", self.to_hex())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_names() {
        for ok in [
            "a",
            "stripe-live",
            "github-app-42",
            "orders.bus_v2",
            "0",
            &"a".repeat(64),
        ] {
            assert!(SourceName::new(ok).is_ok(), "{ok} should be valid");
        }
        for bad in [
            "",
            "Stripe",
            "-a",
            ".a",
            "a b",
            "a/b",
            "é",
            &"a".repeat(65),
            "a\n",
        ] {
            assert!(
                matches!(SourceName::new(bad), Err(KeyError::SourceName { .. })),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn event_ids() {
        // 255 characters, however many bytes they take.
        let wide = "é".repeat(255);
        for ok in [
            "evt_1",
            "a",
            "with space",
            "ünïcödé ✓",
            &"x".repeat(255),
            &wide,
        ] {
            assert!(EventId::new(ok).is_ok(), "{ok} should be valid");
        }
        let long = "é".repeat(256);
        for bad in [
            "",
            "a\nb",
            "tab\there",
            "\u{7f}",
            "\u{85}",
            &"x".repeat(256),
            &long,
        ] {
            assert!(
                matches!(EventId::new(bad), Err(KeyError::EventId { .. })),
                "{bad:?} should be refused"
            );
        }
        let err = EventId::from_bytes(b"ok\xff").unwrap_err();
        assert!(err.to_string().contains("not UTF-8"), "{err}");
    }

    #[test]
    fn instance_names() {
        for ok in ["a", "gw-1", "EU-West.a_2", "0", "...", &"A".repeat(64)] {
            assert!(InstanceName::new(ok).is_ok(), "{ok} should be valid");
        }
        for bad in ["", "a b", "a/b", "gw:1", "é", "a\n", &"a".repeat(65)] {
            let err = InstanceName::new(bad).unwrap_err();
            assert!(matches!(err, KeyError::InstanceName { .. }), "{bad:?}");
            assert!(
                err.to_string()
                    .contains("1 to 64 characters of ASCII letters, digits"),
                "{err}"
            );
        }
        assert_eq!(
            InstanceName::new("a b").unwrap_err().to_string(),
            "invalid instance name \"a b\": may hold only ASCII letters, digits, '.', '_' and '-' \
             (expected 1 to 64 characters of ASCII letters, digits, '.', '_' and '-')"
        );
    }

    #[test]
    fn fingerprint_hex_round_trip() {
        let hex = "00ff10ab".repeat(8);
        let fp = Fingerprint::from_hex(&hex).unwrap();
        assert_eq!(fp.to_hex(), hex);
        assert!(Fingerprint::from_hex("00ff").is_err());
        assert!(Fingerprint::from_hex(&"zz".repeat(32)).is_err());
    }
}
