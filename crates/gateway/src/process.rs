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
