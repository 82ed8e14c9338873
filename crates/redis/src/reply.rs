//! What the Lua scripts answer, decoded in one place.
//!
//! Every script that decides something (`src/lua/`) answers a table whose first element names
//! what happened (`claimed`, `stale`, ...), followed by that answer's values in a fixed order.
//! Each script's answer becomes one enum here; a name this build does not know, or values that
//! do not fit it, is a [`RedisError::Reply`] naming the script and what it said.

use std::time::Duration;

use idemgate_core::Timestamp;
use redis::Value;

use crate::error::RedisError;

/// What `claim.lua` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Claim {
    /// A first claim (`claimed`).
    Claimed { attempt: u32 },
    /// A takeover of a lapsed lease (`reclaimed`).
    Reclaimed { attempt: u32 },
    /// A late duplicate claimed again under the `flag` policy (`late_claimed`).
    LateClaimed { attempt: u32, first_seen: Timestamp },
    /// A late duplicate refused under the `reject` policy (`late_rejected`).
    LateRejected { first_seen: Timestamp },
    /// A done record (`duplicate`).
    Duplicate { first_seen: Timestamp },
    /// A live lease (`in_flight`): the wait until it ends.
    InFlight { retry_after: Duration },
    /// Another fingerprint (`conflict`).
    Conflict { first_seen: Timestamp },
}

/// `claim.lua`'s whole answer: `{name, n, gap, expires_at, late_first_seen, stream_failed}`,
/// with -1 where a value is absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClaimReply {
    pub(crate) claim: Claim,
    /// Since the event's first receipt, for the history row (absent for a first claim).
    pub(crate) gap: Option<u64>,
    pub(crate) expires_at: Timestamp,
    /// The script could not add its row to the source's stream.
    pub(crate) stream_failed: bool,
}

impl ClaimReply {
    pub(crate) fn decode(value: Value) -> Result<Self, RedisError> {
        let mut r = Fields::new("claim script", value)?;
        let name = r.name()?;
        let n = r.int()?;
        let gap = r.opt_int()?;
        let expires_at = Timestamp::from_millis(r.int()?);
        let late = r.opt_int()?.map(Timestamp::from_millis);
        let stream_failed = r.flag()?;
        r.end()?;
        let attempt = || r.convert(n);
        let at = Timestamp::from_millis(n);
        let claim = match name.as_str() {
            "claimed" => Claim::Claimed {
                attempt: attempt()?,
            },
            "reclaimed" => Claim::Reclaimed {
                attempt: attempt()?,
            },
            "late_claimed" => Claim::LateClaimed {
                attempt: attempt()?,
                first_seen: late.ok_or_else(|| r.bad())?,
            },
            "late_rejected" => Claim::LateRejected { first_seen: at },
            "duplicate" => Claim::Duplicate { first_seen: at },
            "in_flight" => Claim::InFlight {
                retry_after: Duration::from_millis(r.convert(n)?),
            },
            "conflict" => Claim::Conflict { first_seen: at },
            _ => return Err(r.unknown(&name)),
        };
        Ok(Self {
            claim,
            gap: gap.and_then(|g| u64::try_from(g).ok()),
            expires_at,
            stream_failed,
        })
    }
}

/// What `finish.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// `{completed, stream_failed}`: the record is done.
    Completed { stream_failed: bool },
    /// `{released, stream_failed}`: the record is gone.
    Released { stream_failed: bool },
    /// `{already_done}`: completing a record this token already completed; nothing written.
    AlreadyDone,
    /// `{completed_claim}`: a release of a record this token completed; refused, nothing
    /// written.
    CompletedClaim,
    /// `{stale}`: the token does not hold the live record.
    Stale,
}

impl Finish {
    pub(crate) fn decode(value: Value) -> Result<Self, RedisError> {
        let mut r = Fields::new("finish script", value)?;
        let name = r.name()?;
        let finish = match name.as_str() {
            "completed" => Self::Completed {
                stream_failed: r.flag()?,
            },
            "released" => Self::Released {
                stream_failed: r.flag()?,
            },
            "already_done" => Self::AlreadyDone,
            "completed_claim" => Self::CompletedClaim,
            "stale" => Self::Stale,
            _ => return Err(r.unknown(&name)),
        };
        r.end()?;
        Ok(finish)
    }
}

/// What `renew.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renew {
    /// `{renewed, lease_until}`.
    Renewed { lease_until: Timestamp },
    /// `{already_done, expires_at}`: the token's record is done; nothing written.
    AlreadyDone { expires_at: Timestamp },
    /// `{stale}`: the token does not hold the live record.
    Stale,
}

impl Renew {
    pub(crate) fn decode(value: Value) -> Result<Self, RedisError> {
        let mut r = Fields::new("renew script", value)?;
        let name = r.name()?;
        let renew = match name.as_str() {
            "renewed" => Self::Renewed {
                lease_until: Timestamp::from_millis(r.int()?),
            },
            "already_done" => Self::AlreadyDone {
                expires_at: Timestamp::from_millis(r.int()?),
            },
            "stale" => Self::Stale,
            _ => return Err(r.unknown(&name)),
        };
        r.end()?;
        Ok(renew)
    }
}

/// What `abandon.lua` did to one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abandon {
    /// `{abandoned, attempt, stream_failed}`: the lease was ended and the row written.
    Abandoned { attempt: u32, stream_failed: bool },
    /// `{untouched}`: the record is not a live claim of an earlier boot.
    Untouched,
}

impl Abandon {
    pub(crate) fn decode(value: Value) -> Result<Self, RedisError> {
        let mut r = Fields::new("abandon script", value)?;
        let name = r.name()?;
        let abandon = match name.as_str() {
            "abandoned" => {
                let attempt = r.int()?;
                Self::Abandoned {
                    attempt: r.convert(attempt)?,
                    stream_failed: r.flag()?,
                }
            }
            "untouched" => Self::Untouched,
            _ => return Err(r.unknown(&name)),
        };
        r.end()?;
        Ok(abandon)
    }
}

/// What `boot.lua` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BootReply {
    /// `{booted, boot, started_at}`: the new boot.
    Booted { boot: u64, started_at: Timestamp },
    /// `{live, boot, started_at, host, pid, alive_until, now, process}`: the latest boot is
    /// alive.
    Live {
        boot: u64,
        started_at: Timestamp,
        host: String,
        pid: u32,
        alive_until: Timestamp,
        now: Timestamp,
        process: String,
    },
    /// `{until, alive_until}`: the lease's new end.
    Until(Timestamp),
    /// `{superseded, latest}`: the boot named is not the latest (0: there is none).
    Superseded(u64),
}

impl BootReply {
    pub(crate) fn decode(value: Value) -> Result<Self, RedisError> {
        let mut r = Fields::new("boot script", value)?;
        let name = r.name()?;
        let at = |n: i64| Timestamp::from_millis(n);
        let reply = match name.as_str() {
            "booted" => Self::Booted {
                boot: r.int().and_then(|n| r.convert(n))?,
                started_at: at(r.int()?),
            },
            "live" => Self::Live {
                boot: r.int().and_then(|n| r.convert(n))?,
                started_at: at(r.int()?),
                host: r.name()?,
                pid: r.int().and_then(|n| r.convert(n))?,
                alive_until: at(r.int()?),
                now: at(r.int()?),
                process: r.name()?,
            },
            "until" => Self::Until(at(r.int()?)),
            "superseded" => Self::Superseded(r.int().and_then(|n| r.convert(n))?),
            _ => return Err(r.unknown(&name)),
        };
        r.end()?;
        Ok(reply)
    }
}

/// What the tier's `fill.lua` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    /// `{cached}`.
    Cached,
    /// `{released}`: a release's tombstone is in place; nothing cached.
    Released,
    /// `{expiring}`: the answer would expire before it is written; nothing cached.
    Expiring,
}

impl Fill {
    pub(crate) fn decode(value: Value) -> Result<Self, RedisError> {
        let mut r = Fields::new("fill script", value)?;
        let name = r.name()?;
        let fill = match name.as_str() {
            "cached" => Self::Cached,
            "released" => Self::Released,
            "expiring" => Self::Expiring,
            _ => return Err(r.unknown(&name)),
        };
        r.end()?;
        Ok(fill)
    }
}

/// One answer's elements, read in order; every failure names the script and the whole answer.
struct Fields {
    script: &'static str,
    /// The answer as received, for messages.
    text: String,
    items: std::vec::IntoIter<Value>,
}

impl Fields {
    fn new(script: &'static str, value: Value) -> Result<Self, RedisError> {
        let text = format!("{value:?}");
        match value {
            Value::Array(items) => Ok(Self {
                script,
                text,
                items: items.into_iter(),
            }),
            _ => Err(RedisError::reply(script, text)),
        }
    }

    fn bad(&self) -> RedisError {
        RedisError::reply(self.script, self.text.clone())
    }

    fn unknown(&self, name: &str) -> RedisError {
        RedisError::reply(
            self.script,
            format!("unknown reply {name:?} (in {})", self.text),
        )
    }

    fn next(&mut self) -> Result<Value, RedisError> {
        self.items.next().ok_or_else(|| self.bad())
    }

    fn name(&mut self) -> Result<String, RedisError> {
        let value = self.next()?;
        redis::from_redis_value(value).map_err(|_| self.bad())
    }

    fn int(&mut self) -> Result<i64, RedisError> {
        match self.next()? {
            Value::Int(n) => Ok(n),
            _ => Err(self.bad()),
        }
    }

    /// An integer, with -1 for none.
    fn opt_int(&mut self) -> Result<Option<i64>, RedisError> {
        self.int().map(|n| (n >= 0).then_some(n))
    }

    /// 1 or 0.
    fn flag(&mut self) -> Result<bool, RedisError> {
        match self.int()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.bad()),
        }
    }

    fn convert<T: TryFrom<i64>>(&self, n: i64) -> Result<T, RedisError> {
        T::try_from(n).map_err(|_| self.bad())
    }

    /// No element is left over.
    fn end(&mut self) -> Result<(), RedisError> {
        match self.items.next() {
            None => Ok(()),
            Some(_) => Err(self.bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: &[Result<&str, i64>]) -> Value {
        Value::Array(
            items
                .iter()
                .map(|i| match i {
                    Ok(s) => Value::BulkString(s.as_bytes().to_vec()),
                    Err(n) => Value::Int(*n),
                })
                .collect(),
        )
    }

    #[test]
    fn claims_decode_by_name() {
        let r = ClaimReply::decode(reply(&[
            Ok("claimed"),
            Err(1),
            Err(-1),
            Err(9),
            Err(-1),
            Err(0),
        ]))
        .unwrap();
        assert_eq!(r.claim, Claim::Claimed { attempt: 1 });
        assert_eq!(
            (r.gap, r.expires_at, r.stream_failed),
            (None, Timestamp::from_millis(9), false)
        );
        let r = ClaimReply::decode(reply(&[
            Ok("late_claimed"),
            Err(1),
            Err(70),
            Err(9),
            Err(5),
            Err(1),
        ]))
        .unwrap();
        assert_eq!(
            r.claim,
            Claim::LateClaimed {
                attempt: 1,
                first_seen: Timestamp::from_millis(5)
            }
        );
        assert_eq!((r.gap, r.stream_failed), (Some(70), true));
        let r = ClaimReply::decode(reply(&[
            Ok("in_flight"),
            Err(250),
            Err(3),
            Err(9),
            Err(-1),
            Err(0),
        ]))
        .unwrap();
        assert_eq!(
            r.claim,
            Claim::InFlight {
                retry_after: Duration::from_millis(250)
            }
        );
    }

    #[test]
    fn an_unknown_reply_is_named() {
        let err = ClaimReply::decode(reply(&[
            Ok("maybe"),
            Err(1),
            Err(-1),
            Err(9),
            Err(-1),
            Err(0),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("claim script") && err.contains("unknown reply \"maybe\""),
            "{err}"
        );
        let err = Finish::decode(reply(&[Ok("finished"), Err(0)]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("finish script") && err.contains("\"finished\""),
            "{err}"
        );
        assert!(Renew::decode(reply(&[Ok("renewed")])).is_err());
        assert!(Abandon::decode(reply(&[Ok("untouched"), Err(1)])).is_err());
        assert!(Fill::decode(Value::Int(1)).is_err());
    }

    #[test]
    fn the_other_scripts_decode_by_name() {
        assert_eq!(
            Finish::decode(reply(&[Ok("completed"), Err(1)])).unwrap(),
            Finish::Completed {
                stream_failed: true
            }
        );
        assert_eq!(
            Finish::decode(reply(&[Ok("released"), Err(0)])).unwrap(),
            Finish::Released {
                stream_failed: false
            }
        );
        assert_eq!(
            Finish::decode(reply(&[Ok("stale")])).unwrap(),
            Finish::Stale
        );
        assert_eq!(
            Renew::decode(reply(&[Ok("already_done"), Err(7)])).unwrap(),
            Renew::AlreadyDone {
                expires_at: Timestamp::from_millis(7)
            }
        );
        assert_eq!(
            Abandon::decode(reply(&[Ok("abandoned"), Err(2), Err(0)])).unwrap(),
            Abandon::Abandoned {
                attempt: 2,
                stream_failed: false
            }
        );
        assert_eq!(
            Fill::decode(reply(&[Ok("expiring")])).unwrap(),
            Fill::Expiring
        );
    }
}
