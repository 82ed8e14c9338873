//! The text forms of records and history rows in an event's hash (see `lua/common.lua`), read
//! back into core's types.

use std::time::Duration;

use idemgate_core::{
    Fingerprint, HistoryEntry, HistoryOutcome, Holder, InstanceName, Record, RecordResult,
    RecordState, StoredResult, Timestamp,
};

/// A stored fingerprint: empty for none, `=` for the event's own (`g`), else 64 hex digits.
fn opt_fingerprint(stored: &str, g: Option<&str>) -> Option<Option<Fingerprint>> {
    let hex = match stored {
        "" => return Some(None),
        "=" => g?,
        hex => hex,
    };
    Fingerprint::from_hex(hex).ok().map(Some)
}

/// The record `r`, with the event's fingerprint `g` and holder `o` stored beside it (see
/// `lua/common.lua`): `state|attempt|nonce|fingerprint|first_seen|lease_until|expires_at`, held
/// by `o` (`instance|boot`, empty for nobody). The state is `p` (processing), `d` (done) or `c`
/// (done by a completion). Records of the earlier layout hold their
/// fingerprint themselves and their holder as two more fields, `|holder_instance|holder_boot`.
pub(super) fn parse_record(text: &str, g: Option<&str>, o: Option<&str>) -> Option<Record> {
    let mut f = text.split('|');
    let (state, completed) = match f.next()? {
        "p" => (RecordState::Processing, false),
        "d" => (RecordState::Done, false),
        "c" => (RecordState::Done, true),
        _ => return None,
    };
    let attempt = f.next()?.parse().ok()?;
    let nonce = u64::from_str_radix(f.next()?, 16).ok()?;
    let fingerprint = opt_fingerprint(f.next()?, g)?;
    let first_seen = Timestamp::from_millis(f.next()?.parse().ok()?);
    let lease_until = match f.next()? {
        "" => None,
        t => Some(Timestamp::from_millis(t.parse().ok()?)),
    };
    let expires_at = Timestamp::from_millis(f.next()?.parse().ok()?);
    let holder = match (f.next(), f.next()) {
        (None, None) => match o {
            None | Some("") => None,
            Some(o) => {
                let (instance, boot) = o.split_once('|')?;
                Some(holder(instance, boot)?)
            }
        },
        (Some(instance), Some(boot)) => Some(holder(instance, boot)?),
        _ => return None,
    };
    f.next().is_none().then_some(Record {
        state,
        attempt,
        nonce,
        fingerprint,
        first_seen,
        lease_until,
        expires_at,
        holder,
        completed,
        // Beside the record, under its own key (`parse_result`).
        result: RecordResult::None,
    })
}

/// A result key's value (see `lua/common.lua`): the nonce of the record it was written for
/// (16 hex digits), then `s` and the stored result's bytes, or `w` and a withheld result's
/// decimal size. A value written for another record (an earlier one of the key, whose key has not
/// expired yet at the very millisecond it could) is no result of `nonce`'s record:
/// [`RecordResult::None`]. `None` for a value that is not in that layout.
pub(super) fn parse_result(value: &[u8], nonce: u64) -> Option<RecordResult> {
    let (tag, rest) = value.split_at_checked(16)?;
    let owner = u64::from_str_radix(std::str::from_utf8(tag).ok()?, 16).ok()?;
    let (kind, kept) = rest.split_first()?;
    let result = match kind {
        b's' => RecordResult::Stored(StoredResult::decode(kept).ok()?),
        b'w' => RecordResult::Withheld {
            size: std::str::from_utf8(kept).ok()?.parse().ok()?,
        },
        _ => return None,
    };
    Some(if owner == nonce {
        result
    } else {
        RecordResult::None
    })
}

fn holder(instance: &str, boot: &str) -> Option<Holder> {
    Some(Holder {
        instance: InstanceName::new(instance).ok()?,
        boot: boot.parse().ok()?,
    })
}

/// `outcome|processed|attempt|at|gap|fingerprint` (see `lua/common.lua`), with the event's
/// fingerprint `g` (a row's `=`).
pub(super) fn parse_history(text: &str, g: Option<&str>) -> Option<HistoryEntry> {
    let mut f = text.split('|');
    let outcome = HistoryOutcome::parse(f.next()?)?;
    let processed = match f.next()? {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    let attempt = match f.next()? {
        "" => None,
        a => Some(a.parse().ok()?),
    };
    let at = Timestamp::from_millis(f.next()?.parse().ok()?);
    let gap = match f.next()? {
        "" => None,
        g => Some(Duration::from_millis(g.parse().ok()?)),
    };
    let fingerprint = opt_fingerprint(f.next()?, g)?;
    f.next().is_none().then_some(HistoryEntry {
        outcome,
        processed,
        attempt,
        at,
        gap,
        fingerprint,
        note: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_history_rows_parse() {
        let fp = "ab".repeat(32);
        let rec = parse_record(
            &format!("p|2|00000000deadbeef|{fp}|1000|1250|5000"),
            None,
            None,
        )
        .unwrap();
        assert_eq!(rec.state, RecordState::Processing);
        assert_eq!(rec.attempt, 2);
        assert_eq!(rec.nonce, 0xdead_beef);
        assert_eq!(rec.fingerprint, Some(Fingerprint([0xab; 32])));
        assert_eq!(rec.lease_until, Some(Timestamp::from_millis(1250)));
        let done = parse_record("d|1|0000000000000001||1000||5000", None, None).unwrap();
        assert_eq!(
            (done.state, done.fingerprint, done.lease_until),
            (RecordState::Done, None, None)
        );
        assert!(parse_record("q|1|1||1||5", None, None).is_none());
        assert!(parse_record("d|1|1||1||5|extra", None, None).is_none());
        let held = parse_record("p|1|0000000000000001||1000|1250|5000|gw-1|3", None, None).unwrap();
        assert_eq!(
            held.holder,
            Some(Holder {
                instance: InstanceName::new("gw-1").unwrap(),
                boot: 3
            })
        );
        assert!(parse_record("p|1|1||1|2|5|gw 1|3", None, None).is_none());
        assert!(parse_record("p|1|1||1|2|5|gw-1|x", None, None).is_none());
        assert!(parse_record("p|1|1||1|2|5|gw-1|3|more", None, None).is_none());

        let row = parse_history("duplicate|0|1|2000|1000|", None).unwrap();
        assert_eq!(row.outcome, HistoryOutcome::Duplicate);
        assert_eq!(row.gap, Some(Duration::from_secs(1)));
        assert!(!row.processed);
        let row = parse_history("completed|1|1|2000||", None).unwrap();
        assert_eq!((row.attempt, row.gap, row.processed), (Some(1), None, true));
        assert!(parse_history("nope|0|1|2000||", None).is_none());
        assert!(parse_history("claimed|2|1|2000||", None).is_none());
    }

    #[test]
    fn a_result_reads_only_as_its_own_records() {
        let result = StoredResult::new(201).body(b"paid".to_vec());
        let mut value = b"00000000deadbeefs".to_vec();
        value.extend_from_slice(&result.encode());
        assert_eq!(
            parse_result(&value, 0xdead_beef),
            Some(RecordResult::Stored(result))
        );
        // Written for an earlier record of the key: not this one's.
        assert_eq!(parse_result(&value, 0xdead_beee), Some(RecordResult::None));
        assert_eq!(
            parse_result(b"00000000deadbeefw70000", 0xdead_beef),
            Some(RecordResult::Withheld { size: 70_000 })
        );
        for bad in [
            &b""[..],
            b"00000000deadbeef",
            b"00000000deadbeefx1",
            b"00000000deadbeefwlots",
            b"00000000deadbeefs",
            b"zz000000deadbeefw1",
        ] {
            assert_eq!(parse_result(bad, 0xdead_beef), None, "{bad:?}");
        }
    }

    /// The layout that keeps every value within a listpack's 64 bytes: the fingerprint in `g`
    /// (a record's or row's `=`), the holder in `o`.
    #[test]
    fn the_compact_layout_reads_through_g_and_o() {
        let fp = "cd".repeat(32);
        let text = "p|3|00000000deadbeef|=|1796157549009|1796157609009|1796158149009";
        assert!(text.len() <= 64, "{} bytes", text.len());
        let rec = parse_record(text, Some(&fp), Some("gw-1|7")).unwrap();
        assert_eq!(rec.fingerprint, Some(Fingerprint([0xcd; 32])));
        assert_eq!(
            rec.holder,
            Some(Holder {
                instance: InstanceName::new("gw-1").unwrap(),
                boot: 7
            })
        );
        let rec = parse_record(text, Some(&fp), Some("")).unwrap();
        assert_eq!(rec.holder, None);
        // "=" without g is unreadable, not a record without a fingerprint.
        assert!(parse_record(text, None, None).is_none());
        assert!(parse_record(text, Some(&fp), Some("gw 1|7")).is_none());
        let row = parse_history("conflict|0|1|2000|5|=", Some(&fp)).unwrap();
        assert_eq!(row.fingerprint, Some(Fingerprint([0xcd; 32])));
        let other = "ef".repeat(32);
        let row = parse_history(&format!("conflict|0|1|2000|5|{other}"), Some(&fp)).unwrap();
        assert_eq!(row.fingerprint, Some(Fingerprint([0xef; 32])));
        assert!(parse_history("duplicate|0|1|2000|5|=", None).is_none());
    }
}
