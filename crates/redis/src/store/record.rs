//! The text forms of records and history rows in an event's hash (see `lua/common.lua`), read
//! back into core's types.

use std::time::Duration;

use idemgate_core::{
    Fingerprint, HistoryEntry, HistoryOutcome, Holder, InstanceName, Record, RecordState, Timestamp,
};

fn opt_fingerprint(hex: &str) -> Option<Option<Fingerprint>> {
    if hex.is_empty() {
        Some(None)
    } else {
        Fingerprint::from_hex(hex).ok().map(Some)
    }
}

/// `state|attempt|nonce|fingerprint|first_seen|lease_until|expires_at`, then
/// `|holder_instance|holder_boot` when held (see `lua/common.lua`).
pub(super) fn parse_record(text: &str) -> Option<Record> {
    let mut f = text.split('|');
    let state = match f.next()? {
        "p" => RecordState::Processing,
        "d" => RecordState::Done,
        _ => return None,
    };
    let attempt = f.next()?.parse().ok()?;
    let nonce = u64::from_str_radix(f.next()?, 16).ok()?;
    let fingerprint = opt_fingerprint(f.next()?)?;
    let first_seen = Timestamp::from_millis(f.next()?.parse().ok()?);
    let lease_until = match f.next()? {
        "" => None,
        t => Some(Timestamp::from_millis(t.parse().ok()?)),
    };
    let expires_at = Timestamp::from_millis(f.next()?.parse().ok()?);
    let holder = match (f.next(), f.next()) {
        (None, None) => None,
        (Some(instance), Some(boot)) => Some(Holder {
            instance: InstanceName::new(instance).ok()?,
            boot: boot.parse().ok()?,
        }),
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
    })
}

/// `outcome|processed|attempt|at|gap|fingerprint` (see `lua/common.lua`).
pub(super) fn parse_history(text: &str) -> Option<HistoryEntry> {
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
    let fingerprint = opt_fingerprint(f.next()?)?;
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
        let rec = parse_record(&format!("p|2|00000000deadbeef|{fp}|1000|1250|5000")).unwrap();
        assert_eq!(rec.state, RecordState::Processing);
        assert_eq!(rec.attempt, 2);
        assert_eq!(rec.nonce, 0xdead_beef);
        assert_eq!(rec.fingerprint, Some(Fingerprint([0xab; 32])));
        assert_eq!(rec.lease_until, Some(Timestamp::from_millis(1250)));
        let done = parse_record("d|1|0000000000000001||1000||5000").unwrap();
        assert_eq!(
            (done.state, done.fingerprint, done.lease_until),
            (RecordState::Done, None, None)
        );
        assert!(parse_record("q|1|1||1||5").is_none());
        assert!(parse_record("d|1|1||1||5|extra").is_none());
        let held = parse_record("p|1|0000000000000001||1000|1250|5000|gw-1|3").unwrap();
        assert_eq!(
            held.holder,
            Some(Holder {
                instance: InstanceName::new("gw-1").unwrap(),
                boot: 3
            })
        );
        assert!(parse_record("p|1|1||1|2|5|gw 1|3").is_none());
        assert!(parse_record("p|1|1||1|2|5|gw-1|x").is_none());
        assert!(parse_record("p|1|1||1|2|5|gw-1|3|more").is_none());

        let row = parse_history("duplicate|0|1|2000|1000|").unwrap();
        assert_eq!(row.outcome, HistoryOutcome::Duplicate);
        assert_eq!(row.gap, Some(Duration::from_secs(1)));
        assert!(!row.processed);
        let row = parse_history("completed|1|1|2000||").unwrap();
        assert_eq!((row.attempt, row.gap, row.processed), (Some(1), None, true));
        assert!(parse_history("nope|0|1|2000||").is_none());
        assert!(parse_history("claimed|2|1|2000||").is_none());
    }
}
