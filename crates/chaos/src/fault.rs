//! The figures of one fault: how long the senders waited for an answer while it lasted (p99 and
//! max of the attempts sent meanwhile), and how soon after its end a delivery got a 2xx again
//! (the recovery: from the fault's end to the first 2xx answer of an attempt sent after it).
//!
//! They go into the scenario's section and into the summary table's two columns, so a fix that
//! makes the gateway answer faster during an outage, or come back sooner after it, shows as a
//! number, not only as a pass.

use crate::clock::ms;
use crate::load::Answer;

/// A fault's span, in run microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub end: u64,
}

/// See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figures {
    /// The fault, in words ("PostgreSQL blackholed 5 s").
    pub what: String,
    pub window: Window,
    /// Attempts sent while the fault lasted (each answered, timed out or refused).
    pub attempts: usize,
    /// The 99th percentile and the longest of their answer times (sent -> answered).
    pub p99_us: Option<u64>,
    pub max_us: Option<u64>,
    /// From the fault's end to the first 2xx answer of an attempt sent at or after it.
    pub recovery_us: Option<u64>,
    /// From the fault's end to the answer of the last attempt sent after it that failed: a 5xx,
    /// or no answer (retries that still failed once the fault was over), if any did. A 409
    /// `in_flight` is not a failure: it is how a retry of an event being processed is answered.
    pub last_failure_us: Option<u64>,
}

/// The `q` quantile (0..=1) of `sorted` (nearest rank).
pub fn quantile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// The figures of the fault `what` over `window`, from every attempt the senders made.
pub fn figures(what: impl Into<String>, window: Window, answers: &[Answer]) -> Figures {
    let mut during: Vec<u64> = answers
        .iter()
        .filter(|a| a.sent >= window.start && a.sent <= window.end)
        .map(|a| a.at.saturating_sub(a.sent))
        .collect();
    during.sort_unstable();
    let after = answers.iter().filter(|a| a.sent >= window.end);
    let recovery_us = after
        .clone()
        .filter(|a| a.acked())
        .map(|a| a.at - window.end)
        .min();
    let last_failure_us = after
        .filter(|a| a.status >= 500 || a.status == 0)
        .map(|a| a.at - window.end)
        .max();
    Figures {
        what: what.into(),
        window,
        attempts: during.len(),
        p99_us: quantile(&during, 0.99),
        max_us: during.last().copied(),
        recovery_us,
        last_failure_us,
    }
}

/// A span for the tables: milliseconds below a second, else seconds (`-` when there is no
/// figure).
pub fn seconds(us: Option<u64>) -> String {
    match us {
        None => "-".to_owned(),
        Some(us) if us < 1_000_000 => format!("{:.0} ms", us as f64 / 1e3),
        Some(us) => format!("{:.2} s", us as f64 / 1e6),
    }
}

impl Figures {
    /// The summary table's p99 cell.
    pub fn p99_cell(&self) -> String {
        self.p99_us
            .map_or("-".to_owned(), |us| format!("{:.0} ms", us as f64 / 1e3))
    }

    /// The section's line.
    pub fn line(&self) -> String {
        let w = self.window;
        let answers = match (self.p99_us, self.max_us) {
            (Some(p99), Some(max)) => format!(
                "{} attempts sent meanwhile, answered in p99 {}, max {}",
                self.attempts,
                ms(p99),
                ms(max)
            ),
            _ => "no attempt was sent meanwhile".to_owned(),
        };
        let recovery = match self.recovery_us {
            Some(r) => format!(
                "the first 2xx to an attempt sent after its end came {} after it",
                seconds(Some(r))
            ),
            None => "no attempt sent after its end got a 2xx".to_owned(),
        };
        let last = self.last_failure_us.map_or(String::new(), |l| {
            format!(
                "; the last attempt sent after its end that failed (5xx, no answer) was answered {} after it",
                seconds(Some(l))
            )
        });
        format!(
            "fault: {} from {} to {} ({}): {answers}; recovery: {recovery}{last}",
            self.what,
            ms(w.start),
            ms(w.end),
            seconds(Some(w.end.saturating_sub(w.start)))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Outcome;

    fn answer(sent: u64, at: u64, status: u16) -> Answer {
        Answer {
            event: 0,
            gateway: 1,
            outcome: if status == 200 {
                Outcome::Forwarded
            } else {
                Outcome::StoreUnavailable
            },
            status,
            attempt: 1,
            retry_after: status == 503,
            sent,
            at,
        }
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&[7], 0.99), Some(7));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn figures_split_the_attempts_at_the_window() {
        let answers = [
            answer(50, 60, 200),       // before: not counted
            answer(100, 3_100, 503),   // during: 3 s
            answer(900, 1_900, 503),   // during: 1 s
            answer(1_000, 1_400, 503), // sent at the end: during, and after
            answer(1_200, 1_500, 200), // after: recovered 500 after the end
            answer(1_300, 1_350, 200),
        ];
        let f = figures(
            "x",
            Window {
                start: 100,
                end: 1_000,
            },
            &answers,
        );
        assert_eq!(f.attempts, 3);
        assert_eq!((f.p99_us, f.max_us), (Some(3_000), Some(3_000)));
        assert_eq!(f.recovery_us, Some(350));
        assert_eq!(f.last_failure_us, Some(400));
        assert!(
            f.line().contains("3 attempts sent meanwhile"),
            "{}",
            f.line()
        );
    }

    #[test]
    fn no_recovery_is_said() {
        let f = figures("x", Window { start: 0, end: 10 }, &[answer(20, 30, 503)]);
        assert_eq!(f.recovery_us, None);
        assert!(f.line().contains("no attempt sent after its end got a 2xx"));
        assert_eq!(f.p99_cell(), "-");
    }
}
