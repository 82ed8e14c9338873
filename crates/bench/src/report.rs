//! Latency summaries and markdown tables.

use std::time::Duration;

/// Percentiles of a set of latencies.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub max: Duration,
}

impl Latency {
    /// Summarises `samples` (sorted in place). Empty gives zeros.
    pub fn of(samples: &mut [Duration]) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            if samples.is_empty() {
                Duration::ZERO
            } else {
                let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
                samples[i]
            }
        };
        Self {
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: samples.last().copied().unwrap_or_default(),
        }
    }
}

/// Milliseconds with two decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// A markdown table.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!(
        "| {} |\n|{}|\n",
        header.join(" | "),
        header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let mut v: Vec<_> = (1..=100).map(Duration::from_millis).collect();
        let l = Latency::of(&mut v);
        assert_eq!(
            (l.p50, l.p99, l.max),
            (
                Duration::from_millis(50),
                Duration::from_millis(99),
                Duration::from_millis(100)
            )
        );
        assert_eq!(Latency::of(&mut []).p99, Duration::ZERO);
    }
}
