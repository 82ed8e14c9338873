//! [`Verifier`]: one source's scheme, active secrets and tolerance, checking each delivery.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};
use idemgate_core::EventId;

use crate::error::{ConfigError, SignError, VerifyError};
use crate::generic::{Compiled, IdSource};
use crate::scheme::{Algorithm, Scheme};
use crate::secret::Secret;
use crate::standard_webhooks::{self as sw, Names};
use crate::util::{Keyed, check_fresh, event_id_from_body, event_id_from_header};
use crate::{github, paddle, shopify, slack, stripe, svix};

/// What a verified delivery yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The sender's event id, validated.
    pub event_id: EventId,
    /// The signed timestamp, for schemes that sign one.
    pub signed_at: Option<SystemTime>,
}

/// One delivery as a verifier sees it: what [`Verifier::verify_delivery`] may look at.
///
/// Most schemes read only the headers and the body; build it with [`Delivery::new`] and add what a
/// scheme needs besides ([`with_query`](Self::with_query)).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Delivery<'a> {
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The raw body bytes received.
    pub body: &'a [u8],
    /// The request target's query string, without the `?` (schemes that sign the full URL).
    pub query: Option<&'a str>,
}

impl<'a> Delivery<'a> {
    /// A delivery of `body` with `headers`, and nothing else known.
    pub fn new(headers: &'a HeaderMap, body: &'a [u8]) -> Self {
        Self {
            headers,
            body,
            query: None,
        }
    }

    /// The same delivery, received at a target with this query string (without the `?`).
    #[must_use]
    pub fn with_query(mut self, query: Option<&'a str>) -> Self {
        self.query = query;
        self
    }
}

/// The scheme, validated and ready to run.
#[derive(Debug)]
enum Plan {
    Stripe,
    Github,
    Shopify,
    Slack,
    StandardWebhooks(&'static Names),
    Paddle,
    Generic(Box<Compiled>),
    Unsigned(IdSource),
}

/// Verifies deliveries for one source: its [`Scheme`], its active secrets (several during
/// rotation; any may match) and the timestamp tolerance.
///
/// The tolerance is a replay guard on the signed timestamp, **not** the retry window: every retry
/// is signed afresh with a new timestamp, and how long an event id stays deduplicated is set by
/// the source's delivery contract, not here.
#[derive(Debug)]
pub struct Verifier {
    scheme: Scheme,
    plan: Plan,
    keys: Vec<Keyed>,
    tolerance: Duration,
}

impl Verifier {
    /// The default timestamp tolerance: 5 minutes, as in Stripe's, Slack's and the Standard
    /// Webhooks libraries.
    pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

    /// Validates a source's scheme and secrets. Standard Webhooks and Svix secrets
    /// (`whsec_<base64>`) are decoded here, once; every secret is turned into a keyed HMAC.
    ///
    /// # Errors
    /// - [`ConfigError::NoSecrets`] for a signed scheme with no secret, and
    ///   [`ConfigError::SecretsNotAllowed`] for `none` with any;
    /// - [`ConfigError::Secret`] naming the index of a secret that is empty, ends with a line
    ///   break, or (Standard Webhooks, Svix) is not `whsec_` + base64;
    /// - [`ConfigError::Missing`], [`ConfigError::HeaderName`], [`ConfigError::JsonPointer`] or
    ///   [`ConfigError::Template`] or [`ConfigError::Setting`] for a `generic-hmac` or `none`
    ///   setting that cannot work;
    /// - [`ConfigError::ZeroTolerance`].
    pub fn new(
        scheme: Scheme,
        secrets: Vec<Secret>,
        tolerance: Duration,
    ) -> Result<Self, ConfigError> {
        if tolerance.is_zero() {
            return Err(ConfigError::ZeroTolerance);
        }
        let name = scheme.name();
        let (plan, algorithm) = match &scheme {
            Scheme::Stripe => (Plan::Stripe, Algorithm::Sha256),
            Scheme::Github => (Plan::Github, Algorithm::Sha256),
            Scheme::Shopify => (Plan::Shopify, Algorithm::Sha256),
            Scheme::Slack => (Plan::Slack, Algorithm::Sha256),
            Scheme::StandardWebhooks => (Plan::StandardWebhooks(&sw::STANDARD), Algorithm::Sha256),
            Scheme::Svix => (Plan::StandardWebhooks(&svix::SVIX), Algorithm::Sha256),
            Scheme::Paddle => (Plan::Paddle, Algorithm::Sha256),
            Scheme::GenericHmac(config) => {
                let compiled = Compiled::new(config)?;
                let algorithm = compiled.algorithm();
                (Plan::Generic(Box::new(compiled)), algorithm)
            }
            Scheme::None(config) => (
                Plan::Unsigned(IdSource::compile(&config.event_id, name)?),
                Algorithm::Sha256,
            ),
        };
        match (&plan, secrets.is_empty()) {
            (Plan::Unsigned(_), false) => return Err(ConfigError::SecretsNotAllowed),
            (Plan::Unsigned(_), true) => {}
            (_, true) => return Err(ConfigError::NoSecrets { scheme: name }),
            (_, false) => {}
        }
        let decodes = matches!(plan, Plan::StandardWebhooks(_));
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(index, secret)| {
                let refuse = |why| ConfigError::Secret {
                    index,
                    scheme: name,
                    why,
                };
                let bytes = secret.as_bytes();
                if bytes.is_empty() {
                    return Err(refuse("empty"));
                }
                if bytes.ends_with(b"\n") || bytes.ends_with(b"\r") {
                    return Err(refuse("ends with a line break (read from a file?)"));
                }
                if decodes {
                    let key = sw::decode_secret(bytes).map_err(refuse)?;
                    Ok(Keyed::new(algorithm, &key))
                } else {
                    Ok(Keyed::new(algorithm, bytes))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            scheme,
            plan,
            keys,
            tolerance,
        })
    }

    /// The scheme this verifier checks.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// The timestamp tolerance.
    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// How many secrets are active.
    pub fn secret_count(&self) -> usize {
        self.keys.len()
    }

    /// Checks one delivery: the signature first (constant-time, against every active secret and
    /// every signature the request carries), then the signed timestamp against the tolerance in
    /// both directions, then the event id.
    ///
    /// `body` must be the raw bytes received. `now` is the receive time (passed in so that tests
    /// are deterministic).
    ///
    /// With the `none` scheme nothing is checked here: the gateway must require its bearer token.
    ///
    /// # Errors
    /// 401-class: [`VerifyError::MissingHeader`], [`VerifyError::MalformedHeader`] (including a
    /// header that is not UTF-8), [`VerifyError::BadSignature`], [`VerifyError::StaleTimestamp`],
    /// [`VerifyError::FutureTimestamp`]. 400-class, only once the signature is good:
    /// [`VerifyError::MissingEventId`], [`VerifyError::InvalidEventId`],
    /// [`VerifyError::InvalidJson`]. See [`VerifyError::status`].
    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Verified, VerifyError> {
        self.verify_delivery(&Delivery::new(headers, body), now)
    }

    /// [`verify`](Self::verify) with everything the gateway knows of the request: what schemes
    /// that sign more than the headers and body need.
    ///
    /// # Errors
    /// As [`verify`](Self::verify).
    pub fn verify_delivery(
        &self,
        delivery: &Delivery<'_>,
        now: SystemTime,
    ) -> Result<Verified, VerifyError> {
        let (headers, body) = (delivery.headers, delivery.body);
        let keys = &self.keys;
        let signed_at = match &self.plan {
            Plan::Stripe => Some(stripe::check(keys, headers, body)?),
            Plan::Github => {
                github::check(keys, headers, body)?;
                None
            }
            Plan::Shopify => {
                shopify::check(keys, headers, body)?;
                None
            }
            Plan::Slack => Some(slack::check(keys, headers, body)?),
            Plan::StandardWebhooks(names) => Some(sw::check(names, keys, headers, body)?),
            Plan::Paddle => Some(paddle::check(keys, headers, body)?),
            Plan::Generic(compiled) => compiled.check(keys, headers, body)?,
            Plan::Unsigned(_) => None,
        };
        if let Some(at) = signed_at {
            check_fresh(at, now, self.tolerance)?;
        }
        let event_id = match &self.plan {
            Plan::Stripe => event_id_from_body(body, stripe::EVENT_ID_POINTER)?,
            Plan::Github => github::event_id(headers)?,
            Plan::Shopify => event_id_from_header(headers, &shopify::WEBHOOK_ID_HEADER)?,
            Plan::Slack => event_id_from_body(body, slack::EVENT_ID_POINTER)?,
            Plan::StandardWebhooks(names) => event_id_from_header(headers, &names.id)?,
            Plan::Paddle => event_id_from_body(body, paddle::EVENT_ID_POINTER)?,
            Plan::Generic(compiled) => compiled.event_id.extract(headers, body)?,
            Plan::Unsigned(source) => source.extract(headers, body)?,
        };
        Ok(Verified {
            event_id,
            signed_at,
        })
    }

    /// The headers a sender using this scheme and the **first** secret would attach to `body` at
    /// time `at`, so that [`verify`](Self::verify) accepts the delivery.
    ///
    /// Where the scheme reads the event id from a header (GitHub's `X-GitHub-Delivery`, Shopify,
    /// Standard Webhooks, Svix, and a `generic-hmac` or `none` header source) `event_id` is put
    /// there; where it reads it from the body (Stripe, Slack, Paddle, JSON pointers) the body must
    /// already hold it and `event_id` is ignored. GitHub gets no hook id header.
    ///
    /// For tests and load generation.
    ///
    /// # Errors
    /// [`SignError::HeaderValue`] when `event_id` cannot be sent in a header,
    /// [`SignError::Whitespace`] when it has spaces or tabs around it (HTTP would strip them),
    /// [`SignError::BeforeEpoch`] when `at` is before 1970.
    pub fn sign(
        &self,
        event_id: &str,
        at: SystemTime,
        body: &[u8],
    ) -> Result<HeaderMap, SignError> {
        let ts = at
            .duration_since(UNIX_EPOCH)
            .map_err(|_| SignError::BeforeEpoch)?
            .as_secs();
        let mut headers = HeaderMap::new();
        let Some(key) = self.keys.first() else {
            // `none`: no signature, only the id where the source reads it.
            if let Plan::Unsigned(source) = &self.plan
                && let Some(name) = source.header()
            {
                put(&mut headers, name, event_id.to_owned())?;
            }
            return Ok(headers);
        };
        match &self.plan {
            Plan::Stripe => put(
                &mut headers,
                &stripe::SIGNATURE_HEADER,
                stripe::sign_with(key, ts, body),
            )?,
            Plan::Github => {
                put(&mut headers, &github::DELIVERY_HEADER, event_id.to_owned())?;
                put(
                    &mut headers,
                    &github::SIGNATURE_HEADER,
                    github::sign_with(key, body),
                )?;
            }
            Plan::Shopify => {
                put(
                    &mut headers,
                    &shopify::WEBHOOK_ID_HEADER,
                    event_id.to_owned(),
                )?;
                put(
                    &mut headers,
                    &shopify::SIGNATURE_HEADER,
                    shopify::sign_with(key, body),
                )?;
            }
            Plan::Slack => {
                put(&mut headers, &slack::TIMESTAMP_HEADER, ts.to_string())?;
                put(
                    &mut headers,
                    &slack::SIGNATURE_HEADER,
                    slack::sign_with(key, ts, body),
                )?;
            }
            Plan::StandardWebhooks(names) => {
                put(&mut headers, &names.id, event_id.to_owned())?;
                put(&mut headers, &names.timestamp, ts.to_string())?;
                put(
                    &mut headers,
                    &names.signature,
                    sw::sign_with(key, event_id, ts, body),
                )?;
            }
            Plan::Paddle => put(
                &mut headers,
                &paddle::SIGNATURE_HEADER,
                paddle::sign_with(key, ts, body),
            )?,
            Plan::Generic(compiled) => {
                if let Some(name) = compiled.event_id.header() {
                    put(&mut headers, name, event_id.to_owned())?;
                }
                if let Some(name) = compiled.timestamp_header() {
                    put(&mut headers, name, ts.to_string())?;
                }
                put(
                    &mut headers,
                    compiled.header(),
                    compiled.sign_with(key, ts, body),
                )?;
            }
            Plan::Unsigned(_) => {}
        }
        Ok(headers)
    }
}

fn put(headers: &mut HeaderMap, name: &HeaderName, value: String) -> Result<(), SignError> {
    if value.trim_matches([' ', '\t']) != value {
        // A Standard Webhooks id is signed as is, and would arrive trimmed.
        return Err(SignError::Whitespace {
            header: name.clone(),
        });
    }
    let value = HeaderValue::try_from(value).map_err(|source| SignError::HeaderValue {
        header: name.clone(),
        source,
    })?;
    headers.insert(name.clone(), value);
    Ok(())
}
