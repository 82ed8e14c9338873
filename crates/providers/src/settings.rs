//! A source's provider and its settings, parsed in one step: [`Provider`] is what
//! `provider = "..."` names, [`Keys`] the flat keys a source may set, and
//! [`Scheme::from_keys`] turns the two into the typed [`Scheme`] with its settings.
//!
//! Which provider takes which key is written once, in [`Provider::takes`]: a key set for a
//! provider that does not take it is refused before anything is read, with the providers that do
//! take it named. Each configurable scheme's settings are built by its own `TryFrom<&Keys>`
//! (here for the settings declared in `scheme.rs`, in [`pubsub`](crate::pubsub) and
//! [`sns`](crate::sns) for theirs), so a new provider is its module plus one arm in
//! [`Scheme::from_keys`] and one in [`Provider::takes`].

use std::path::PathBuf;
use std::str::FromStr;

use crate::error::ConfigError;
use crate::provider::Provider;
use crate::scheme::{
    GenericHmac, KeySource, MailgunScheme, NoneScheme, PostmarkScheme, Scheme, SquareScheme,
    TwilioScheme,
};

/// The provider-specific keys of a source, as written in its configuration (each documented in
/// `idemgate.example.toml`). A key a provider does not take is refused by
/// [`Scheme::from_keys`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Keys {
    pub event_id_header: Option<String>,
    pub event_id_pointer: Option<String>,
    pub event_id_field: Option<String>,
    pub signed_url: Option<String>,
    pub signature_header: Option<String>,
    pub signature_encoding: Option<String>,
    pub signature_prefix: Option<String>,
    pub signature_algorithm: Option<String>,
    pub signed_payload: Option<String>,
    pub timestamp_header: Option<String>,
    pub audience: Option<String>,
    pub issuers: Option<Vec<String>>,
    pub service_account: Option<String>,
    pub jwks_file: Option<PathBuf>,
    pub jwks_url: Option<String>,
    pub allow_any_service_account: Option<bool>,
    pub cert_hosts: Option<Vec<String>>,
    /// Whether `sns_subscription` is set: the caller reads its value, this only where it is
    /// taken.
    pub sns_subscription: bool,
    pub topic_arns: Option<Vec<String>>,
    pub allow_any_topic: Option<bool>,
    /// The caller reads the file (its document fetches' authorities); here only where it is
    /// taken.
    pub fetch_ca_file: Option<PathBuf>,
}

impl Keys {
    /// Every key, in the order they are checked.
    pub const NAMES: [&'static str; 21] = [
        "audience",
        "issuers",
        "service_account",
        "jwks_file",
        "jwks_url",
        "allow_any_service_account",
        "cert_hosts",
        "sns_subscription",
        "topic_arns",
        "allow_any_topic",
        "fetch_ca_file",
        "signed_url",
        "signature_header",
        "signature_encoding",
        "signature_prefix",
        "signature_algorithm",
        "signed_payload",
        "timestamp_header",
        "event_id_header",
        "event_id_pointer",
        "event_id_field",
    ];

    /// The keys that are set, in the order of [`Keys::NAMES`].
    pub fn set(&self) -> impl Iterator<Item = &'static str> + '_ {
        let set = [
            self.audience.is_some(),
            self.issuers.is_some(),
            self.service_account.is_some(),
            self.jwks_file.is_some(),
            self.jwks_url.is_some(),
            self.allow_any_service_account.is_some(),
            self.cert_hosts.is_some(),
            self.sns_subscription,
            self.topic_arns.is_some(),
            self.allow_any_topic.is_some(),
            self.fetch_ca_file.is_some(),
            self.signed_url.is_some(),
            self.signature_header.is_some(),
            self.signature_encoding.is_some(),
            self.signature_prefix.is_some(),
            self.signature_algorithm.is_some(),
            self.signed_payload.is_some(),
            self.timestamp_header.is_some(),
            self.event_id_header.is_some(),
            self.event_id_pointer.is_some(),
            self.event_id_field.is_some(),
        ];
        Self::NAMES
            .into_iter()
            .zip(set)
            .filter_map(|(key, set)| set.then_some(key))
    }

    /// Where the event id is, when the source says: at most one of the three `event_id_*` keys.
    fn event_id(&self) -> Result<Option<KeySource>, SettingError> {
        let set: Vec<(&'static str, KeySource)> = [
            (
                "event_id_header",
                self.event_id_header.clone().map(KeySource::Header),
            ),
            (
                "event_id_pointer",
                self.event_id_pointer.clone().map(KeySource::JsonPointer),
            ),
            (
                "event_id_field",
                self.event_id_field.clone().map(KeySource::FormField),
            ),
        ]
        .into_iter()
        .filter_map(|(key, source)| Some((key, source?)))
        .collect();
        match set.as_slice() {
            [] => Ok(None),
            [(_, source)] => Ok(Some(source.clone())),
            [(first, _), (second, _), ..] => Err(SettingError::new(
                second,
                format!(
                    "set one of event_id_header, event_id_pointer and event_id_field, not both {first} and {second}"
                ),
            )),
        }
    }

    /// Where the event id is, for a provider that has no built-in place for it.
    fn required_event_id(&self, provider: Provider) -> Result<KeySource, SettingError> {
        self.event_id()?.ok_or_else(|| SettingError::new(
            "event_id_header",
            format!(
                "provider {:?} has no built-in place for the event id: add event_id_header = \"X-Event-Id\" (a header the sender sets), event_id_pointer = \"/id\" (a JSON pointer into the body) or event_id_field = \"MessageSid\" (a form parameter)",
                provider.as_str()
            ),
        ))
    }

    /// `signed_url`, for a provider that requires it.
    fn required_signed_url(&self, provider: Provider) -> Result<String, SettingError> {
        self.signed_url.clone().ok_or_else(|| {
            SettingError::new(
                "signed_url",
                format!(
                    "required for provider {:?}: the public URL the sender was given for this source (the sender signs it)",
                    provider.as_str()
                ),
            )
        })
    }
}

/// A source's setting that cannot be used: the key, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
pub struct SettingError {
    /// The key at fault, as configuration writes it.
    pub key: &'static str,
    /// What is wrong with it, in a sentence.
    pub why: String,
}

impl SettingError {
    pub(crate) fn new(key: &'static str, why: impl Into<String>) -> Self {
        Self {
            key,
            why: why.into(),
        }
    }
}

/// Refuses the first key of `keys` that is set but not taken by this provider, naming the
/// providers that take it.
fn check(provider: Provider, keys: &Keys) -> Result<(), SettingError> {
    for key in keys.set() {
        if provider.takes(key) {
            continue;
        }
        if key == "fetch_ca_file" {
            return Err(SettingError::new(
                key,
                format!(
                    "only for providers that fetch documents (\"pubsub\" with jwks_url, \"sns\"), not {:?}",
                    provider.as_str()
                ),
            ));
        }
        // The configurable schemes first: they are where most of these keys belong.
        let mut takers: Vec<Provider> =
            Provider::ALL.into_iter().filter(|p| p.takes(key)).collect();
        takers.sort_by_key(|p| !matches!(p, Provider::GenericHmac | Provider::None));
        let names: Vec<String> = takers.iter().map(|p| format!("{:?}", p.as_str())).collect();
        let list = match names.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => "none".to_owned(),
        };
        return Err(SettingError::new(
            key,
            format!("only for provider {list}, not {:?}", provider.as_str()),
        ));
    }
    Ok(())
}

impl Scheme {
    /// The scheme of `provider` with its settings from `keys`, in one step: a key `provider`
    /// does not take is refused (naming the providers that do), then the provider's own settings
    /// are read (a JWKS file is read now). What the settings cannot be is refused again by
    /// [`Verifier::new`](crate::Verifier::new), which also sees the secrets.
    ///
    /// # Errors
    /// A [`SettingError`] naming the key.
    pub fn from_keys(provider: Provider, keys: &Keys) -> Result<Self, SettingError> {
        check(provider, keys)?;
        Ok(match provider {
            Provider::Stripe => Self::Stripe,
            Provider::Github => Self::Github,
            Provider::Shopify => Self::Shopify,
            Provider::Slack => Self::Slack,
            Provider::StandardWebhooks => Self::StandardWebhooks,
            Provider::Svix => Self::Svix,
            Provider::Paddle => Self::Paddle,
            Provider::Sendgrid => Self::Sendgrid,
            Provider::Square => Self::Square(keys.try_into()?),
            Provider::Twilio => Self::Twilio(keys.try_into()?),
            Provider::Mailgun => Self::Mailgun(keys.try_into()?),
            Provider::Postmark => Self::Postmark(keys.try_into()?),
            Provider::Pubsub => Self::Pubsub(keys.try_into()?),
            Provider::Sns => Self::Sns(keys.try_into()?),
            Provider::GenericHmac => Self::GenericHmac(keys.try_into()?),
            Provider::None => Self::None(keys.try_into()?),
        })
    }
}

impl TryFrom<&Keys> for GenericHmac {
    type Error = SettingError;
    fn try_from(keys: &Keys) -> Result<Self, SettingError> {
        fn parsed<T: FromStr<Err = ConfigError>>(
            key: &'static str,
            value: &Option<String>,
        ) -> Result<Option<T>, SettingError> {
            value
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: ConfigError| SettingError::new(key, e.to_string()))
        }
        Ok(Self {
            header: keys.signature_header.clone().ok_or_else(|| {
                SettingError::new("signature_header", "required for provider \"generic-hmac\"")
            })?,
            encoding: parsed("signature_encoding", &keys.signature_encoding)?.unwrap_or_default(),
            prefix: keys.signature_prefix.clone(),
            algorithm: parsed("signature_algorithm", &keys.signature_algorithm)?
                .unwrap_or_default(),
            timestamp_header: keys.timestamp_header.clone(),
            signed_payload: keys.signed_payload.clone(),
            event_id: keys.required_event_id(Provider::GenericHmac)?,
        })
    }
}

impl TryFrom<&Keys> for NoneScheme {
    type Error = SettingError;
    fn try_from(keys: &Keys) -> Result<Self, SettingError> {
        Ok(Self {
            event_id: keys.required_event_id(Provider::None)?,
        })
    }
}

impl TryFrom<&Keys> for SquareScheme {
    type Error = SettingError;
    fn try_from(keys: &Keys) -> Result<Self, SettingError> {
        Ok(Self {
            signed_url: keys.required_signed_url(Provider::Square)?,
        })
    }
}

impl TryFrom<&Keys> for TwilioScheme {
    type Error = SettingError;
    fn try_from(keys: &Keys) -> Result<Self, SettingError> {
        Ok(Self {
            event_id: keys.event_id()?,
            signed_url: keys.required_signed_url(Provider::Twilio)?,
        })
    }
}

impl TryFrom<&Keys> for MailgunScheme {
    type Error = SettingError;
    fn try_from(keys: &Keys) -> Result<Self, SettingError> {
        Ok(Self {
            event_id: keys.event_id()?,
        })
    }
}

impl TryFrom<&Keys> for PostmarkScheme {
    type Error = SettingError;
    fn try_from(keys: &Keys) -> Result<Self, SettingError> {
        Ok(Self {
            event_id: keys.event_id()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_reads_back_from_its_name() {
        for p in Provider::ALL {
            assert_eq!(p.as_str().parse::<Provider>().unwrap(), p);
            assert_eq!(Scheme::from_name(p.as_str()).unwrap().provider(), p);
        }
        assert!(matches!(
            "custom".parse::<Provider>(),
            Err(ConfigError::UnknownScheme { .. })
        ));
    }

    #[test]
    fn each_key_set_is_named_by_its_own_name() {
        let one = |f: fn(&mut Keys)| {
            let mut keys = Keys::default();
            f(&mut keys);
            keys.set().collect::<Vec<_>>()
        };
        /// A key's name, and how to set it alone.
        type Setter = (&'static str, fn(&mut Keys));
        let each: [Setter; 21] = [
            ("audience", |k| k.audience = Some(String::new())),
            ("issuers", |k| k.issuers = Some(Vec::new())),
            ("service_account", |k| {
                k.service_account = Some(String::new())
            }),
            ("jwks_file", |k| k.jwks_file = Some(PathBuf::new())),
            ("jwks_url", |k| k.jwks_url = Some(String::new())),
            ("allow_any_service_account", |k| {
                k.allow_any_service_account = Some(true);
            }),
            ("cert_hosts", |k| k.cert_hosts = Some(Vec::new())),
            ("sns_subscription", |k| k.sns_subscription = true),
            ("topic_arns", |k| k.topic_arns = Some(Vec::new())),
            ("allow_any_topic", |k| k.allow_any_topic = Some(true)),
            ("fetch_ca_file", |k| k.fetch_ca_file = Some(PathBuf::new())),
            ("signed_url", |k| k.signed_url = Some(String::new())),
            ("signature_header", |k| {
                k.signature_header = Some(String::new())
            }),
            ("signature_encoding", |k| {
                k.signature_encoding = Some(String::new());
            }),
            ("signature_prefix", |k| {
                k.signature_prefix = Some(String::new())
            }),
            ("signature_algorithm", |k| {
                k.signature_algorithm = Some(String::new());
            }),
            ("signed_payload", |k| k.signed_payload = Some(String::new())),
            ("timestamp_header", |k| {
                k.timestamp_header = Some(String::new())
            }),
            ("event_id_header", |k| {
                k.event_id_header = Some(String::new())
            }),
            ("event_id_pointer", |k| {
                k.event_id_pointer = Some(String::new())
            }),
            ("event_id_field", |k| k.event_id_field = Some(String::new())),
        ];
        for (name, f) in each {
            assert_eq!(one(f), [name], "{name}");
        }
        let mut names: Vec<_> = each.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        let mut known = Keys::NAMES.to_vec();
        known.sort_unstable();
        assert_eq!(names, known, "every key is covered once");
    }

    #[test]
    fn every_key_is_taken_by_some_provider() {
        for key in Keys::NAMES {
            assert!(
                Provider::ALL.into_iter().any(|p| p.takes(key)),
                "{key} is taken by no provider"
            );
        }
    }

    #[test]
    fn a_key_for_another_provider_is_refused_with_the_providers_that_take_it() {
        let keys = Keys {
            event_id_field: Some("MessageSid".into()),
            ..Keys::default()
        };
        let err = Scheme::from_keys(Provider::Stripe, &keys).unwrap_err();
        assert_eq!(err.key, "event_id_field");
        assert_eq!(
            err.why,
            "only for provider \"generic-hmac\", \"none\", \"twilio\", \"mailgun\" or \"postmark\", not \"stripe\""
        );
        let keys = Keys {
            signature_header: Some("X-Sig".into()),
            ..Keys::default()
        };
        let err = Scheme::from_keys(Provider::None, &keys).unwrap_err();
        assert_eq!(
            err.to_string(),
            "signature_header: only for provider \"generic-hmac\", not \"none\""
        );
        let keys = Keys {
            topic_arns: Some(vec![]),
            ..Keys::default()
        };
        let err = Scheme::from_keys(Provider::Pubsub, &keys).unwrap_err();
        assert_eq!(
            err.to_string(),
            "topic_arns: only for provider \"sns\", not \"pubsub\""
        );
    }

    #[test]
    fn settings_are_read_into_the_providers_own_types() {
        let keys = Keys {
            signature_header: Some("X-Sig".into()),
            signature_encoding: Some("base64".into()),
            event_id_pointer: Some("/id".into()),
            ..Keys::default()
        };
        let Scheme::GenericHmac(g) = Scheme::from_keys(Provider::GenericHmac, &keys).unwrap()
        else {
            panic!("not generic-hmac");
        };
        assert_eq!(g.header, "X-Sig");
        assert_eq!(g.encoding, crate::Encoding::Base64);
        assert_eq!(g.event_id, KeySource::JsonPointer("/id".into()));
        let bad = Keys {
            signature_algorithm: Some("md5".into()),
            ..keys
        };
        let err = Scheme::from_keys(Provider::GenericHmac, &bad).unwrap_err();
        assert_eq!(err.key, "signature_algorithm");
        let err = Scheme::from_keys(Provider::Square, &Keys::default()).unwrap_err();
        assert_eq!(err.key, "signed_url");
        let err = Scheme::from_keys(Provider::None, &Keys::default()).unwrap_err();
        assert_eq!(err.key, "event_id_header");
    }
}
