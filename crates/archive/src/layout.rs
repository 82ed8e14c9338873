//! Where things live in an archive: Hive-style directories, one per source and UTC day, each
//! with its Parquet files and a `_manifest.json`.
//!
//! ```text
//! source=stripe/day=2026-11-30/part-history_2026_11-0.parquet
//! source=stripe/day=2026-11-30/part-history_2026_11-1.parquet
//! source=stripe/day=2026-11-30/_manifest.json
//! ```
//!
//! File names are deterministic (the store's partition and a number), so an export run again
//! writes the same names and overwrites what a crashed run left.

use std::fmt;
use std::time::{Duration, SystemTime};

use idemgate_core::{SourceName, Timestamp};

/// One UTC day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(i64);

const DAY_MS: i64 = 86_400_000;

impl Day {
    /// The day holding `t`.
    pub fn of(t: Timestamp) -> Self {
        Self(t.as_millis().div_euclid(DAY_MS))
    }

    /// Parses `YYYY-MM-DD`.
    ///
    /// # Errors
    /// A message saying what the text should be.
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not a day (YYYY-MM-DD)");
        if text.len() != 10 {
            return Err(bad());
        }
        let t = humantime::parse_rfc3339(&format!("{text}T00:00:00Z")).map_err(|_| bad())?;
        Ok(Self::of(Timestamp::from_system_time(t)))
    }

    /// Midnight (UTC) starting it.
    pub fn start(self) -> Timestamp {
        Timestamp::from_millis(self.0 * DAY_MS)
    }

    /// Midnight ending it.
    pub fn end(self) -> Timestamp {
        Timestamp::from_millis((self.0 + 1) * DAY_MS)
    }

    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis((self.0 * DAY_MS).max(0) as u64);
        let text = humantime::format_rfc3339(t).to_string();
        f.write_str(&text[..10])
    }
}

/// The directory of one source's day.
pub fn day_dir(source: &SourceName, day: Day) -> String {
    format!("source={}/day={day}", source.as_str())
}

/// The `n`th file of a day exported from the store's `partition`.
pub fn file_name(partition: &str, n: usize) -> String {
    format!("part-{partition}-{n}.parquet")
}

/// The manifest's name in a day's directory.
pub const MANIFEST: &str = "_manifest.json";

/// Whether `name` is a file this archive writes (and may overwrite or remove).
pub fn is_ours(name: &str) -> bool {
    name.starts_with("part-") && name.ends_with(".parquet")
}

/// `source=S` and `day=D` out of a listed directory's last component.
pub fn parse_component<'a>(component: &'a str, key: &str) -> Option<&'a str> {
    component.strip_prefix(key)?.strip_prefix('=')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_print_and_parse() {
        let d = Day::parse("2026-11-30").unwrap();
        assert_eq!(d.to_string(), "2026-11-30");
        assert_eq!(d.next().to_string(), "2026-12-01");
        assert_eq!(Day::of(d.end().minus(Duration::from_millis(1))), d);
        assert_eq!(Day::of(d.end()), d.next());
        assert!(Day::parse("2026-11-31").is_err());
        assert!(Day::parse("2026-1-3").is_err());
        assert!(Day::parse("yesterday").is_err());
    }

    #[test]
    fn paths_are_hive_style() {
        let s = SourceName::new("stripe").unwrap();
        let d = Day::parse("2026-01-02").unwrap();
        assert_eq!(day_dir(&s, d), "source=stripe/day=2026-01-02");
        assert_eq!(
            file_name("history_2026_01", 3),
            "part-history_2026_01-3.parquet"
        );
        assert!(is_ours("part-history_2026_01-3.parquet"));
        assert!(!is_ours("_manifest.json"));
        assert_eq!(parse_component("day=2026-01-02", "day"), Some("2026-01-02"));
    }
}
