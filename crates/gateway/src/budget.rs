//! What the gateway may hold in memory for senders it has not authenticated yet: the bytes of
//! request bodies being read, across every connection ([`BodyBudget`]), and the defaults drawn
//! from the memory the process may use ([`memory_limit`]).
//!
//! A delivery's body is read before its signature can be checked (the signature covers it), so
//! anyone who knows a source's name can make the gateway hold a body. The per-request limit
//! bounds one; the budget bounds all of them: a body that would take the gateway past it is
//! answered 503 with `Retry-After` at once, and senders retry.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Bytes of request bodies held at once, counted in KiB.
#[derive(Debug, Clone)]
pub(crate) struct BodyBudget {
    kib: Arc<Semaphore>,
    bytes: usize,
}

/// A share of the budget, given back when dropped (once the body is no longer held).
#[derive(Debug)]
pub(crate) struct BodyPermit(Option<OwnedSemaphorePermit>);

impl BodyPermit {
    /// A permit holding nothing (a body read outside the budget).
    pub(crate) fn none() -> Self {
        Self(None)
    }
}

impl BodyBudget {
    pub(crate) fn new(bytes: usize) -> Self {
        let kib = kib(bytes).max(1);
        Self {
            kib: Arc::new(Semaphore::new(kib as usize)),
            bytes,
        }
    }

    /// The budget, in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes `more` bytes onto `held` (which then holds both), or `None` when the budget has
    /// no room for them: the body must not be read further.
    pub(crate) fn grow(&self, held: &mut BodyPermit, more: usize) -> Option<()> {
        let n = kib(more);
        if n == 0 {
            return Some(());
        }
        let permit = self.kib.clone().try_acquire_many_owned(n).ok()?;
        match &mut held.0 {
            Some(p) => p.merge(permit),
            None => held.0 = Some(permit),
        }
        Some(())
    }
}

/// Bytes in whole KiB, rounded up.
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

/// The memory this process may use: the machine's, or its cgroup's limit when lower (a
/// container). `None` where it cannot be read (not Linux).
pub(crate) fn memory_limit() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("MemTotal:"))?
            .split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
            .map(|kib| kib * 1024)
    });
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
    };
    // cgroup v2, then v1 (v1 says "no limit" with a huge number, which min() ignores).
    let cgroup = read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"));
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// The default body budget: a 32nd of the memory, between 16 MiB and 256 MiB (64 MiB when the
/// memory is not known), and never less than the largest body one request may send.
pub(crate) fn default_body_budget(memory: Option<u64>, largest_body: usize) -> usize {
    const MIB: u64 = 1 << 20;
    let share = memory.map_or(64 * MIB, |m| (m / 32).clamp(16 * MIB, 256 * MIB));
    usize::try_from(share)
        .unwrap_or(usize::MAX)
        .max(largest_body)
}

/// The connections the memory allows: one per 256 KiB of it (a connection's buffers, its
/// request, the forward it makes), at least 16.
pub(crate) fn memory_connection_cap(memory: Option<u64>) -> Option<usize> {
    memory.map(|m| {
        usize::try_from(m / (256 * 1024))
            .unwrap_or(usize::MAX)
            .max(16)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_what_does_not_fit_and_takes_back_what_is_dropped() {
        let budget = BodyBudget::new(10 * 1024);
        let mut a = BodyPermit::none();
        assert!(budget.grow(&mut a, 6 * 1024).is_some());
        let mut b = BodyPermit::none();
        assert!(
            budget.grow(&mut b, 5 * 1024).is_none(),
            "6 + 5 KiB > 10 KiB"
        );
        assert!(budget.grow(&mut b, 4 * 1024).is_some());
        assert!(budget.grow(&mut b, 1).is_none(), "full");
        drop(a);
        assert!(
            budget.grow(&mut b, 6 * 1024).is_some(),
            "given back on drop"
        );
    }

    #[test]
    fn defaults_follow_the_memory() {
        const MIB: u64 = 1 << 20;
        const GIB: u64 = 1 << 30;
        assert_eq!(default_body_budget(Some(24 * GIB), 1 << 20), 256 << 20);
        assert_eq!(default_body_budget(Some(512 * MIB), 1 << 20), 16 << 20);
        assert_eq!(default_body_budget(Some(GIB), 1 << 20), 32 << 20);
        assert_eq!(default_body_budget(None, 1 << 20), 64 << 20);
        // GitHub's 25 MB payloads fit even a small budget.
        assert_eq!(default_body_budget(Some(256 * MIB), 25 << 20), 25 << 20);
        assert_eq!(memory_connection_cap(Some(512 * MIB)), Some(2_048));
        assert_eq!(memory_connection_cap(Some(24 * GIB)), Some(98_304));
        assert_eq!(memory_connection_cap(Some(MIB)), Some(16));
        if cfg!(target_os = "linux") {
            assert!(memory_limit().is_some_and(|m| m > 16 * MIB));
        }
    }
}
