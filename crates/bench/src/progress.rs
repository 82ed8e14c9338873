//! Progress on stderr: an indicatif bar when stderr is a terminal, otherwise a plain line now and
//! then (so a log file or CI output stays readable).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the plain-line form writes a line for a counter.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// A counter towards a known total (`len`), or a phase with no total (`len` 0).
#[derive(Debug)]
pub struct Progress {
    what: String,
    len: u64,
    started: Instant,
    bar: Option<indicatif::ProgressBar>,
    last_line: Mutex<Instant>,
}

impl Progress {
    /// A counter of `unit` towards `len`, with its rate and the time left.
    pub fn counter(what: impl Into<String>, len: u64, unit: &str) -> Self {
        let what = what.into();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(len);
            bar.set_style(
                indicatif::ProgressStyle::with_template(&format!(
                    "{{prefix}} {{bar:30}} {{human_pos}}/{{human_len}} {unit}, {{per_sec}}, eta {{eta}} {{msg}}"
                ))
                .expect("valid template"),
            );
            bar.set_prefix(what.clone());
            bar
        });
        if bar.is_none() {
            eprintln!("{what}: 0/{len} {unit}");
        }
        Self::new(what, len, bar)
    }

    /// A phase without a total: a spinner on a terminal, one line otherwise.
    pub fn phase(what: impl Into<String>) -> Self {
        let what = what.into();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_style(
                indicatif::ProgressStyle::with_template("{spinner} {prefix} {elapsed} {msg}")
                    .expect("valid template"),
            );
            bar.set_prefix(what.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        if bar.is_none() {
            eprintln!("{what}");
        }
        Self::new(what, 0, bar)
    }

    fn new(what: String, len: u64, bar: Option<indicatif::ProgressBar>) -> Self {
        let now = Instant::now();
        Self {
            what,
            len,
            started: now,
            bar,
            last_line: Mutex::new(now),
        }
    }

    /// Moves the counter to `pos`; the plain form writes a line at most every 10 s.
    pub fn set(&self, pos: u64) {
        match &self.bar {
            Some(bar) => bar.set_position(pos),
            None => {
                let mut last = self.last_line.lock().unwrap_or_else(|e| e.into_inner());
                if last.elapsed() >= LOG_EVERY {
                    *last = Instant::now();
                    self.line(pos, "");
                }
            }
        }
    }

    /// A note beside the bar; the plain form writes it as a line of its own at once.
    pub fn note(&self, pos: u64, msg: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(pos);
                bar.set_message(msg.to_owned());
            }
            None => {
                *self.last_line.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
                self.line(pos, msg);
            }
        }
    }

    fn line(&self, pos: u64, msg: &str) {
        let elapsed = self.started.elapsed();
        if self.len == 0 {
            eprintln!("{}: {:.0?} {msg}", self.what, elapsed);
            return;
        }
        let left = eta(pos, self.len, elapsed)
            .map(|d| format!(", about {} left", humantime::format_duration(whole_secs(d))))
            .unwrap_or_default();
        eprintln!(
            "{}: {pos}/{} ({:.0}%), {:.0}/s{left} {msg}",
            self.what,
            self.len,
            pos as f64 / self.len as f64 * 100.0,
            pos as f64 / elapsed.as_secs_f64().max(1e-9)
        );
    }

    /// Clears the bar (or writes a last line) with `msg`.
    pub fn finish(self, msg: &str) {
        match self.bar {
            Some(bar) => bar.finish_and_clear(),
            None if self.len > 0 => self.line(self.len, msg),
            None => eprintln!(
                "{}: done in {:.1?} {msg}",
                self.what,
                self.started.elapsed()
            ),
        }
    }
}

/// The time left at the average rate so far; `None` before anything is done.
pub fn eta(done: u64, total: u64, elapsed: Duration) -> Option<Duration> {
    if done == 0 {
        return None;
    }
    let left = total.saturating_sub(done) as f64;
    Some(Duration::from_secs_f64(
        elapsed.as_secs_f64() * left / done as f64,
    ))
}

fn whole_secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_follows_the_average_rate() {
        let s = Duration::from_secs;
        assert_eq!(eta(0, 100, s(5)), None);
        assert_eq!(eta(25, 100, s(10)), Some(s(30)));
        assert_eq!(eta(100, 100, s(10)), Some(s(0)));
        assert_eq!(eta(120, 100, s(10)), Some(s(0)));
    }
}
