//! The TTL advisor: from what history shows of a source, is its TTL right?
//!
//! For each source it takes the gaps between an event's first receipt and each later delivery of
//! it (duplicates, in-flight answers, conflicts, late duplicates), and recommends
//! `TTL = max(documented retry window, longest observed gap) + margins` (queue lag + clock skew +
//! replay margin). The verdict:
//!
//! - `too short`: late duplicates were seen (a delivery came after its record expired), or the
//!   99th percentile gap is above 80% of the TTL;
//! - `too long`: the TTL is more than 4x the recommendation (an "accidentally infinite" TTL bloats
//!   the hot index for nothing);
//! - `ok` otherwise, and `no data` when the source received nothing in the period.
//!
//! Percentiles are nearest-rank: the smallest observed gap with at least that share of gaps at or
//! below it, so every figure reported is a gap that really happened.

use std::fmt;
use std::time::Duration;

use crate::claim::HistoryOutcome;
use crate::key::SourceName;
use crate::policy::DeliveryContract;

/// The shortest time an arrival rate is projected from.
pub const MIN_PROJECTION_BASIS: Duration = Duration::from_secs(3_600);

/// What history shows of one source over a period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub source: SourceName,
    /// Deliveries received (every claim attempt, first or repeated).
    pub deliveries: u64,
    /// Distinct events first received in the period.
    pub first_receipts: u64,
    /// For each repeated delivery, the time since the event's first receipt.
    pub gaps: Vec<Duration>,
    /// Deliveries that came after their event's record expired, though it had been processed.
    pub late_duplicates: u64,
    /// Dedup records live now.
    pub live_rows: u64,
    /// Inbox mode: for each event delivered from the queue, its time from receipt to delivery
    /// (the queue lag the source's `queue_lag` must cover).
    pub queue_lags: Vec<Duration>,
    /// The period observed.
    pub period: Duration,
    /// How much of `period` the source's history covers: from its earliest row in the period
    /// to now (the whole period for a source older than it). A source that began sending a day
    /// ago has a day of arrivals, not 30 days' worth.
    pub observed: Duration,
}

impl Observation {
    /// A source history shows nothing of over `period`.
    pub fn empty(source: SourceName, period: Duration) -> Self {
        Self {
            source,
            deliveries: 0,
            first_receipts: 0,
            gaps: Vec::new(),
            late_duplicates: 0,
            live_rows: 0,
            queue_lags: Vec::new(),
            period,
            observed: Duration::ZERO,
        }
    }
}

/// Builds [`Observation`]s from history rows, one `(source, outcome, gap)` at a time.
#[derive(Debug, Default)]
pub struct Tally {
    sources: std::collections::BTreeMap<SourceName, Observation>,
}

impl Tally {
    /// Counts one history row. Completions, releases and abandoned claims are not deliveries;
    /// every other outcome is one, and every delivery of an event already seen has a gap.
    pub fn add(&mut self, source: SourceName, outcome: HistoryOutcome, gap: Option<Duration>) {
        let obs = self
            .sources
            .entry(source)
            .or_insert_with_key(|source| Observation::empty(source.clone(), Duration::ZERO));
        match outcome {
            // An inbox delivery's completion carries its queue lag.
            HistoryOutcome::Completed if gap.is_some() => {
                obs.queue_lags.extend(gap);
                return;
            }
            // Not deliveries: what became of one later.
            HistoryOutcome::Completed
            | HistoryOutcome::Released
            | HistoryOutcome::Abandoned
            | HistoryOutcome::DeadLettered
            | HistoryOutcome::Replayed
            | HistoryOutcome::AttemptFailed => {
                return;
            }
            HistoryOutcome::Claimed => obs.first_receipts += 1,
            HistoryOutcome::LateDuplicate => obs.late_duplicates += 1,
            HistoryOutcome::Duplicate
            | HistoryOutcome::InFlight
            | HistoryOutcome::Conflict
            | HistoryOutcome::Reclaimed => {}
        }
        obs.deliveries += 1;
        if outcome != HistoryOutcome::Claimed
            && let Some(gap) = gap
        {
            obs.gaps.push(gap);
        }
    }

    /// Notes that one of `source`'s rows is `age` old (by the store's clock): the oldest one
    /// says how much of the period the source's history covers
    /// ([`Observation::observed`]).
    pub fn seen(&mut self, source: &SourceName, age: Duration) {
        if let Some(obs) = self.sources.get_mut(source) {
            obs.observed = obs.observed.max(age);
        }
    }

    /// The observations, by source name, each over `period`.
    pub fn finish(self, period: Duration) -> Vec<Observation> {
        self.sources
            .into_values()
            .map(|o| Observation {
                period,
                observed: o.observed.min(period),
                ..o
            })
            .collect()
    }
}

/// What the advisor says of one source.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    pub source: SourceName,
    pub deliveries: u64,
    /// Repeated deliveries (the number of gaps).
    pub duplicates: u64,
    pub p50: Option<Duration>,
    pub p90: Option<Duration>,
    pub p99: Option<Duration>,
    pub max: Option<Duration>,
    pub late_duplicates: u64,
    pub live_rows: u64,
    /// Records the store would hold at this arrival rate: first receipts per second x TTL,
    /// the rate taken over [`Advice::projection_basis`].
    pub projected_rows: u64,
    /// The time the arrival rate of `projected_rows` is averaged over: the part of the period
    /// the source's history covers, at least an hour.
    pub projection_basis: Duration,
    /// The TTL in force.
    pub ttl: Duration,
    pub retry_window: Duration,
    pub recommended_ttl: Duration,
    /// Inbox mode: the observed queue lag (receipt to delivery), p50, p99 and max; `None`
    /// without inbox deliveries in the period.
    pub queue_lag: Option<QueueLag>,
    /// The `queue_lag` margin the TTL allows for.
    pub queue_lag_margin: Duration,
    pub verdict: Verdict,
}

/// The observed queue lag of an inbox source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLag {
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

/// The advisor's verdict on a source's TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    TooShort { why: String },
    TooLong,
    NoData,
}

impl Verdict {
    /// `ok`, `too short`, `too long`, `no data`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::TooShort { .. } => "too short",
            Self::TooLong => "too long",
            Self::NoData => "no data",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooShort { why } => write!(f, "too short ({why})"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// The nearest-rank percentile `q` (0 < q <= 1) of sorted `gaps`.
pub fn percentile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Advises on one source, given its contract and the TTL in force.
pub fn advise(obs: &Observation, contract: &DeliveryContract, ttl: Duration) -> Advice {
    let mut gaps = obs.gaps.clone();
    gaps.sort_unstable();
    let (p50, p90, p99, max) = (
        percentile(&gaps, 0.50),
        percentile(&gaps, 0.90),
        percentile(&gaps, 0.99),
        gaps.last().copied(),
    );
    let margins = contract
        .queue_lag
        .saturating_add(contract.clock_skew)
        .saturating_add(contract.replay_margin);
    let recommended_ttl = contract
        .retry_window
        .max(max.unwrap_or_default())
        .saturating_add(margins);
    // The arrival rate over the part of the period the source's history covers (at least an
    // hour, so that a source minutes old is not projected from its first burst); over the
    // whole period when the store could not say.
    let basis = if obs.observed.is_zero() {
        obs.period
    } else {
        obs.observed.max(MIN_PROJECTION_BASIS).min(obs.period)
    };
    let rate = if basis.is_zero() {
        0.0
    } else {
        obs.first_receipts as f64 / basis.as_secs_f64()
    };
    let projected_rows = (rate * ttl.as_secs_f64()).round() as u64;
    let mut lags = obs.queue_lags.clone();
    lags.sort_unstable();
    let queue_lag = match (percentile(&lags, 0.5), percentile(&lags, 0.99), lags.last()) {
        (Some(p50), Some(p99), Some(max)) => Some(QueueLag {
            p50,
            p99,
            max: *max,
        }),
        _ => None,
    };
    let verdict = if obs.deliveries == 0 && queue_lag.is_none() {
        Verdict::NoData
    } else if obs.late_duplicates > 0 {
        Verdict::TooShort {
            why: match obs.late_duplicates {
                1 => "1 late duplicate".to_owned(),
                n => format!("{n} late duplicates"),
            },
        }
    } else if p99.is_some_and(|p| p.as_secs_f64() > 0.8 * ttl.as_secs_f64()) {
        Verdict::TooShort {
            why: "p99 gap above 80% of the TTL".into(),
        }
    } else if let Some(lag) = queue_lag.filter(|l| l.max > contract.queue_lag) {
        // Past the queue_lag margin, a sender's retry can outlive the record while its event
        // still waits in the queue.
        Verdict::TooShort {
            why: format!(
                "observed queue lag up to {} eats the queue_lag margin of {}",
                crate::time::Human(lag.max),
                crate::time::Human(contract.queue_lag)
            ),
        }
    } else if ttl > recommended_ttl.saturating_mul(4) {
        Verdict::TooLong
    } else {
        Verdict::Ok
    };
    Advice {
        source: obs.source.clone(),
        deliveries: obs.deliveries,
        duplicates: gaps.len() as u64,
        p50,
        p90,
        p99,
        max,
        late_duplicates: obs.late_duplicates,
        live_rows: obs.live_rows,
        projected_rows,
        projection_basis: basis,
        ttl,
        retry_window: contract.retry_window,
        recommended_ttl,
        queue_lag,
        queue_lag_margin: contract.queue_lag,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_lag_past_its_margin_makes_the_ttl_too_short() {
        let mut t = Tally::default();
        let src = SourceName::new("shop").unwrap();
        t.add(src.clone(), HistoryOutcome::Claimed, None);
        for s in [1, 2, 90_000] {
            t.add(src.clone(), HistoryOutcome::Completed, Some(secs(s)));
        }
        // A forward-mode completion carries no gap: not a lag.
        t.add(src.clone(), HistoryOutcome::Completed, None);
        let obs = t.finish(secs(3_600)).remove(0);
        assert_eq!(obs.queue_lags.len(), 3);
        assert_eq!(obs.deliveries, 1, "completions are not deliveries");
        let a = advise(&obs, &contract(), secs(7 * D));
        let lag = a.queue_lag.unwrap();
        assert_eq!((lag.p50, lag.max), (secs(2), secs(90_000)));
        assert!(
            matches!(&a.verdict, Verdict::TooShort { why } if why.contains("queue lag")),
            "{:?}",
            a.verdict
        );
        let mut quick = obs.clone();
        quick.queue_lags = vec![secs(5)];
        assert_eq!(
            advise(&quick, &contract(), secs(7 * D)).verdict,
            Verdict::Ok
        );
    }

    const S: u64 = 1;
    const H: u64 = 3_600;
    const D: u64 = 86_400;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn contract() -> DeliveryContract {
        DeliveryContract {
            retry_window: secs(3 * D),
            queue_lag: secs(D),
            clock_skew: secs(600),
            replay_margin: secs(3 * D),
        }
    }

    fn obs(gaps: Vec<Duration>, late: u64) -> Observation {
        Observation {
            source: SourceName::new("stripe-live").unwrap(),
            queue_lags: Vec::new(),
            deliveries: 1_000 + gaps.len() as u64,
            first_receipts: 1_000,
            gaps,
            late_duplicates: late,
            live_rows: 900,
            period: secs(10 * D),
            observed: secs(10 * D),
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<_> = (1..=100).map(secs).collect();
        assert_eq!(percentile(&v, 0.5), Some(secs(50)));
        assert_eq!(percentile(&v, 0.9), Some(secs(90)));
        assert_eq!(percentile(&v, 0.99), Some(secs(99)));
        assert_eq!(percentile(&[secs(7)], 0.99), Some(secs(7)));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn ok_when_gaps_sit_well_inside_the_ttl() {
        let a = advise(
            &obs((1..=100).map(|i| secs(i * 60 * S)).collect(), 0),
            &contract(),
            contract().ttl(),
        );
        assert_eq!(a.verdict, Verdict::Ok);
        assert_eq!(a.p99, Some(secs(99 * 60)));
        assert_eq!(
            a.recommended_ttl,
            contract().ttl(),
            "the documented window dominates short gaps"
        );
        assert_eq!(
            a.projected_rows,
            (100.0 * contract().ttl().as_secs_f64() / D as f64).round() as u64
        );
    }

    #[test]
    fn a_young_source_is_projected_from_the_time_it_has_existed() {
        // 1,000 first receipts in the two hours the source has existed, of a 10-day period: the
        // rate is 1,000 per two hours, not per ten days.
        let young = Observation {
            observed: secs(2 * H),
            ..obs(Vec::new(), 0)
        };
        let a = advise(&young, &contract(), contract().ttl());
        assert_eq!(a.projection_basis, secs(2 * H));
        assert_eq!(
            a.projected_rows,
            (1_000.0 * contract().ttl().as_secs_f64() / (2 * H) as f64).round() as u64
        );
        // Minutes old: projected from an hour at least.
        let newborn = Observation {
            observed: secs(60),
            ..obs(Vec::new(), 0)
        };
        assert_eq!(
            advise(&newborn, &contract(), contract().ttl()).projection_basis,
            MIN_PROJECTION_BASIS
        );
        // Unknown coverage: the whole period, as before.
        let unknown = Observation {
            observed: Duration::ZERO,
            ..obs(Vec::new(), 0)
        };
        assert_eq!(
            advise(&unknown, &contract(), contract().ttl()).projection_basis,
            secs(10 * D)
        );
    }

    #[test]
    fn too_short_on_late_duplicates_or_a_high_p99() {
        let a = advise(&obs(vec![secs(H)], 2), &contract(), contract().ttl());
        assert_eq!(a.verdict.to_string(), "too short (2 late duplicates)");
        let a = advise(&obs(vec![secs(H)], 1), &contract(), contract().ttl());
        assert_eq!(a.verdict.to_string(), "too short (1 late duplicate)");
        let ttl = secs(10 * H);
        let a = advise(&obs(vec![secs(9 * H); 10], 0), &contract(), ttl);
        assert!(matches!(a.verdict, Verdict::TooShort { .. }));
        // The recommendation covers the longest gap seen, plus the margins.
        let a = advise(&obs(vec![secs(5 * D)], 0), &contract(), contract().ttl());
        assert_eq!(a.recommended_ttl, secs(5 * D + D + 600 + 3 * D));
    }

    #[test]
    fn too_long_above_four_times_the_recommendation() {
        let a = advise(&obs(vec![secs(60)], 0), &contract(), secs(90 * D));
        assert_eq!(a.verdict, Verdict::TooLong);
    }

    #[test]
    fn no_data() {
        let mut o = obs(vec![], 0);
        o.deliveries = 0;
        assert_eq!(
            advise(&o, &contract(), contract().ttl()).verdict,
            Verdict::NoData
        );
    }
}
