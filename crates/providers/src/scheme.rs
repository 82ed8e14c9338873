//! What a source's sender signs and where its event id lives: [`Scheme`] and the settings of the
//! configurable schemes.

use std::fmt;
use std::str::FromStr;

use crate::error::ConfigError;
use crate::provider::Provider;

/// A webhook signature scheme, chosen per source in configuration.
///
/// The built-in schemes carry no settings; `generic-hmac` and `none` do. See the crate README for
/// what each one signs and where each event id comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// `Stripe-Signature: t=..,v1=..`; event id: body `id`.
    Stripe,
    /// `X-Hub-Signature-256: sha256=..`; event id: `X-GitHub-Hook-ID:X-GitHub-Delivery`.
    Github,
    /// `X-Shopify-Hmac-SHA256` (base64); event id: `X-Shopify-Webhook-Id`.
    Shopify,
    /// `X-Slack-Signature: v0=..` + `X-Slack-Request-Timestamp`; event id: body `event_id`.
    Slack,
    /// `webhook-signature: v1,..` + `webhook-id` + `webhook-timestamp`; event id: `webhook-id`.
    StandardWebhooks,
    /// Standard Webhooks with `svix-` header names; event id: `svix-id`.
    Svix,
    /// `Paddle-Signature: ts=..;h1=..`; event id: body `event_id`.
    Paddle,
    /// An HMAC over the body (and optionally a timestamp) in a header of your choosing.
    GenericHmac(GenericHmac),
    /// No signature: for trusted internal senders. The gateway requires a bearer token instead.
    None(NoneScheme),
    /// SendGrid's Event Webhook: ECDSA P-256 over timestamp + body; a batch, one event per
    /// `sg_event_id`.
    Sendgrid,
    /// Pub/Sub push with authentication: an RS256 OIDC token; event id: body
    /// `message.messageId`.
    Pubsub(crate::pubsub::Pubsub),
    /// Amazon SNS: an RSA signature over the message's canonical fields with the certificate at
    /// `SigningCertURL`; event id: body `MessageId`.
    Sns(crate::sns::Sns),
    /// `x-square-hmacsha256-signature` (base64 HMAC-SHA256 of the notification URL + body);
    /// event id: body `event_id`.
    Square(SquareScheme),
    /// `X-Twilio-Signature` (base64 HMAC-SHA1 of the URL + sorted form parameters, or of the URL
    /// with `bodySHA256` for other bodies); event id: `I-Twilio-Idempotency-Token`.
    Twilio(TwilioScheme),
    /// A `signature` object in the JSON body (hex HMAC-SHA256 of timestamp + token); event id:
    /// body `signature.token`.
    Mailgun(MailgunScheme),
    /// No signature: HTTP basic auth credentials (`user:password` secrets); event id: per
    /// `RecordType` from the body.
    Postmark(PostmarkScheme),
}

impl Scheme {
    /// Every configuration name, in the order the README lists them: [`Provider::ALL`]'s.
    pub const NAMES: [&'static str; 16] = {
        let mut names = [""; 16];
        let mut i = 0;
        while i < names.len() {
            names[i] = Provider::ALL[i].as_str();
            i += 1;
        }
        names
    };

    /// The scheme called `name` in configuration.
    ///
    /// `generic-hmac`, `none`, `pubsub`, `sns`, `square` and `twilio` come back with their
    /// settings empty or default ([`GenericHmac::default`], [`NoneScheme::default`],
    /// [`Pubsub::default`](crate::pubsub::Pubsub), [`Sns::default`](crate::sns::Sns), and
    /// `square` and `twilio` without their `signed_url`): fill them in before building a
    /// [`Verifier`](crate::Verifier), which refuses what cannot work (a `pubsub` without an
    /// audience), or build the scheme from a source's keys with [`Scheme::from_keys`].
    /// `mailgun` and `postmark` come back with their built-in event ids.
    ///
    /// # Errors
    /// [`ConfigError::UnknownScheme`] for any other name.
    pub fn from_name(name: &str) -> Result<Self, ConfigError> {
        Ok(match name.parse::<Provider>()? {
            Provider::Stripe => Self::Stripe,
            Provider::Github => Self::Github,
            Provider::Shopify => Self::Shopify,
            Provider::Slack => Self::Slack,
            Provider::StandardWebhooks => Self::StandardWebhooks,
            Provider::Svix => Self::Svix,
            Provider::Paddle => Self::Paddle,
            Provider::GenericHmac => Self::GenericHmac(GenericHmac::default()),
            Provider::None => Self::None(NoneScheme::default()),
            Provider::Sendgrid => Self::Sendgrid,
            Provider::Pubsub => Self::Pubsub(crate::pubsub::Pubsub::default()),
            Provider::Sns => Self::Sns(crate::sns::Sns::default()),
            Provider::Square => Self::Square(SquareScheme::default()),
            Provider::Twilio => Self::Twilio(TwilioScheme::default()),
            Provider::Mailgun => Self::Mailgun(MailgunScheme::default()),
            Provider::Postmark => Self::Postmark(PostmarkScheme::default()),
        })
    }

    /// The provider whose scheme this is.
    pub fn provider(&self) -> Provider {
        match self {
            Self::Stripe => Provider::Stripe,
            Self::Github => Provider::Github,
            Self::Shopify => Provider::Shopify,
            Self::Slack => Provider::Slack,
            Self::StandardWebhooks => Provider::StandardWebhooks,
            Self::Svix => Provider::Svix,
            Self::Paddle => Provider::Paddle,
            Self::GenericHmac(_) => Provider::GenericHmac,
            Self::None(_) => Provider::None,
            Self::Sendgrid => Provider::Sendgrid,
            Self::Pubsub(_) => Provider::Pubsub,
            Self::Sns(_) => Provider::Sns,
            Self::Square(_) => Provider::Square,
            Self::Twilio(_) => Provider::Twilio,
            Self::Mailgun(_) => Provider::Mailgun,
            Self::Postmark(_) => Provider::Postmark,
        }
    }

    /// The configuration name (`"stripe"`, `"generic-hmac"`, ...).
    pub fn name(&self) -> &'static str {
        self.provider().as_str()
    }

    /// Whether verifying needs documents fetched over HTTPS: a `pubsub` JWKS by URL, `sns`
    /// certificates (see [`Verifier::needs`](crate::Verifier::needs)).
    pub fn fetches(&self) -> bool {
        match self {
            Self::Sns(_) => true,
            Self::Pubsub(p) => matches!(p.jwks, crate::pubsub::Jwks::Url(_)),
            _ => false,
        }
    }

    /// Whether the scheme signs a timestamp, so that the verifier's tolerance applies.
    pub fn signs_timestamp(&self) -> bool {
        match self {
            Self::Stripe
            | Self::Slack
            | Self::StandardWebhooks
            | Self::Svix
            | Self::Paddle
            | Self::Mailgun(_) => true,
            // A token's iat and exp; SNS's publication time (see the sns module on retries).
            Self::Sendgrid | Self::Pubsub(_) | Self::Sns(_) => true,
            Self::Github
            | Self::Shopify
            | Self::None(_)
            | Self::Square(_)
            | Self::Twilio(_)
            | Self::Postmark(_) => false,
            Self::GenericHmac(g) => g.timestamp_header.is_some(),
        }
    }

    /// The largest payload the sender documents sending, with where it says so: a source's body
    /// limit defaults to at least this, and `idemgate check` warns when one is set below it.
    /// `None` where the sender documents no maximum (its payloads are small).
    pub fn documented_max_body(&self) -> Option<(usize, &'static str)> {
        match self {
            // "Payloads are capped at 25 MB": docs.github.com, "Webhook events and payloads"
            // (checked 2026-12).
            Self::Github => Some((25 << 20, "GitHub caps webhook payloads at 25 MB")),
            _ => None,
        }
    }

    /// Whether a delivery may hold several events, each with its own id (SendGrid's array): see
    /// [`Verified::batch`](crate::Verified::batch).
    pub fn is_batch(&self) -> bool {
        matches!(self, Self::Sendgrid)
    }

    /// Whether the scheme authenticates the sender itself, with a signature or (Postmark)
    /// credentials: all but `none`.
    pub fn is_signed(&self) -> bool {
        !matches!(self, Self::None(_))
    }

    /// Whether what authenticates the sender also covers every byte of the body, so that a
    /// tampered body is refused. Not so for `none`, for Postmark (credentials, no signature),
    /// for Pub/Sub (its token authenticates the sender, not the body), for SNS (it signs the
    /// message's canonical fields, not its bytes: the JSON's spacing and the fields outside the
    /// signed set, such as a notification's `UnsubscribeURL`, are not covered), and for Mailgun,
    /// whose signature covers only its timestamp and token: the rest of a Mailgun body
    /// (`event-data`) is not signed, and its token is what keeps a replay from being processed
    /// (see the crate README).
    pub fn signs_body(&self) -> bool {
        !matches!(
            self,
            Self::None(_) | Self::Mailgun(_) | Self::Postmark(_) | Self::Pubsub(_) | Self::Sns(_)
        )
    }

    /// Where in a JSON body the scheme reads the event id (an RFC 6901 pointer), when it reads it
    /// from the body rather than a header: what a sender (or `idemgate send`) must fill in.
    pub fn body_event_id(&self) -> Option<&str> {
        match self {
            Self::Stripe => Some("/id"),
            Self::Pubsub(_) => Some(crate::pubsub::EVENT_ID_POINTER),
            Self::Sns(_) => Some(crate::sns::EVENT_ID_POINTER),
            Self::Slack | Self::Paddle | Self::Square(_) => Some("/event_id"),
            Self::Mailgun(MailgunScheme { event_id: None }) => Some("/signature/token"),
            // A body without a `RecordType` (an inbound email) is identified by its `MessageID`.
            Self::Postmark(PostmarkScheme { event_id: None }) => Some("/MessageID"),
            Self::Twilio(TwilioScheme {
                event_id: Some(KeySource::JsonPointer(p)),
                ..
            })
            | Self::Mailgun(MailgunScheme {
                event_id: Some(KeySource::JsonPointer(p)),
            })
            | Self::Postmark(PostmarkScheme {
                event_id: Some(KeySource::JsonPointer(p)),
            }) => Some(p),
            Self::GenericHmac(GenericHmac {
                event_id: KeySource::JsonPointer(p),
                ..
            })
            | Self::None(NoneScheme {
                event_id: KeySource::JsonPointer(p),
            }) => Some(p),
            _ => None,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheme {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        Self::from_name(s)
    }
}

/// How a `generic-hmac` signature is written in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// Hexadecimal, either case.
    #[default]
    Hex,
    /// Standard base64 (RFC 4648 §4); padding optional.
    Base64,
}

impl FromStr for Encoding {
    type Err = ConfigError;
    /// `hex` or `base64`.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "hex" => Ok(Self::Hex),
            "base64" => Ok(Self::Base64),
            _ => Err(ConfigError::UnknownEncoding { name: s.to_owned() }),
        }
    }
}

/// The hash under a `generic-hmac` signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// HMAC-SHA1, for legacy senders only.
    Sha1,
    /// HMAC-SHA256.
    #[default]
    Sha256,
    /// HMAC-SHA512.
    Sha512,
}

impl FromStr for Algorithm {
    type Err = ConfigError;
    /// `sha1`, `sha256` or `sha512`.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "sha1" => Ok(Self::Sha1),
            "sha256" => Ok(Self::Sha256),
            "sha512" => Ok(Self::Sha512),
            _ => Err(ConfigError::UnknownAlgorithm { name: s.to_owned() }),
        }
    }
}

/// Where a configurable scheme finds the event id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A request header, by name (case-insensitive).
    Header(String),
    /// An RFC 6901 JSON pointer into the body, e.g. `/data/id`. A string value is taken as is, a
    /// number as its JSON text.
    JsonPointer(String),
    /// A parameter of an `application/x-www-form-urlencoded` body, by name (case-sensitive),
    /// e.g. Twilio's `MessageSid`. When it appears several times, the first is taken.
    FormField(String),
}

impl Default for KeySource {
    /// An empty header name, which a [`Verifier`](crate::Verifier) refuses: there is no sensible
    /// default.
    fn default() -> Self {
        Self::Header(String::new())
    }
}

/// The settings of the `generic-hmac` scheme.
///
/// The signature is `prefix + encode(HMAC(secret, signed_payload))` in `header`. Without a
/// timestamp header the signed payload is the body; with one, it is `signed_payload` with
/// `{timestamp}` and `{body}` replaced (default `"{timestamp}.{body}"`), and the timestamp (Unix
/// seconds) must be within the verifier's tolerance.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GenericHmac {
    /// The header carrying the signature. Required. When it appears several times, any value may
    /// match.
    pub header: String,
    /// How the signature is encoded.
    pub encoding: Encoding,
    /// Text before the encoded signature, such as `sha256=`; required in the header when set.
    pub prefix: Option<String>,
    /// The hash.
    pub algorithm: Algorithm,
    /// The header carrying the signed Unix timestamp (whole seconds), if the sender signs one.
    pub timestamp_header: Option<String>,
    /// How the signed bytes are laid out: a template with `{body}` exactly once and, when there is
    /// a timestamp header, `{timestamp}` exactly once; any other text is literal. `None` means
    /// `"{body}"` without a timestamp header and `"{timestamp}.{body}"` with one.
    pub signed_payload: Option<String>,
    /// Where the event id is.
    pub event_id: KeySource,
}

/// The settings of the `none` scheme: no signature, just where the event id is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NoneScheme {
    /// Where the event id is.
    pub event_id: KeySource,
}

/// The settings of the `square` scheme.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SquareScheme {
    /// The notification URL exactly as the webhook subscription shows it in Square's Developer
    /// Console: it is part of the signed bytes. Required.
    pub signed_url: String,
}

/// The settings of the `twilio` scheme.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TwilioScheme {
    /// The public URL Twilio was given for the webhook, without its query string (the request's
    /// own query is appended, as Twilio signs the URL it requests) and without a `#` fragment
    /// (connection overrides are not signed). Required.
    pub signed_url: String,
    /// Where the event id is; `None` for the `I-Twilio-Idempotency-Token` header.
    pub event_id: Option<KeySource>,
}

/// The settings of the `mailgun` scheme.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MailgunScheme {
    /// Where the event id is; `None` for the body's `signature.token`.
    pub event_id: Option<KeySource>,
}

/// The settings of the `postmark` scheme.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PostmarkScheme {
    /// Where the event id is; `None` for the id built from the body by its `RecordType` (see
    /// the [`postmark`](crate::postmark) module).
    pub event_id: Option<KeySource>,
}
