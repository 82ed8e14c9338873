//! The settings of the providers that verify with public keys from elsewhere: `pubsub` (a JWKS,
//! by file or URL), `sns` (certificates from allowed hosts) and the fetches they make.

use idemgate_providers::Scheme;
use idemgate_providers::pubsub::{Jwks, Pubsub};
use idemgate_providers::sns::Sns;
use idemgate_tls::ClientTls;

use super::{ConfigError, SourceConfig};

impl SourceConfig {
    /// Refuses a `pubsub` or `sns` key set for another provider, naming the key.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the source and the key.
    pub(crate) fn check_fetch_keys(&self) -> Result<(), ConfigError> {
        for (key, set, only) in [
            ("audience", self.audience.is_some(), "pubsub"),
            ("issuers", self.issuers.is_some(), "pubsub"),
            ("service_account", self.service_account.is_some(), "pubsub"),
            ("jwks_file", self.jwks_file.is_some(), "pubsub"),
            ("jwks_url", self.jwks_url.is_some(), "pubsub"),
            (
                "allow_any_service_account",
                self.allow_any_service_account.is_some(),
                "pubsub",
            ),
            ("cert_hosts", self.cert_hosts.is_some(), "sns"),
            ("sns_subscription", self.sns_subscription.is_some(), "sns"),
            ("topic_arns", self.topic_arns.is_some(), "sns"),
            ("allow_any_topic", self.allow_any_topic.is_some(), "sns"),
        ] {
            if set && self.provider != only {
                return Err(self.invalid(
                    key,
                    format!("only for provider {only:?}, not {:?}", self.provider),
                ));
            }
        }
        if self.fetch_ca_file.is_some() && !self.fetches() {
            return Err(self.invalid(
                "fetch_ca_file",
                format!(
                    "only for providers that fetch documents (\"pubsub\" with jwks_url, \"sns\"), not {:?}",
                    self.provider
                ),
            ));
        }
        Ok(())
    }

    /// Whether the source fetches documents over HTTPS (a JWKS URL, SNS certificates).
    pub(crate) fn fetches(&self) -> bool {
        match self.provider.as_str() {
            "sns" => true,
            "pubsub" => self.jwks_file.is_none(),
            _ => false,
        }
    }

    /// The scheme of a `pubsub` or `sns` source with its settings (the JWKS file read now);
    /// `None` for other providers.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the key: `audience` missing, both `jwks_file` and `jwks_url`, a
    /// JWKS file that cannot be read.
    pub(crate) fn fetch_scheme(&self) -> Result<Option<Scheme>, ConfigError> {
        Ok(Some(match self.provider.as_str() {
            "pubsub" => {
                let audience = self.audience.clone().ok_or_else(|| {
                    self.invalid(
                        "audience",
                        "required for provider \"pubsub\": the audience the push subscription puts in its tokens (by default the push endpoint's URL)",
                    )
                })?;
                let jwks = match (&self.jwks_file, &self.jwks_url) {
                    (Some(_), Some(_)) => {
                        return Err(self.invalid("jwks_url", "set jwks_file or jwks_url, not both"));
                    }
                    (Some(file), None) => Jwks::Document(std::fs::read(file).map_err(|e| {
                        self.invalid("jwks_file", format!("cannot read {}: {e}", file.display()))
                    })?),
                    (None, url) => {
                        Jwks::Url(url.clone().unwrap_or_else(|| {
                            idemgate_providers::pubsub::GOOGLE_JWKS_URL.to_owned()
                        }))
                    }
                };
                if self.service_account.is_none() && self.allow_any_service_account != Some(true) {
                    return Err(self.invalid(
                        "service_account",
                        "required for provider \"pubsub\": the push subscription's service account (its tokens' email); without it a token any Google service account obtained for this audience is accepted. Set allow_any_service_account = true to accept any (warned at start)",
                    ));
                }
                Scheme::Pubsub(Pubsub {
                    audience,
                    issuers: self.issuers.clone().unwrap_or_default(),
                    email: self.service_account.clone(),
                    jwks,
                })
            }
            "sns" => {
                let topics = self.topic_arns.clone().unwrap_or_default();
                if topics.is_empty() && self.allow_any_topic != Some(true) {
                    return Err(self.invalid(
                        "topic_arns",
                        "required for provider \"sns\": the topics (TopicArn) whose messages are accepted, since any AWS account can make SNS sign a message to this endpoint. Set allow_any_topic = true to accept every topic (warned at start)",
                    ));
                }
                if let Some(bad) = topics.iter().find(|t| !t.starts_with("arn:")) {
                    return Err(self.invalid(
                        "topic_arns",
                        format!("{bad:?} is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)"),
                    ));
                }
                Scheme::Sns(Sns {
                    cert_hosts: self.cert_hosts.clone().unwrap_or_default(),
                    topic_arns: topics,
                })
            }
            _ => return Ok(None),
        }))
    }

    /// The TLS settings of the source's document fetches: the system's authorities, and
    /// `fetch_ca_file`'s.
    pub(crate) fn fetch_tls(&self) -> ClientTls {
        match &self.fetch_ca_file {
            Some(file) => ClientTls::with_ca(file),
            None => ClientTls::default(),
        }
    }
}
