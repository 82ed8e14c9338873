//! [`Provider`]: what a source's `provider = "..."` names, and which provider-specific keys each
//! provider takes.

use std::fmt;
use std::str::FromStr;

use idemgate_core::presets::{self, Preset};

use crate::error::ConfigError;

/// A provider, as a source's `provider = "..."` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Provider {
    Stripe,
    Github,
    Shopify,
    Slack,
    StandardWebhooks,
    Svix,
    Paddle,
    Square,
    Twilio,
    Mailgun,
    Postmark,
    Sendgrid,
    Pubsub,
    Sns,
    GenericHmac,
    None,
}

impl Provider {
    /// Every provider, in the order the README lists them.
    pub const ALL: [Self; 16] = [
        Self::Stripe,
        Self::Github,
        Self::Shopify,
        Self::Slack,
        Self::StandardWebhooks,
        Self::Svix,
        Self::Paddle,
        Self::Square,
        Self::Twilio,
        Self::Mailgun,
        Self::Postmark,
        Self::Sendgrid,
        Self::Pubsub,
        Self::Sns,
        Self::GenericHmac,
        Self::None,
    ];

    /// The name configuration uses (`"stripe"`, `"generic-hmac"`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Github => "github",
            Self::Shopify => "shopify",
            Self::Slack => "slack",
            Self::StandardWebhooks => "standard-webhooks",
            Self::Svix => "svix",
            Self::Paddle => "paddle",
            Self::Square => "square",
            Self::Twilio => "twilio",
            Self::Mailgun => "mailgun",
            Self::Postmark => "postmark",
            Self::Sendgrid => "sendgrid",
            Self::Pubsub => "pubsub",
            Self::Sns => "sns",
            Self::GenericHmac => "generic-hmac",
            Self::None => "none",
        }
    }

    /// The provider's preset (delivery contract, dedup key, where the figures come from); `None`
    /// for `generic-hmac` and `none`, whose sources state their own contract.
    pub fn preset(self) -> Option<&'static Preset> {
        presets::preset(self.as_str())
    }

    /// Whether a source of this provider takes the provider-specific `key` (one of
    /// [`Keys::NAMES`](crate::Keys::NAMES)). The one table of which key belongs to which provider.
    pub fn takes(self, key: &str) -> bool {
        const EVENT_ID: [&str; 3] = ["event_id_header", "event_id_pointer", "event_id_field"];
        const GENERIC: [&str; 6] = [
            "signature_header",
            "signature_encoding",
            "signature_prefix",
            "signature_algorithm",
            "signed_payload",
            "timestamp_header",
        ];
        const PUBSUB: [&str; 7] = [
            "audience",
            "issuers",
            "service_account",
            "jwks_file",
            "jwks_url",
            "allow_any_service_account",
            "fetch_ca_file",
        ];
        const SNS: [&str; 5] = [
            "cert_hosts",
            "sns_subscription",
            "topic_arns",
            "allow_any_topic",
            "fetch_ca_file",
        ];
        match self {
            Self::GenericHmac => GENERIC.contains(&key) || EVENT_ID.contains(&key),
            Self::None | Self::Mailgun | Self::Postmark => EVENT_ID.contains(&key),
            Self::Twilio => key == "signed_url" || EVENT_ID.contains(&key),
            Self::Square => key == "signed_url",
            Self::Pubsub => PUBSUB.contains(&key),
            Self::Sns => SNS.contains(&key),
            Self::Stripe
            | Self::Github
            | Self::Shopify
            | Self::Slack
            | Self::StandardWebhooks
            | Self::Svix
            | Self::Paddle
            | Self::Sendgrid => false,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Provider {
    type Err = ConfigError;

    /// A name of [`Provider::ALL`].
    ///
    /// # Errors
    /// [`ConfigError::UnknownScheme`] for any other name.
    fn from_str(name: &str) -> Result<Self, ConfigError> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == name)
            .ok_or_else(|| ConfigError::UnknownScheme {
                name: name.to_owned(),
            })
    }
}
