//! A source's [`Verifier`], built from its flat TOML keys: the providers crate reads the keys into
//! the provider's typed settings in one step ([`Scheme::from_keys`]), refusing a key meant for
//! another provider; here each refusal is located at its key. What the HTTP path and the tests
//! that sign deliveries both use.

use idemgate_providers::{Keys, Provider, Scheme, Secret, Verifier};
use idemgate_tls::ClientTls;

use super::{ConfigError, SourceConfig};

/// Builds a source's verifier from its config (also used by tests and load generators to sign).
///
/// # Errors
/// A [`ConfigError`] naming the source and the key.
pub fn verifier(sc: &SourceConfig) -> Result<Verifier, ConfigError> {
    let provider: Provider = sc
        .provider
        .parse()
        .map_err(|e: idemgate_providers::ConfigError| sc.invalid("provider", e.to_string()))?;
    let scheme = Scheme::from_keys(provider, &sc.keys()).map_err(|e| sc.invalid(e.key, e.why))?;
    let secrets = sc
        .secrets
        .iter()
        .map(|s| Secret::new(s.as_bytes()))
        .collect();
    Verifier::new(scheme, secrets, sc.tolerance()).map_err(|e| {
        let key = match e {
            idemgate_providers::ConfigError::Setting {
                field: "signed_url",
                ..
            }
            | idemgate_providers::ConfigError::Missing {
                field: "signed_url",
                ..
            } => "signed_url",
            idemgate_providers::ConfigError::ZeroTolerance => "tolerance",
            _ => "secrets",
        };
        sc.invalid(key, e.to_string())
    })
}

impl SourceConfig {
    /// The source's provider; `None` for a name that is not one (which [`SourceConfig::policy`]
    /// refuses).
    pub fn kind(&self) -> Option<Provider> {
        self.provider.parse().ok()
    }

    /// The source's provider-specific keys, for [`Scheme::from_keys`].
    pub(crate) fn keys(&self) -> Keys {
        let mut keys = Keys::default();
        keys.event_id_header.clone_from(&self.event_id_header);
        keys.event_id_pointer.clone_from(&self.event_id_pointer);
        keys.event_id_field.clone_from(&self.event_id_field);
        keys.signed_url.clone_from(&self.signed_url);
        keys.signature_header.clone_from(&self.signature_header);
        keys.signature_encoding.clone_from(&self.signature_encoding);
        keys.signature_prefix.clone_from(&self.signature_prefix);
        keys.signature_algorithm
            .clone_from(&self.signature_algorithm);
        keys.signed_payload.clone_from(&self.signed_payload);
        keys.timestamp_header.clone_from(&self.timestamp_header);
        keys.audience.clone_from(&self.audience);
        keys.issuers.clone_from(&self.issuers);
        keys.service_account.clone_from(&self.service_account);
        keys.jwks_file.clone_from(&self.jwks_file);
        keys.jwks_url.clone_from(&self.jwks_url);
        keys.allow_any_service_account = self.allow_any_service_account;
        keys.cert_hosts.clone_from(&self.cert_hosts);
        keys.sns_subscription = self.sns_subscription.is_some();
        keys.topic_arns.clone_from(&self.topic_arns);
        keys.allow_any_topic = self.allow_any_topic;
        keys.fetch_ca_file.clone_from(&self.fetch_ca_file);
        keys
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
