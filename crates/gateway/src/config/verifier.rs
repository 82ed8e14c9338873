//! A source's [`Verifier`], built from its flat TOML keys: which keys each provider takes, and
//! the located error naming the key when one is missing, malformed or meant for another
//! provider. What the HTTP path and the tests that sign deliveries both use.

use idemgate_providers::{
    GenericHmac, KeySource, MailgunScheme, NoneScheme, PostmarkScheme, Scheme, Secret,
    SquareScheme, TwilioScheme, Verifier,
};

use super::{ConfigError, SourceConfig};

/// Builds a source's verifier from its config (also used by tests and load generators to sign).
///
/// # Errors
/// A [`ConfigError`] naming the source and the key.
pub fn verifier(sc: &SourceConfig) -> Result<Verifier, ConfigError> {
    let provider = |e: idemgate_providers::ConfigError| sc.invalid("provider", e.to_string());
    // Where the event id is, when the source says: at most one of the three keys.
    let configured_id = || {
        let set: Vec<(&'static str, KeySource)> = [
            (
                "event_id_header",
                sc.event_id_header.clone().map(KeySource::Header),
            ),
            (
                "event_id_pointer",
                sc.event_id_pointer.clone().map(KeySource::JsonPointer),
            ),
            (
                "event_id_field",
                sc.event_id_field.clone().map(KeySource::FormField),
            ),
        ]
        .into_iter()
        .filter_map(|(key, source)| Some((key, source?)))
        .collect();
        match set.as_slice() {
            [] => Ok(None),
            [(_, source)] => Ok(Some(source.clone())),
            [(first, _), (second, _), ..] => Err(sc.invalid(
                second,
                format!(
                    "set one of event_id_header, event_id_pointer and event_id_field, not both {first} and {second}"
                ),
            )),
        }
    };
    let key_source = || {
        configured_id()?.ok_or_else(|| sc.invalid(
            "event_id_header",
            format!(
                "provider {:?} has no built-in place for the event id: add event_id_header = \"X-Event-Id\" (a header the sender sets), event_id_pointer = \"/id\" (a JSON pointer into the body) or event_id_field = \"MessageSid\" (a form parameter)",
                sc.provider
            ),
        ))
    };
    sc.check_fetch_keys()?;
    let signed_url = || {
        sc.signed_url.clone().ok_or_else(|| {
            sc.invalid(
                "signed_url",
                format!(
                    "required for provider {:?}: the public URL the sender was given for this source (the sender signs it)",
                    sc.provider
                ),
            )
        })
    };
    let takes_url = matches!(sc.provider.as_str(), "square" | "twilio");
    if sc.signed_url.is_some() && !takes_url {
        return Err(sc.invalid(
            "signed_url",
            format!(
                "only for provider \"square\" or \"twilio\", not {:?}",
                sc.provider
            ),
        ));
    }
    let generic_only = [
        ("signature_header", sc.signature_header.is_some()),
        ("signature_encoding", sc.signature_encoding.is_some()),
        ("signature_prefix", sc.signature_prefix.is_some()),
        ("signature_algorithm", sc.signature_algorithm.is_some()),
        ("signed_payload", sc.signed_payload.is_some()),
        ("timestamp_header", sc.timestamp_header.is_some()),
    ];
    let id_keys = [
        ("event_id_header", sc.event_id_header.is_some()),
        ("event_id_pointer", sc.event_id_pointer.is_some()),
        ("event_id_field", sc.event_id_field.is_some()),
    ];
    let refuse_set =
        |keys: &[(&'static str, bool)], allowed: &str| match keys.iter().find(|(_, set)| *set) {
            Some((key, _)) => Err(sc.invalid(
                key,
                format!("only for provider {allowed}, not {:?}", sc.provider),
            )),
            None => Ok(()),
        };
    let scheme = match sc.provider.as_str() {
        "generic-hmac" => Scheme::GenericHmac(GenericHmac {
            header: sc.signature_header.clone().ok_or_else(|| {
                sc.invalid("signature_header", "required for provider \"generic-hmac\"")
            })?,
            encoding: sc
                .signature_encoding
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: idemgate_providers::ConfigError| {
                    sc.invalid("signature_encoding", e.to_string())
                })?
                .unwrap_or_default(),
            prefix: sc.signature_prefix.clone(),
            algorithm: sc
                .signature_algorithm
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(|e: idemgate_providers::ConfigError| {
                    sc.invalid("signature_algorithm", e.to_string())
                })?
                .unwrap_or_default(),
            timestamp_header: sc.timestamp_header.clone(),
            signed_payload: sc.signed_payload.clone(),
            event_id: key_source()?,
        }),
        "none" => {
            refuse_set(&generic_only, "\"generic-hmac\"")?;
            Scheme::None(NoneScheme {
                event_id: key_source()?,
            })
        }
        "twilio" | "mailgun" | "postmark" => {
            refuse_set(&generic_only, "\"generic-hmac\"")?;
            let event_id = configured_id()?;
            match sc.provider.as_str() {
                "twilio" => Scheme::Twilio(TwilioScheme {
                    signed_url: signed_url()?,
                    event_id,
                }),
                "mailgun" => Scheme::Mailgun(MailgunScheme { event_id }),
                _ => Scheme::Postmark(PostmarkScheme { event_id }),
            }
        }
        "square" => {
            refuse_set(&generic_only, "\"generic-hmac\"")?;
            refuse_set(
                &id_keys,
                "\"generic-hmac\", \"none\", \"twilio\", \"mailgun\" or \"postmark\"",
            )?;
            Scheme::Square(SquareScheme {
                signed_url: signed_url()?,
            })
        }
        name => {
            for (key, set) in generic_only.into_iter().chain(id_keys) {
                if set {
                    return Err(sc.invalid(
                        key,
                        format!("only for provider \"generic-hmac\" or \"none\", not {name:?}"),
                    ));
                }
            }
            match sc.fetch_scheme()? {
                Some(scheme) => scheme,
                None => Scheme::from_name(name).map_err(provider)?,
            }
        }
    };
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
