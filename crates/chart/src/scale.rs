//! Scales (data to position), tick choice and the formatting of tick and value labels.

/// A linear map from `[d0, d1]` to `[r0, r1]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Linear {
    pub d0: f64,
    pub d1: f64,
    pub r0: f64,
    pub r1: f64,
}

impl Linear {
    pub(crate) fn at(&self, v: f64) -> f64 {
        if self.d1 == self.d0 {
            return (self.r0 + self.r1) / 2.0;
        }
        self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)
    }
}

/// A base-10 logarithmic map from `[lo, hi]` (both above zero) to `[r0, r1]`; values at or
/// below `lo` map to `r0`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Log {
    pub lo: f64,
    pub hi: f64,
    pub r0: f64,
    pub r1: f64,
}

impl Log {
    pub(crate) fn at(&self, v: f64) -> f64 {
        let (a, b) = (self.lo.log10(), self.hi.log10());
        if b <= a {
            return self.r0;
        }
        self.r0 + (v.max(self.lo).log10() - a) / (b - a) * (self.r1 - self.r0)
    }
}

/// The step of linear ticks: 1, 2 or 5 times a power of ten, at least `raw`.
pub(crate) fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let ten = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * ten)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * ten)
}

/// Round ticks covering `[lo, hi]`: about `target` steps, the axis widened to whole steps.
/// With `integers`, steps are at least 1 (counts).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ticks {
    pub step: f64,
    pub values: Vec<f64>,
}

impl Ticks {
    pub(crate) fn lo(&self) -> f64 {
        self.values[0]
    }
    pub(crate) fn hi(&self) -> f64 {
        self.values[self.values.len() - 1]
    }
}

pub(crate) fn linear_ticks(lo: f64, hi: f64, target: usize, integers: bool) -> Ticks {
    let (lo, hi) = match (lo.is_finite(), hi.is_finite()) {
        (true, true) if hi > lo => (lo, hi),
        (true, _) if lo != 0.0 => (lo.min(0.0), lo.max(0.0)),
        _ => (0.0, 1.0),
    };
    let mut step = nice_step((hi - lo) / target.max(1) as f64);
    if integers {
        step = step.max(1.0);
    }
    let first = (lo / step + 1e-9).floor() as i64;
    let last = (hi / step - 1e-9).ceil() as i64;
    let values = (first..=last.max(first + 1))
        .map(|i| i as f64 * step)
        .collect();
    Ticks { step, values }
}

impl Ticks {
    /// The label of tick value `v`: the decimals the step needs, large values short (`k`,
    /// `M`, the same unit for the whole axis).
    pub(crate) fn label(&self, v: f64) -> String {
        let top = self.values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        tick_label(v, self.step, top)
    }
}

/// A tick value with the decimals its step needs, large ones short: `0.5`, `40`, `2500`,
/// `50k`, `1.5M`; `top` is the largest tick of the axis (it picks the unit).
pub(crate) fn tick_label(v: f64, step: f64, top: f64) -> String {
    let step = step.abs();
    let (scaled, unit_step, suffix) = if top >= 1e6 && step >= 1e5 {
        (v / 1e6, step / 1e6, "M")
    } else if top >= 1e4 && step >= 1e3 {
        (v / 1e3, step / 1e3, "k")
    } else {
        (v, step, "")
    };
    let decimals = decimals_for(unit_step);
    let text = format!("{scaled:.decimals$}");
    if text
        .trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        "0".to_owned()
    } else if suffix.is_empty() && decimals == 0 {
        group(&text, 5)
    } else {
        format!("{text}{suffix}")
    }
}

/// The decimals that show every multiple of `step` exactly (up to 3).
fn decimals_for(step: f64) -> usize {
    (0..=3)
        .find(|d| {
            let scaled = step * 10f64.powi(*d as i32);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.abs().max(1.0)
        })
        .unwrap_or(3)
}

/// A value for reading (tooltips, descriptions, gauge text): `12,345`, `0.25`, `3.1M`.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_owned();
    }
    let a = v.abs();
    if a >= 1e7 {
        return format!("{:.1}M", v / 1e6).replace(".0M", "M");
    }
    if a >= 100.0 || v.fract() == 0.0 {
        return group(&format!("{v:.0}"), 4);
    }
    let text = if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    };
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Digit groups of three, comma separated, for a whole number's text of at least `from`
/// digits (tick labels start at 5: "2500" is short enough on an axis).
fn group(digits: &str, from: usize) -> String {
    let (sign, digits) = match digits.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", digits),
    };
    if digits.len() < from {
        return format!("{sign}{digits}");
    }
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

/// Seconds as a duration in the units config files use: `250ms`, `4.5s`, `1m 30s`, `7d 10m`
/// (at most two units, the smaller rounded).
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".to_owned();
    }
    if secs < 1e-3 {
        return if secs == 0.0 {
            "0s".to_owned()
        } else {
            format!("{}us", number(secs * 1e6))
        };
    }
    if secs < 1.0 {
        return format!("{}ms", number((secs * 1e3 * 10.0).round() / 10.0));
    }
    if secs < 60.0 {
        return format!("{}s", number((secs * 10.0).round() / 10.0));
    }
    let whole = secs.round() as u64;
    let units = [(86_400, "d"), (3_600, "h"), (60, "m"), (1, "s")];
    let Some(first) = units.iter().position(|(u, _)| whole >= *u) else {
        return "0s".to_owned();
    };
    let (u1, n1) = units[first];
    let mut out = format!("{}{n1}", whole / u1);
    // The next unit that is not zero: `7d 10m`.
    if let Some((u2, n2)) = units[first + 1..].iter().find(|(u, _)| whole % u1 / u > 0) {
        out.push_str(&format!(" {}{n2}", whole % u1 / u2));
    }
    out
}

/// Tick positions for a logarithmic time axis (seconds), with their labels.
const TIME_TICKS: [(f64, &str); 15] = [
    (0.000_1, "100us"),
    (0.001, "1ms"),
    (0.01, "10ms"),
    (0.1, "100ms"),
    (1.0, "1s"),
    (10.0, "10s"),
    (60.0, "1m"),
    (600.0, "10m"),
    (3_600.0, "1h"),
    (21_600.0, "6h"),
    (86_400.0, "1d"),
    (604_800.0, "7d"),
    (2_592_000.0, "30d"),
    (7_776_000.0, "90d"),
    (31_536_000.0, "365d"),
];

/// The round times inside `[lo, hi]` (seconds) for a logarithmic axis.
pub(crate) fn log_time_ticks(lo: f64, hi: f64) -> Vec<(f64, &'static str)> {
    TIME_TICKS
        .iter()
        .copied()
        .filter(|(t, _)| *t >= lo * (1.0 - 1e-9) && *t <= hi * (1.0 + 1e-9))
        .collect()
}

/// The largest round time at or below `secs` (the start of a logarithmic time axis), at
/// least `floor`.
pub(crate) fn log_time_floor(secs: f64, floor: f64) -> f64 {
    TIME_TICKS
        .iter()
        .rev()
        .map(|(t, _)| *t)
        .find(|t| *t <= secs * (1.0 + 1e-9))
        .unwrap_or(floor)
        .max(floor)
}

/// Steps for a clock-time axis, in seconds.
const TIME_STEPS: [f64; 20] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1_800.0, 3_600.0, 7_200.0,
    10_800.0, 21_600.0, 43_200.0, 86_400.0, 172_800.0, 604_800.0,
];

/// Ticks at round clock times (UTC) over `[lo, hi]` Unix seconds, about `target` of them,
/// labelled `HH:MM` (`HH:MM:SS` for steps under a minute) and with the date (`Dec 1`) at
/// midnight and for steps of a day or more.
pub(crate) fn utc_ticks(lo: f64, hi: f64, target: usize) -> Vec<(f64, String)> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![(lo, utc_label(lo, 60.0))];
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let step = TIME_STEPS
        .iter()
        .copied()
        .find(|s| *s >= raw)
        .unwrap_or_else(|| (raw / 604_800.0).ceil() * 604_800.0);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last)
        .map(|i| {
            let t = i as f64 * step;
            (t, utc_label(t, step))
        })
        .collect()
}

fn utc_label(t: f64, step: f64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t.floor() as i64;
    let (days, of_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (_, month, day) = civil(days);
    let date = format!("{} {day}", MONTHS[(month - 1) as usize]);
    let (h, m, s) = (of_day / 3_600, of_day / 60 % 60, of_day % 60);
    if step >= 86_400.0 || of_day == 0 {
        date
    } else if step < 60.0 {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}")
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(8_552.0), 10_000.0);
        assert_eq!(nice_step(1_700.0), 2_000.0);
        assert_eq!(nice_step(12.0), 20.0);
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(5.0), 5.0);
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
    }

    #[test]
    fn linear_ticks_cover_the_data_in_round_steps() {
        let t = linear_ticks(0.0, 38_900.0, 5, false);
        assert_eq!(t.step, 10_000.0);
        assert_eq!(t.values, vec![0.0, 10_000.0, 20_000.0, 30_000.0, 40_000.0]);
        let t = linear_ticks(-3.0, 7.0, 5, false);
        assert_eq!((t.lo(), t.hi(), t.step), (-4.0, 8.0, 2.0));
        // Counts: never a step below one.
        let t = linear_ticks(0.0, 2.0, 5, true);
        assert_eq!(t.values, vec![0.0, 1.0, 2.0]);
        // Degenerate ranges still give an axis.
        assert_eq!(linear_ticks(0.0, 0.0, 5, false).values.len(), 6);
        assert!(linear_ticks(5.0, 5.0, 5, false).hi() >= 5.0);
        assert!(linear_ticks(f64::NAN, 1.0, 5, false).hi() >= 1.0);
    }

    #[test]
    fn scales_map_ends_to_ends() {
        let l = Linear {
            d0: 0.0,
            d1: 10.0,
            r0: 100.0,
            r1: 0.0,
        };
        assert_eq!((l.at(0.0), l.at(10.0), l.at(5.0)), (100.0, 0.0, 50.0));
        let g = Log {
            lo: 0.001,
            hi: 1000.0,
            r0: 0.0,
            r1: 600.0,
        };
        assert_eq!(g.at(0.001), 0.0);
        assert!((g.at(1.0) - 300.0).abs() < 1e-9);
        assert!((g.at(1000.0) - 600.0).abs() < 1e-9);
        assert_eq!(g.at(0.0), 0.0, "at or below lo: the start");
    }

    #[test]
    fn tick_labels_are_short_and_exact() {
        assert_eq!(tick_label(50_000.0, 10_000.0, 50_000.0), "50k");
        assert_eq!(tick_label(1_500_000.0, 500_000.0, 1_500_000.0), "1.5M");
        assert_eq!(tick_label(500_000.0, 500_000.0, 1_500_000.0), "0.5M");
        assert_eq!(tick_label(100_000.0, 100_000.0, 600_000.0), "100k");
        assert_eq!(tick_label(2_500.0, 500.0, 2_500.0), "2500");
        assert_eq!(tick_label(15_000.0, 5_000.0, 15_000.0), "15k");
        assert_eq!(tick_label(0.5, 0.5, 1.0), "0.5");
        assert_eq!(tick_label(0.0, 0.25, 1.0), "0");
        assert_eq!(tick_label(0.75, 0.25, 1.0), "0.75");
        assert_eq!(tick_label(-4.0, 2.0, 8.0), "-4");
        assert_eq!(tick_label(120.0, 20.0, 120.0), "120");
        assert_eq!(tick_label(25_000.0, 500.0, 25_000.0), "25,000");
        let t = linear_ticks(0.0, 38_900.0, 5, false);
        assert_eq!(t.label(40_000.0), "40k");
    }

    #[test]
    fn values_read_well() {
        assert_eq!(number(12_345.0), "12,345");
        assert_eq!(number(850.0), "850");
        assert_eq!(number(8_500.0), "8,500");
        assert_eq!(number(0.25), "0.25");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(31_000_000.0), "31M");
        assert_eq!(number(-1_234_567.0), "-1,234,567");
        assert_eq!(number(f64::NAN), "-");
    }

    #[test]
    fn durations_read_like_config() {
        assert_eq!(duration(0.0), "0s");
        assert_eq!(duration(0.25), "250ms");
        assert_eq!(duration(0.0015), "1.5ms");
        assert_eq!(duration(4.5), "4.5s");
        assert_eq!(duration(90.0), "1m 30s");
        assert_eq!(duration(605_400.0), "7d 10m");
        assert_eq!(duration(3_600.0), "1h");
        assert_eq!(duration(-1.0), "-");
    }

    #[test]
    fn log_time_axis_ticks_and_floor() {
        let t: Vec<_> = log_time_ticks(0.001, 100.0).iter().map(|t| t.1).collect();
        assert_eq!(t, ["1ms", "10ms", "100ms", "1s", "10s", "1m"]);
        assert_eq!(log_time_floor(0.3, 0.001), 0.1);
        assert_eq!(log_time_floor(75.0, 0.001), 60.0);
        assert_eq!(
            log_time_floor(0.0, 0.001),
            0.001,
            "zero gaps start at the floor"
        );
        assert_eq!(log_time_floor(1e-6, 0.001), 0.001);
    }

    #[test]
    fn clock_ticks_are_round_utc_times() {
        // 2026-12-01T10:07:00Z .. 11:02:00Z: ticks every 10 minutes.
        let lo = 1_796_119_620.0;
        let t = utc_ticks(lo, lo + 55.0 * 60.0, 6);
        let labels: Vec<_> = t.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            labels,
            ["10:10", "10:20", "10:30", "10:40", "10:50", "11:00"]
        );
        // Midnight shows the date.
        let midnight = 1_796_083_200.0; // 2026-12-01T00:00:00Z
        let t = utc_ticks(midnight - 7_200.0, midnight + 7_200.0, 4);
        assert!(t.iter().any(|(_, l)| l == "Dec 1"), "{t:?}");
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(20_788), (2026, 12, 1));
        assert_eq!(civil(-1), (1969, 12, 31));
    }
}
