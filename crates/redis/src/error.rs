//! [`RedisError`]: what can go wrong in this crate, and how it becomes core's [`StoreError`].

use idemgate_core::StoreError;

use crate::config::ConfigError;

/// Why a Redis store operation (or its start) failed.
#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The server (or Cluster) could not be reached.
    #[error("cannot connect to Redis at {target}")]
    Connect {
        target: String,
        #[source]
        source: redis::RedisError,
    },
    /// A node runs an evicting `maxmemory-policy`: an evicted record would let a duplicate
    /// through. Nothing was changed.
    #[error(
        "Redis node {node} runs maxmemory-policy {policy:?}, which evicts idemgate's records (every one has a TTL) and would let duplicates through; set it to noeviction, or set allow_eviction = true to run anyway"
    )]
    EvictingPolicy { node: String, policy: String },
    /// A command failed.
    #[error("Redis {what} failed")]
    Command {
        what: &'static str,
        #[source]
        source: redis::RedisError,
    },
    /// A script answered something this build cannot read (another idemgate's data?).
    #[error("Redis {what} answered something unreadable: {detail}")]
    Reply { what: &'static str, detail: String },
}

impl RedisError {
    pub(crate) fn command(what: &'static str) -> impl FnOnce(redis::RedisError) -> Self {
        move |source| Self::Command { what, source }
    }

    pub(crate) fn reply(what: &'static str, detail: impl Into<String>) -> Self {
        Self::Reply {
            what,
            detail: detail.into(),
        }
    }
}

impl From<RedisError> for StoreError {
    fn from(e: RedisError) -> Self {
        let context = e.to_string();
        match e {
            RedisError::Config(source) => StoreError::backend(context, source),
            RedisError::Connect { source, .. } | RedisError::Command { source, .. } => {
                StoreError::backend(context, source)
            }
            RedisError::EvictingPolicy { .. } | RedisError::Reply { .. } => {
                StoreError::backend("Redis store", e)
            }
        }
    }
}
