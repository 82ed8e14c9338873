//! How long a claim must live: a source's delivery contract and the TTL policy computed from it.
//!
//! `TTL = retry_window + queue_lag + clock_skew + replay_margin`. A TTL below the retry window lets
//! a legitimate retry through as a new event; a TTL far above what the contract needs bloats the
//! hot unique index for nothing. Validation refuses both, unless the source states an override
//! with a written reason.

use std::time::Duration;

use crate::time::Human;

/// What a sender promises about its retries, plus the receiver's own margins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryContract {
    /// The longest the sender retries or redelivers, incident replays included.
    pub retry_window: Duration,
    /// How long a delivery may sit in queues before the receiver sees it.
    pub queue_lag: Duration,
    /// The disagreement allowed between the sender's clocks and the store's.
    pub clock_skew: Duration,
    /// Extra room for manual replays and incident redeliveries.
    pub replay_margin: Duration,
}

impl DeliveryContract {
    /// The sum of the four terms (saturating).
    pub fn ttl(&self) -> Duration {
        self.retry_window
            .saturating_add(self.queue_lag)
            .saturating_add(self.clock_skew)
            .saturating_add(self.replay_margin)
    }

    /// The terms with their config key names, in order.
    pub fn terms(&self) -> [(&'static str, Duration); 4] {
        [
            ("retry_window", self.retry_window),
            ("queue_lag", self.queue_lag),
            ("clock_skew", self.clock_skew),
            ("replay_margin", self.replay_margin),
        ]
    }
}

/// The terms a source (or a command line) states explicitly. Each left out falls back to the
/// provider preset's figure, then to the defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContractTerms {
    pub retry_window: Option<Duration>,
    pub queue_lag: Option<Duration>,
    pub clock_skew: Option<Duration>,
    pub replay_margin: Option<Duration>,
}

impl ContractTerms {
    /// Queue lag when neither the source nor its preset says: one day.
    pub const DEFAULT_QUEUE_LAG: Duration = Duration::from_secs(86_400);
    /// Clock skew when neither the source nor its preset says: ten minutes.
    pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(600);
    /// Replay margin when neither the source nor its preset says: two days.
    pub const DEFAULT_REPLAY_MARGIN: Duration = Duration::from_secs(2 * 86_400);

    /// These terms over `base` (a preset's contract, if any), then the defaults.
    ///
    /// # Errors
    /// [`PolicyError::MissingRetryWindow`] when neither these terms nor `base` give a retry window.
    pub fn resolve(
        &self,
        source_name: &str,
        provider: &str,
        base: Option<DeliveryContract>,
    ) -> Result<DeliveryContract, PolicyError> {
        let pick = |own: Option<Duration>, from: fn(&DeliveryContract) -> Duration, default| {
            own.or(base.as_ref().map(from)).unwrap_or(default)
        };
        let retry_window = self
            .retry_window
            .or(base.map(|c| c.retry_window))
            .ok_or_else(|| PolicyError::MissingRetryWindow {
                source_name: source_name.to_owned(),
                provider: provider.to_owned(),
            })?;
        Ok(DeliveryContract {
            retry_window,
            queue_lag: pick(self.queue_lag, |c| c.queue_lag, Self::DEFAULT_QUEUE_LAG),
            clock_skew: pick(self.clock_skew, |c| c.clock_skew, Self::DEFAULT_CLOCK_SKEW),
            replay_margin: pick(
                self.replay_margin,
                |c| c.replay_margin,
                Self::DEFAULT_REPLAY_MARGIN,
            ),
        })
    }
}

/// An explicit TTL that replaces the computed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TtlOverride {
    pub ttl: Duration,
    /// Why; required when the TTL is above the cap.
    pub reason: Option<String>,
}

/// Why a source's TTL was refused. Each names the source and the config key at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "source {source_name:?}: retry_window is not set and provider {provider:?} has no default; set retry_window"
    )]
    MissingRetryWindow {
        source_name: String,
        provider: String,
    },
    #[error("source {source_name:?}: retry_window must be above zero")]
    ZeroRetryWindow { source_name: String },
    #[error(
        "source {source_name:?}: {key} gives a TTL of {ttl} which is below the retry window of {retry_window}; a retry would be processed twice"
    )]
    BelowRetryWindow {
        source_name: String,
        key: &'static str,
        ttl: Human,
        retry_window: Human,
    },
    #[error(
        "source {source_name:?}: {key} gives a TTL of {ttl}, above the cap of {cap} (4x the computed TTL or 90 days, whichever is lower); set ttl_override with ttl_override_reason to keep it"
    )]
    AboveCap {
        source_name: String,
        key: &'static str,
        ttl: Human,
        cap: Human,
    },
    #[error("source {source_name:?}: ttl_override_reason is empty; say why the TTL is overridden")]
    EmptyReason { source_name: String },
}

/// The validated lifetime of a source's dedup records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TtlPolicy {
    pub contract: DeliveryContract,
    /// The TTL in force: the override if one is set, else the contract's sum.
    pub ttl: Duration,
    /// The override's reason, when the TTL is an override.
    pub override_reason: Option<String>,
}

impl TtlPolicy {
    /// The absolute ceiling of the cap.
    pub const MAX_CAP: Duration = Duration::from_secs(90 * 86_400);

    /// The highest TTL accepted without a written reason: 4x the computed TTL or 90 days,
    /// whichever is lower.
    pub fn cap(contract: &DeliveryContract) -> Duration {
        contract.ttl().saturating_mul(4).min(Self::MAX_CAP)
    }

    /// Computes and validates a source's TTL.
    ///
    /// # Errors
    /// A [`PolicyError`] naming `source_name` and the key at fault: a zero retry window, an
    /// override below the retry window, a TTL above the cap without a reason, an empty reason.
    pub fn new(
        source_name: &str,
        contract: DeliveryContract,
        ttl_override: Option<TtlOverride>,
    ) -> Result<Self, PolicyError> {
        let name = || source_name.to_owned();
        if contract.retry_window.is_zero() {
            return Err(PolicyError::ZeroRetryWindow {
                source_name: name(),
            });
        }
        let cap = Self::cap(&contract);
        let (ttl, key, reason) = match ttl_override {
            Some(TtlOverride { ttl, reason }) => {
                let reason = match reason {
                    Some(r) if r.trim().is_empty() => {
                        return Err(PolicyError::EmptyReason {
                            source_name: name(),
                        });
                    }
                    r => r,
                };
                (ttl, "ttl_override", reason)
            }
            None => {
                // Blame the largest term: it is the one most likely set by mistake.
                let key = contract
                    .terms()
                    .into_iter()
                    .max_by_key(|(_, d)| *d)
                    .map_or("retry_window", |(k, _)| k);
                (contract.ttl(), key, None)
            }
        };
        if ttl < contract.retry_window {
            return Err(PolicyError::BelowRetryWindow {
                source_name: name(),
                key,
                ttl: Human(ttl),
                retry_window: Human(contract.retry_window),
            });
        }
        if ttl > cap && reason.is_none() {
            return Err(PolicyError::AboveCap {
                source_name: name(),
                key,
                ttl: Human(ttl),
                cap: Human(cap),
            });
        }
        Ok(Self {
            contract,
            ttl,
            override_reason: reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Duration {
        humantime::parse_duration(s).unwrap()
    }

    fn contract(w: &str, lag: &str, skew: &str, replay: &str) -> DeliveryContract {
        DeliveryContract {
            retry_window: d(w),
            queue_lag: d(lag),
            clock_skew: d(skew),
            replay_margin: d(replay),
        }
    }

    #[test]
    fn ttl_is_the_sum() {
        let p = TtlPolicy::new("s", contract("3d", "1d", "10m", "2d"), None).unwrap();
        assert_eq!(p.ttl, d("6d 10m"));
    }

    #[test]
    fn override_below_window_is_refused() {
        let err = TtlPolicy::new(
            "stripe-live",
            contract("3d", "1d", "10m", "2d"),
            Some(TtlOverride {
                ttl: d("5m"),
                reason: Some("because".into()),
            }),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(
            err,
            PolicyError::BelowRetryWindow {
                key: "ttl_override",
                ..
            }
        ));
        assert!(
            msg.contains("stripe-live") && msg.contains("ttl_override"),
            "{msg}"
        );
    }

    #[test]
    fn above_cap_needs_a_reason() {
        let c = contract("1h", "1h", "0s", "0s"); // ttl 2h, cap 8h
        let over = |reason: Option<&str>| {
            TtlPolicy::new(
                "s",
                c,
                Some(TtlOverride {
                    ttl: d("9h"),
                    reason: reason.map(str::to_owned),
                }),
            )
        };
        assert!(matches!(over(None), Err(PolicyError::AboveCap { .. })));
        assert!(matches!(
            over(Some("  ")),
            Err(PolicyError::EmptyReason { .. })
        ));
        let ok = over(Some("audit asks for 9h")).unwrap();
        assert_eq!(ok.ttl, d("9h"));
        // Within the cap, no reason is needed.
        let within = TtlPolicy::new(
            "s",
            c,
            Some(TtlOverride {
                ttl: d("8h"),
                reason: None,
            }),
        );
        assert!(within.is_ok());
    }

    #[test]
    fn computed_ttl_above_ninety_days_names_the_largest_term() {
        let err = TtlPolicy::new("s", contract("3d", "1d", "10m", "100d"), None).unwrap_err();
        assert!(
            matches!(
                err,
                PolicyError::AboveCap {
                    key: "replay_margin",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn zero_window_is_refused() {
        assert!(matches!(
            TtlPolicy::new("s", contract("0s", "1d", "0s", "0s"), None),
            Err(PolicyError::ZeroRetryWindow { .. })
        ));
    }
}
