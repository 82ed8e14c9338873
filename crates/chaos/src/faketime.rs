//! A gateway whose wall clock the harness steps: libfaketime (Debian's `faketime` package)
//! preloaded into `idemgate serve`, with the monotonic clock left alone
//! (`FAKETIME_DONT_FAKE_MONOTONIC=1`) and the offset read from a timestamp file on every call
//! (`FAKETIME_TIMESTAMP_FILE`, `FAKETIME_NO_CACHE=1`). The harness writes `+0` before the
//! start and `+120` (or what `--clock-step` says) mid-run: to the gateway, the host's clock was
//! stepped, as NTP or an operator steps it, while its timers ran on.
//!
//! Whether the step reached the gateway is checked from outside, on the `Date` header of its
//! answers.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

/// Where Debian and a source install put the library.
const CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

#[derive(Debug)]
pub struct FakeClock {
    lib: PathBuf,
    file: PathBuf,
}

impl FakeClock {
    /// Finds libfaketime and writes `dir/faketime.rc` with no offset.
    ///
    /// # Errors
    /// When the library is not installed (the message starts with "libfaketime not found",
    /// which a scenario outside CI reports as skipped), or the file cannot be written.
    pub fn new(dir: &Path) -> anyhow::Result<Self> {
        let Some(lib) = CANDIDATES.iter().map(PathBuf::from).find(|p| p.exists()) else {
            bail!(
                "libfaketime not found (looked in {}): install it (Debian: apt-get install faketime)",
                CANDIDATES.join(", ")
            );
        };
        let clock = Self {
            lib,
            file: dir.join("faketime.rc"),
        };
        clock.set("+0")?;
        Ok(clock)
    }

    /// The environment of a process whose wall clock follows the file.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), self.lib.display().to_string()),
            (
                "FAKETIME_TIMESTAMP_FILE".into(),
                self.file.display().to_string(),
            ),
            ("FAKETIME_NO_CACHE".into(), "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ]
    }

    /// From now on, the processes' wall clock runs `by` ahead of the host's.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn step(&self, by: Duration) -> anyhow::Result<()> {
        self.set(&format!("+{}", by.as_secs()))
    }

    /// Replaces the file at once (a rename: a reader never sees it half written).
    fn set(&self, offset: &str) -> anyhow::Result<()> {
        let tmp = self.file.with_extension("rc.tmp");
        std::fs::write(&tmp, format!("{offset}\n"))
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.file)
            .with_context(|| format!("replacing {}", self.file.display()))
    }
}

/// How far `date` (an HTTP `Date` header) is ahead of the host's clock now, in whole seconds
/// (negative: behind).
pub fn ahead_of_host(date: &str) -> Option<i64> {
    let then = parse_http_date(date)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs() as i64;
    Some(then - now)
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) as Unix seconds.
pub fn parse_http_date(date: &str) -> Option<i64> {
    let mut parts = date.split_whitespace();
    let _weekday = parts.next()?;
    let day: i64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut hms = parts.next()?.split(':').map(|n| n.parse::<i64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    if parts.next()? != "GMT" {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + h * 3_600 + m * 60 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_parse() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2028 23:59:59 GMT"),
            Some(1_835_481_599)
        );
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 UTC"), None);
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[test]
    fn the_timestamp_file_is_replaced() {
        let dir = std::env::temp_dir().join(format!("chaos-faketime-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let clock = FakeClock {
            lib: PathBuf::from("/nonexistent"),
            file: dir.join("faketime.rc"),
        };
        clock.set("+0").unwrap();
        clock.step(Duration::from_secs(120)).unwrap();
        let text = std::fs::read_to_string(dir.join("faketime.rc")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(text, "+120\n");
        assert!(
            clock
                .env()
                .contains(&("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()))
        );
    }
}
