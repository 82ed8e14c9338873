//! A cache entry's text: a done record's answer `d|first_seen|expires_at|fingerprint`, or the
//! tombstone a release leaves.

use idemgate_core::{Fingerprint, Timestamp};

/// What a cache entry holds after a release: "do not cache this event now".
pub(super) const TOMBSTONE: &str = "x";

/// A cached answer: `d|first_seen|expires_at|fingerprint`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Cached {
    pub(super) first_seen: Timestamp,
    pub(super) expires_at: Timestamp,
    /// A fingerprint a claim may carry and still be a duplicate (empty: only claims without one).
    pub(super) fingerprint: Option<Fingerprint>,
}

impl Cached {
    pub(super) fn encode(&self) -> String {
        format!(
            "d|{}|{}|{}",
            self.first_seen.as_millis(),
            self.expires_at.as_millis(),
            self.fingerprint.map(|f| f.to_hex()).unwrap_or_default()
        )
    }

    pub(super) fn parse(text: &str) -> Option<Self> {
        let mut f = text.split('|');
        (f.next()? == "d").then_some(())?;
        let first_seen = Timestamp::from_millis(f.next()?.parse().ok()?);
        let expires_at = Timestamp::from_millis(f.next()?.parse().ok()?);
        let fingerprint = match f.next()? {
            "" => None,
            hex => Some(Fingerprint::from_hex(hex).ok()?),
        };
        f.next().is_none().then_some(Self {
            first_seen,
            expires_at,
            fingerprint,
        })
    }

    /// Whether the inner store would surely answer `Duplicate` to a claim with `asked`.
    ///
    /// The entry was filled from a `Duplicate` to a claim carrying `self.fingerprint`, so the
    /// record's own fingerprint is either absent or that one: a claim with the same fingerprint,
    /// or none, is a duplicate either way; any other might be a conflict and goes to SQL.
    pub(super) fn vouches_for(&self, asked: Option<Fingerprint>) -> bool {
        asked.is_none() || asked == self.fingerprint
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_entries_round_trip() {
        let c = Cached {
            first_seen: Timestamp::from_millis(1_000),
            expires_at: Timestamp::from_millis(9_000),
            fingerprint: Some(Fingerprint([7; 32])),
        };
        assert_eq!(Cached::parse(&c.encode()), Some(c));
        let none = Cached::parse("d|1|2|").unwrap();
        assert_eq!(none.fingerprint, None);
        assert_eq!(Cached::parse(TOMBSTONE), None);
        assert_eq!(Cached::parse("d|1|2|zz"), None);
    }

    #[test]
    fn an_entry_vouches_only_for_fingerprints_it_saw() {
        let fp = |b| Some(Fingerprint([b; 32]));
        let with = Cached::parse(&format!("d|1|2|{}", "01".repeat(32))).unwrap();
        assert!(with.vouches_for(None));
        assert!(with.vouches_for(fp(1)));
        assert!(!with.vouches_for(fp(2)));
        let without = Cached::parse("d|1|2|").unwrap();
        assert!(without.vouches_for(None));
        assert!(!without.vouches_for(fp(1)));
    }
}
