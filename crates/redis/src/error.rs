//! [`RedisError`]: what can go wrong in this crate, and how it becomes core's [`StoreError`].

use std::time::Duration;

use idemgate_core::StoreError;
use redis::TlsCertificates;

use crate::config::{ConfigError, Target};

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
    /// The TLS handshake with the server (or Cluster) failed: its certificate was refused (an
    /// unknown authority, another host name), or it refused ours.
    #[error("TLS with Redis at {target} failed: {reason}")]
    Tls {
        target: String,
        /// What went wrong, in words.
        reason: String,
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

    /// `source`, an error reaching `target`, as [`Self::Tls`] when a TLS handshake is what
    /// failed, and as `otherwise` makes it when not.
    pub(crate) async fn tls_or(
        target: &Target,
        certs: Option<&TlsCertificates>,
        connect_timeout: Duration,
        source: redis::RedisError,
        otherwise: impl FnOnce(redis::RedisError) -> Self,
    ) -> Self {
        match crate::conn::tls_failure(target, certs, connect_timeout, &source).await {
            Some(reason) => Self::Tls {
                target: target.describe(),
                reason,
                source,
            },
            None => otherwise(source),
        }
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
            RedisError::Connect { source, .. }
            | RedisError::Tls { source, .. }
            | RedisError::Command { source, .. } => StoreError::backend(context, source),
            RedisError::EvictingPolicy { .. } | RedisError::Reply { .. } => {
                StoreError::backend("Redis store", e)
            }
        }
    }
}
