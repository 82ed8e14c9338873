//! [`Verifier`]: one source's scheme, active secrets and tolerance, checking each delivery.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::asym::{PrivateKey, PublicKey};
use crate::error::{ConfigError, SignError, VerifyError};
use crate::generic::{Compiled, IdSource};
use crate::keyed::Keyed;
use crate::scheme::{Algorithm, KeySource, Scheme};
use crate::secret::Secret;
use crate::standard_webhooks::{self as sw, Names};
use crate::util::{check_fresh, event_id_from_body, event_id_from_header};
use crate::verified::Verified;
use crate::{
    github, mailgun, paddle, postmark, pubsub, sendgrid, shopify, slack, sns, square, stripe, svix,
    twilio,
};

/// A document a delivery's check needs and the caller fetches ([`Verifier::needs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Needed {
    /// Where: an `https` URL, already checked against the source's rules.
    pub url: String,
    /// What it is, for how long a copy may be kept.
    pub kind: DocumentKind,
}

/// What a [`Needed`] document is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DocumentKind {
    /// A JSON Web Key Set (Pub/Sub's signing keys). Rotates: keep it no longer than its
    /// `Cache-Control: max-age`, and fetch it again when a token names a key it lacks
    /// ([`VerifyError::UnknownKey`]).
    Jwks,
    /// A PEM X.509 certificate (SNS's signing certificate). A URL names one certificate: a copy
    /// may be kept for long.
    Certificate,
}

/// A fetched document passed in with [`Delivery::with_document`].
#[derive(Debug, Clone, Copy)]
pub struct Document<'a> {
    /// The URL it was fetched from ([`Needed::url`]).
    pub url: &'a str,
    /// Its bytes.
    pub bytes: &'a [u8],
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
    /// The document [`Verifier::needs`] named, fetched by the caller.
    pub document: Option<Document<'a>>,
}

impl<'a> Delivery<'a> {
    /// A delivery of `body` with `headers`, and nothing else known.
    pub fn new(headers: &'a HeaderMap, body: &'a [u8]) -> Self {
        Self {
            headers,
            body,
            query: None,
            document: None,
        }
    }

    /// The same delivery, with the document [`Verifier::needs`] named: its URL and its bytes.
    #[must_use]
    pub fn with_document(mut self, url: &'a str, bytes: &'a [u8]) -> Self {
        self.document = Some(Document { url, bytes });
        self
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
    Sendgrid,
    Pubsub(Box<pubsub::Compiled>),
    Sns(Box<sns::Compiled>),
    /// The notification URL.
    Square(String),
    Twilio {
        url: twilio::SignedUrl,
        id: IdSource,
    },
    Mailgun(IdSource),
    Postmark {
        /// The SHA-256 of each `user:password`.
        credentials: Vec<[u8; 32]>,
        /// `None`: built from the body by `RecordType`.
        id: Option<IdSource>,
        /// The first credential, for [`Verifier::sign`] (its `Debug` hides it).
        first: Option<Secret>,
    },
}

/// The public-key side of a verifier's secrets.
#[derive(Debug, Default)]
struct Asym {
    /// Keys that verify: Standard Webhooks' `whpk_` (and the public half of `whsk_`), SendGrid's.
    public: Vec<PublicKey>,
    /// The first secret, when it is a private key: what [`Verifier::sign`] signs with.
    signer: Option<Box<PrivateKey>>,
    /// Whether the first secret is a public or private key rather than an HMAC secret.
    first: bool,
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
    asym: Asym,
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
            Scheme::Sendgrid => (Plan::Sendgrid, Algorithm::Sha256),
            Scheme::Pubsub(config) => (
                Plan::Pubsub(Box::new(pubsub::Compiled::new(config)?)),
                Algorithm::Sha256,
            ),
            Scheme::Sns(config) => (
                Plan::Sns(Box::new(sns::Compiled::new(config)?)),
                Algorithm::Sha256,
            ),
            Scheme::Square(config) => {
                square::check_url(name, &config.signed_url)?;
                (Plan::Square(config.signed_url.clone()), Algorithm::Sha256)
            }
            Scheme::Twilio(config) => {
                let url = twilio::SignedUrl::new(&config.signed_url)?;
                let id = match &config.event_id {
                    Some(source) => IdSource::compile(source, name)?,
                    None => IdSource::Header(twilio::IDEMPOTENCY_TOKEN_HEADER),
                };
                (Plan::Twilio { url, id }, Algorithm::Sha1)
            }
            Scheme::Mailgun(config) => {
                let default = KeySource::JsonPointer(mailgun::TOKEN_POINTER.to_owned());
                let id = IdSource::compile(config.event_id.as_ref().unwrap_or(&default), name)?;
                (Plan::Mailgun(id), Algorithm::Sha256)
            }
            Scheme::Postmark(config) => {
                let id = config
                    .event_id
                    .as_ref()
                    .map(|source| IdSource::compile(source, name))
                    .transpose()?;
                for (index, secret) in secrets.iter().enumerate() {
                    if !secret.as_bytes().contains(&b':') {
                        return Err(ConfigError::Secret {
                            index,
                            scheme: name,
                            why: "must be user:password, the credentials written into the webhook URL",
                        });
                    }
                }
                let credentials = secrets
                    .iter()
                    .map(|s| postmark::digest(s.as_bytes()))
                    .collect();
                let first = secrets.first().cloned();
                (
                    Plan::Postmark {
                        credentials,
                        id,
                        first,
                    },
                    Algorithm::Sha256,
                )
            }
        };
        match (&plan, secrets.is_empty()) {
            (Plan::Unsigned(_), false) => return Err(ConfigError::SecretsNotAllowed),
            (Plan::Pubsub(_), false) => {
                return Err(ConfigError::SecretsNotTaken {
                    scheme: name,
                    why: "its tokens are verified with the JWKS's keys",
                });
            }
            (Plan::Sns(_), false) => {
                return Err(ConfigError::SecretsNotTaken {
                    scheme: name,
                    why: "each message is verified with the certificate at its SigningCertURL",
                });
            }
            (Plan::Unsigned(_) | Plan::Pubsub(_) | Plan::Sns(_), true) => {}
            (_, true) => return Err(ConfigError::NoSecrets { scheme: name }),
            (_, false) => {}
        }
        let mut keys = Vec::new();
        let mut asym = Asym::default();
        for (index, secret) in secrets.iter().enumerate() {
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
            let (public, private) = match &plan {
                Plan::StandardWebhooks(_) => match sw::decode_key(bytes).map_err(refuse)? {
                    sw::Key::Hmac(key) => {
                        keys.push(Keyed::new(algorithm, &key));
                        continue;
                    }
                    sw::Key::Public(public) => (public, None),
                    sw::Key::Private(private, public) => (public, Some(private)),
                },
                Plan::Sendgrid => match sendgrid::Key::parse(bytes).map_err(refuse)? {
                    sendgrid::Key::Public(public) => (public, None),
                    sendgrid::Key::Private(private, public) => (public, Some(private)),
                },
                _ => {
                    keys.push(Keyed::new(algorithm, bytes));
                    continue;
                }
            };
            asym.public.push(public);
            if index == 0 {
                asym.first = true;
                asym.signer = private;
            }
        }
        Ok(Self {
            scheme,
            plan,
            keys,
            asym,
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

    /// How many secrets (and public keys) are active.
    pub fn secret_count(&self) -> usize {
        self.keys.len() + self.asym.public.len()
    }

    /// The document this delivery's check needs besides the request, if any: Pub/Sub's JWKS when
    /// it is configured by URL, SNS's signing certificate (its `SigningCertURL`, checked to be
    /// `https` on an allowed host before it is named). The caller fetches it (this crate does no
    /// I/O) and passes it in with [`Delivery::with_document`].
    ///
    /// # Errors
    /// SNS: [`VerifyError::MalformedBody`] when the body is not an SNS message,
    /// [`VerifyError::UntrustedUrl`] when its certificate URL may not be fetched.
    pub fn needs(&self, delivery: &Delivery<'_>) -> Result<Option<Needed>, VerifyError> {
        Ok(match &self.plan {
            Plan::Pubsub(compiled) => compiled.url.clone().map(|url| Needed {
                url,
                kind: DocumentKind::Jwks,
            }),
            Plan::Sns(compiled) => Some(Needed {
                url: compiled.certificate_url(delivery.body)?,
                kind: DocumentKind::Certificate,
            }),
            _ => None,
        })
    }

    /// The headers a delivery must carry for its signature to be checked at all, looked for
    /// before its body is read: a request without them is refused (401 `missing_header`) without
    /// reading what it sends. Presence only; the signature check proper needs the body.
    ///
    /// # Errors
    /// [`VerifyError::MissingHeader`] naming the first header absent.
    pub fn check_headers(&self, headers: &HeaderMap) -> Result<(), VerifyError> {
        let needed: &[&HeaderName] = match &self.plan {
            Plan::Stripe => &[&stripe::SIGNATURE_HEADER],
            Plan::Github => &[&github::SIGNATURE_HEADER],
            Plan::Shopify => &[&shopify::SIGNATURE_HEADER],
            Plan::Slack => &[&slack::SIGNATURE_HEADER, &slack::TIMESTAMP_HEADER],
            Plan::StandardWebhooks(names) => &[&names.signature, &names.timestamp, &names.id],
            Plan::Paddle => &[&paddle::SIGNATURE_HEADER],
            Plan::Generic(compiled) => {
                return compiled.check_headers(headers);
            }
            Plan::Sendgrid => &[&sendgrid::SIGNATURE_HEADER, &sendgrid::TIMESTAMP_HEADER],
            Plan::Pubsub(_) => &[&pubsub::AUTHORIZATION_HEADER],
            Plan::Square(_) => &[&square::SIGNATURE_HEADER],
            Plan::Twilio { .. } => &[&twilio::SIGNATURE_HEADER],
            Plan::Postmark { .. } => &[&http::header::AUTHORIZATION],
            // Signed in the body (SNS, Mailgun), or not at all.
            Plan::Unsigned(_) | Plan::Sns(_) | Plan::Mailgun(_) => &[],
        };
        match needed.iter().find(|h| !headers.contains_key(**h)) {
            Some(header) => Err(VerifyError::MissingHeader {
                header: (*header).clone(),
            }),
            None => Ok(()),
        }
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
        let (headers, body, query) = (delivery.headers, delivery.body, delivery.query);
        let keys = &self.keys;
        let document = |url: Option<&str>| {
            delivery
                .document
                .filter(|d| url.is_none_or(|u| u == d.url))
                .map(|d| (d.url, d.bytes))
        };
        let mut control = None;
        // Pub/Sub and SNS check their own times (a token's life, SNS's retries).
        let mut fresh = false;
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
            Plan::StandardWebhooks(names) => {
                Some(sw::check(names, keys, &self.asym.public, headers, body)?)
            }
            Plan::Paddle => Some(paddle::check(keys, headers, body)?),
            Plan::Generic(compiled) => compiled.check(keys, headers, body)?,
            Plan::Unsigned(_) => None,
            Plan::Sendgrid => Some(sendgrid::check(&self.asym.public, headers, body)?),
            Plan::Pubsub(compiled) => {
                fresh = true;
                let doc = document(compiled.url.as_deref()).map(|(_, bytes)| bytes);
                Some(compiled.check(headers, doc, now, self.tolerance)?)
            }
            Plan::Sns(compiled) => {
                fresh = true;
                let checked = compiled.check(body, document(None), now, self.tolerance)?;
                control = checked.control;
                Some(checked.signed_at)
            }
            Plan::Square(url) => {
                square::check(keys, url, headers, body)?;
                None
            }
            Plan::Twilio { url, .. } => {
                twilio::check(keys, url, query, headers, body)?;
                None
            }
            Plan::Mailgun(_) => Some(mailgun::check(keys, body)?),
            Plan::Postmark { credentials, .. } => {
                postmark::check(credentials, headers)?;
                None
            }
        };
        if let Some(at) = signed_at
            && !fresh
        {
            check_fresh(at, now, self.tolerance)?;
        }
        let mut batch = None;
        let event_id = match &self.plan {
            Plan::Stripe => event_id_from_body(body, stripe::EVENT_ID_POINTER)?,
            Plan::Github => github::event_id(headers)?,
            Plan::Shopify => event_id_from_header(headers, &shopify::WEBHOOK_ID_HEADER)?,
            Plan::Slack => event_id_from_body(body, slack::EVENT_ID_POINTER)?,
            Plan::StandardWebhooks(names) => event_id_from_header(headers, &names.id)?,
            Plan::Paddle => event_id_from_body(body, paddle::EVENT_ID_POINTER)?,
            Plan::Generic(compiled) => compiled.event_id.extract(headers, body)?,
            Plan::Unsigned(source) => source.extract(headers, body)?,
            Plan::Sendgrid => {
                let events = sendgrid::events(body)?;
                let first = events
                    .iter()
                    .find_map(|e| e.id.as_ref().ok().cloned())
                    .ok_or_else(|| VerifyError::MissingEventId {
                        location: format!(
                            "body: no event of the batch has a usable {}",
                            sendgrid::EVENT_ID_FIELD
                        ),
                    })?;
                batch = Some(events);
                first
            }
            Plan::Pubsub(_) => event_id_from_body(body, pubsub::EVENT_ID_POINTER)?,
            Plan::Sns(_) => sns::event_id(body)?,
            Plan::Square(_) => event_id_from_body(body, square::EVENT_ID_POINTER)?,
            Plan::Twilio { id, .. } | Plan::Mailgun(id) => id.extract(headers, body)?,
            Plan::Postmark { id: Some(id), .. } => id.extract(headers, body)?,
            Plan::Postmark { id: None, .. } => postmark::event_id(body)?,
        };
        Ok(Verified {
            event_id,
            signed_at,
            batch,
            control,
        })
    }

    /// The headers a sender using this scheme and the **first** secret would attach to `body` at
    /// time `at`, so that [`verify`](Self::verify) accepts the delivery.
    ///
    /// Where the scheme reads the event id from a header (GitHub's `X-GitHub-Delivery`, Shopify,
    /// Standard Webhooks, Svix, Twilio, and a `generic-hmac` or `none` header source) `event_id`
    /// is put there; where it reads it from the body (Stripe, Slack, Paddle, Square, Postmark,
    /// JSON pointers, form fields) the body must already hold it and `event_id` is ignored.
    /// GitHub gets no hook id header. Twilio signs `body` as a form.
    ///
    /// For tests and load generation.
    ///
    /// # Errors
    /// [`SignError::HeaderValue`] when `event_id` cannot be sent in a header,
    /// [`SignError::Whitespace`] when it has spaces or tabs around it (HTTP would strip them),
    /// [`SignError::BeforeEpoch`] when `at` is before 1970, [`SignError::NeedsRequest`] for
    /// Mailgun, whose signature goes into the body: use [`sign_request`](Self::sign_request).
    pub fn sign(
        &self,
        event_id: &str,
        at: SystemTime,
        body: &[u8],
    ) -> Result<HeaderMap, SignError> {
        if matches!(self.plan, Plan::Mailgun(_)) {
            return Err(SignError::NeedsRequest {
                scheme: self.scheme.name(),
            });
        }
        Ok(self.sign_request(event_id, at, body, None)?.headers)
    }

    /// The whole request a sender using this scheme and the **first** secret would send with
    /// `body` at time `at`: its headers, the query string to add to the URL it posts to (Twilio's
    /// `bodySHA256`), and the body itself (Mailgun's, with its `signature` block written in).
    ///
    /// `content_type` is the body's: Twilio signs an `application/x-www-form-urlencoded` body (or
    /// one without a type) by its parameters, any other by the `bodySHA256` query parameter.
    /// Mailgun needs a JSON object (or an empty body) and takes `event_id` as the token when the
    /// token is the event id. Otherwise as [`sign`](Self::sign).
    ///
    /// For tests and load generation.
    ///
    /// # Errors
    /// As [`sign`](Self::sign), and [`SignError::Body`] for a Mailgun body that is not a JSON
    /// object.
    pub fn sign_request(
        &self,
        event_id: &str,
        at: SystemTime,
        body: &[u8],
        content_type: Option<&str>,
    ) -> Result<Signed, SignError> {
        let ts = at
            .duration_since(UNIX_EPOCH)
            .map_err(|_| SignError::BeforeEpoch)?
            .as_secs();
        let mut signed = Signed {
            headers: HeaderMap::new(),
            query: None,
            body: body.to_vec(),
        };
        if let Some(result) = self.sign_asymmetric(&mut signed.headers, event_id, ts, body) {
            result?;
            return Ok(signed);
        }
        let headers = &mut signed.headers;
        let Some(key) = self.keys.first() else {
            // `none`: no signature, only the id where the source reads it.
            if let Plan::Unsigned(source) = &self.plan
                && let Some(name) = source.header()
            {
                put(headers, name, event_id.to_owned())?;
            }
            return Ok(signed);
        };
        match &self.plan {
            Plan::Stripe => put(
                headers,
                &stripe::SIGNATURE_HEADER,
                stripe::sign_with(key, ts, body),
            )?,
            Plan::Github => {
                put(headers, &github::DELIVERY_HEADER, event_id.to_owned())?;
                put(
                    headers,
                    &github::SIGNATURE_HEADER,
                    github::sign_with(key, body),
                )?;
            }
            Plan::Shopify => {
                put(headers, &shopify::WEBHOOK_ID_HEADER, event_id.to_owned())?;
                put(
                    headers,
                    &shopify::SIGNATURE_HEADER,
                    shopify::sign_with(key, body),
                )?;
            }
            Plan::Slack => {
                put(headers, &slack::TIMESTAMP_HEADER, ts.to_string())?;
                put(
                    headers,
                    &slack::SIGNATURE_HEADER,
                    slack::sign_with(key, ts, body),
                )?;
            }
            Plan::StandardWebhooks(names) => {
                put(headers, &names.id, event_id.to_owned())?;
                put(headers, &names.timestamp, ts.to_string())?;
                put(
                    headers,
                    &names.signature,
                    sw::sign_with(key, event_id, ts, body),
                )?;
            }
            Plan::Paddle => put(
                headers,
                &paddle::SIGNATURE_HEADER,
                paddle::sign_with(key, ts, body),
            )?,
            Plan::Generic(compiled) => {
                if let Some(name) = compiled.event_id.header() {
                    put(headers, name, event_id.to_owned())?;
                }
                if let Some(name) = compiled.timestamp_header() {
                    put(headers, name, ts.to_string())?;
                }
                put(
                    headers,
                    compiled.header(),
                    compiled.sign_with(key, ts, body),
                )?;
            }
            Plan::Unsigned(_) => {}
            // Signed (or refused) by `sign_asymmetric` above.
            Plan::Sendgrid | Plan::Pubsub(_) | Plan::Sns(_) => {}
            Plan::Square(url) => put(
                headers,
                &square::SIGNATURE_HEADER,
                square::sign_with(key, url, body),
            )?,
            Plan::Twilio { url, id } => {
                if let Some(name) = id.header() {
                    put(headers, name, event_id.to_owned())?;
                }
                let form = content_type.is_none_or(|t| {
                    t.split(';')
                        .next()
                        .is_some_and(|t| t.trim().eq_ignore_ascii_case(FORM))
                });
                let signature = twilio::sign_with(key, url, body, form);
                put(headers, &twilio::SIGNATURE_HEADER, signature.header)?;
                signed.query = signature.query;
            }
            Plan::Mailgun(id) => {
                if let Some(name) = id.header() {
                    put(headers, name, event_id.to_owned())?;
                }
                let token = match id {
                    IdSource::Pointer(p) if p == mailgun::TOKEN_POINTER => event_id.to_owned(),
                    // A token of Mailgun's length, distinct per event id and time.
                    _ => {
                        use sha2::Digest as _;
                        let digest = sha2::Sha256::digest(format!("{event_id}.{ts}").as_bytes());
                        crate::util::hex_encode(&digest)[..50].to_owned()
                    }
                };
                signed.body = mailgun::signed_body(key, ts, &token, body)?;
            }
            Plan::Postmark { first, id, .. } => {
                if let Some(name) = id.as_ref().and_then(IdSource::header) {
                    put(headers, name, event_id.to_owned())?;
                }
                if let Some(credential) = first {
                    put(
                        headers,
                        &http::header::AUTHORIZATION,
                        postmark::authorization(credential.as_bytes()),
                    )?;
                }
            }
        }
        Ok(signed)
    }

    /// [`sign`](Self::sign) for the schemes and secrets that sign with a private key, or cannot
    /// sign at all; `None` for the HMAC ones.
    fn sign_asymmetric(
        &self,
        headers: &mut HeaderMap,
        event_id: &str,
        ts: u64,
        body: &[u8],
    ) -> Option<Result<(), SignError>> {
        let scheme = self.scheme.name();
        let cannot = |why| Some(Err(SignError::CannotSign { scheme, why }));
        match &self.plan {
            Plan::StandardWebhooks(names) if self.asym.first => {
                let Some(key) = &self.asym.signer else {
                    return cannot(
                        "the first secret is a whpk_ public key, which verifies but cannot sign: put a whsk_ secret key first",
                    );
                };
                Some((|| {
                    put(headers, &names.id, event_id.to_owned())?;
                    put(headers, &names.timestamp, ts.to_string())?;
                    put(
                        headers,
                        &names.signature,
                        sw::sign_v1a_with(key, event_id, ts, body),
                    )
                })())
            }
            Plan::Sendgrid => {
                let Some(key) = &self.asym.signer else {
                    return cannot(
                        "SendGrid's public key verifies but cannot sign: give a PKCS#8 P-256 private key (base64 DER) as the first secret",
                    );
                };
                Some((|| {
                    put(headers, &sendgrid::TIMESTAMP_HEADER, ts.to_string())?;
                    put(
                        headers,
                        &sendgrid::SIGNATURE_HEADER,
                        sendgrid::sign_with(key, ts, body),
                    )
                })())
            }
            Plan::Pubsub(_) => cannot(
                "its tokens are Google's, signed with keys a verifier never holds (idemgate send --signing-key signs with a test key its jwks_file holds; in code, pubsub::sign_token)",
            ),
            Plan::Sns(_) => cannot(
                "its messages are AWS's, signed with keys a verifier never holds (idemgate send --signing-key --signing-cert-url signs with a test key and its certificate; in code, sns::sign)",
            ),
            _ => None,
        }
    }
}

/// `application/x-www-form-urlencoded`.
const FORM: &str = "application/x-www-form-urlencoded";

/// A request as [`Verifier::sign_request`] makes it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Signed {
    /// The headers to send.
    pub headers: HeaderMap,
    /// The query string (without `?`) to add to the URL the request is posted to, where the
    /// scheme signs one (Twilio's `bodySHA256=..` for a body that is not a form).
    pub query: Option<String>,
    /// The body to send: the one given, or (Mailgun) that body with its signature written in.
    pub body: Vec<u8>,
}

impl Signed {
    /// A request of `headers` and `body`, with no query: for senders signed outside a
    /// [`Verifier`] (Pub/Sub's token, an SNS message, each with a test key).
    pub fn new(headers: HeaderMap, body: Vec<u8>) -> Self {
        Self {
            headers,
            query: None,
            body,
        }
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
