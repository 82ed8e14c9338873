//! Who this process is, written into its boot so that a later process on the same machine can
//! tell whether it still runs: then a restart after a crash registers at once instead of waiting
//! out the crashed boot's liveness lease, and a second start beside a live process is refused
//! at once.
//!
//! The identity is the kernel's boot id, the pid namespace, the pid and the process's start time
//! (Linux: `/proc`). Only a process on the same kernel and in the same pid namespace can look it
//! up; any other (another machine, another container) cannot tell, and waits for the lease. A pid
//! that is in use again by another process has another start time; a zombie (killed, not yet
//! reaped) counts as gone.
//!
//! Also the process's own figures for `/metrics` ([`register_metrics`]): CPU time, memory, file
//! descriptors and start time, read from `/proc/self` at each scrape.

use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// This process's identity (see the [module docs](self)); empty where it cannot be read.
pub(crate) fn identity() -> String {
    let (Some(kernel), Some(namespace), Some(started)) =
        (kernel(), namespace(), start_time("self"))
    else {
        return String::new();
    };
    format!("{kernel}/{namespace}/{}/{started}", std::process::id())
}

/// Whether the process `identity` names still runs: `Some` when it ran on this kernel and in this
/// pid namespace, `None` when this process cannot tell.
pub(crate) fn alive(identity: &str) -> Option<bool> {
    let mut parts = identity.split('/');
    let (Some(kernel_id), Some(ns), Some(pid), Some(started), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    if Some(kernel_id) != kernel().as_deref() || Some(ns) != namespace().as_deref() {
        return None;
    }
    let pid: u32 = pid.parse().ok()?;
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let (state, start) = stat_fields(&stat)?;
            Some(state != 'Z' && state != 'X' && start == started)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(false),
        Err(_) => None,
    }
}

fn kernel() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned()).filter(|id| !id.is_empty() && !id.contains('/'))
}

fn namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let text = link.to_string_lossy().into_owned();
    Some(text).filter(|t| !t.contains('/'))
}

fn start_time(pid: &str) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_fields(&stat).map(|(_, start)| start.to_owned())
}

/// A `/proc/{pid}/stat` line's state (field 3) and start time (field 22). The command (field 2)
/// is in parentheses and may hold anything, spaces and parentheses included: the fields after it
/// are counted from its last `)`.
fn stat_fields(stat: &str) -> Option<(char, &str)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?;
    Some((state, start))
}

/// Clock ticks per second of `/proc`'s CPU times and start times: `USER_HZ`, which Linux fixes
/// at 100 for user space on every architecture it exports these files on.
const USER_HZ: f64 = 100.0;

/// Registers the standard `process_*` series (as Prometheus's client libraries name them) read
/// now from `/proc/self`; each one that cannot be read is left out.
pub(crate) fn register_metrics(registry: &mut Registry) {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    let fields: Vec<&str> = stat
        .as_deref()
        .and_then(|s| s.rfind(')').map(|i| &s[i + 1..]))
        .map(|rest| rest.split_whitespace().collect())
        .unwrap_or_default();
    // Fields from the state (field 3) on: utime is field 14, stime 15, starttime 22, vsize 23.
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    if let (Some(user), Some(system)) = (field(14), field(15)) {
        registry.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            ConstCounter::new((user + system) as f64 / USER_HZ),
        );
    }
    if let Some(vsize) = field(23) {
        registry.register(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            ConstGauge::new(saturating(vsize)),
        );
    }
    if let Some(rss) = status_kib("VmRSS:") {
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            ConstGauge::new(saturating(rss.saturating_mul(1024))),
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        registry.register(
            "process_open_fds",
            "Number of open file descriptors",
            ConstGauge::new(saturating(fds.count() as u64)),
        );
    }
    if let Some(max) = max_fds() {
        registry.register(
            "process_max_fds",
            "Maximum number of open file descriptors",
            ConstGauge::new(saturating(max)),
        );
    }
    if let (Some(started), Some(boot)) = (field(22), boot_time()) {
        registry.register(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            ConstGauge::new(saturating(boot + (started as f64 / USER_HZ) as u64)),
        );
    }
}

fn saturating(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A `kB` line of `/proc/self/status`.
fn status_kib(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

/// The soft limit on open files.
fn max_fds() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// When the machine booted, in seconds since the epoch (`btime` of `/proc/stat`).
fn boot_time() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_is_alive_and_a_gone_one_is_not() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let me = identity();
        assert!(!me.is_empty());
        assert_eq!(alive(&me), Some(true));
        // A child that exited (and was reaped) is gone; its pid may be reused, by a process with
        // another start time.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let (kernel, ns) = (kernel().unwrap(), namespace().unwrap());
        let started = start_time("self").unwrap();
        assert_eq!(
            alive(&format!("{kernel}/{ns}/{pid}/{started}x")),
            Some(false)
        );
        // Another machine's, or another namespace's: cannot tell.
        assert_eq!(alive(&format!("another-kernel/{ns}/{pid}/1")), None);
        assert_eq!(alive(&format!("{kernel}/pid:[1]/{pid}/1")), None);
        assert_eq!(alive(""), None);
    }

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "77 (a (b) c) S 1 77 77 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(stat_fields(line), Some(('S', "123456")));
        assert_eq!(stat_fields("77 (x) Z"), None);
    }
}
