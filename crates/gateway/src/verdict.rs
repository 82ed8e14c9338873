//! How a component stands ([`Level`]) and why ([`Verdict`]): what `/healthz`, `/readyz`, the
//! dashboard's health row and the background tasks' supervisor all speak.

/// How a component stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    /// Nothing to say.
    Ok,
    /// Works, with something an operator should look at (dead letters, a failing downstream).
    Warn,
    /// Not doing its job (a queue past its `queue_lag`, a stopped dispatcher).
    Bad,
}

/// A component's level and why, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) level: Level,
    pub(crate) why: String,
}
