//! Errors of this crate: [`ConfigError`] when a verifier is built, [`VerifyError`] for each
//! delivery, [`SignError`] from the signing helpers.

use std::time::Duration;

use http::HeaderName;
use idemgate_core::KeyError;

/// Why a [`Verifier`](crate::Verifier) or [`Scheme`](crate::Scheme) was refused at configuration
/// time. No variant ever holds secret material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A scheme name that is not one of [`Scheme::NAMES`](crate::Scheme::NAMES).
    #[error("unknown signature scheme {name:?} (expected one of: {})", crate::Scheme::NAMES.join(", "))]
    UnknownScheme { name: String },
    /// An encoding name that is not `hex` or `base64`.
    #[error("unknown signature encoding {name:?} (expected hex or base64)")]
    UnknownEncoding { name: String },
    /// An algorithm name that is not `sha1`, `sha256` or `sha512`.
    #[error("unknown HMAC algorithm {name:?} (expected sha1, sha256 or sha512)")]
    UnknownAlgorithm { name: String },
    /// A scheme that signs with a secret was given none.
    #[error("the {scheme} scheme needs at least one secret")]
    NoSecrets { scheme: &'static str },
    /// The `none` scheme was given secrets: it checks no signature, the gateway checks a bearer
    /// token instead, so a secret here would protect nothing.
    #[error(
        "the none scheme takes no secrets (it checks no signature; the gateway requires a bearer token instead)"
    )]
    SecretsNotAllowed,
    /// One secret, by its position in the list (from 0), is not in the form the scheme needs.
    /// The secret itself is never included.
    //
    // No `#[source]`: base64's decode error quotes the offending byte, which is part of the secret.
    #[error("secrets[{index}] (counting from 0) is not a {scheme} secret: {why}")]
    Secret {
        index: usize,
        scheme: &'static str,
        why: &'static str,
    },
    /// A required setting is empty (for example `generic-hmac` without a `header`).
    #[error("{scheme}: {field} is required")]
    Missing {
        scheme: &'static str,
        field: &'static str,
    },
    /// A header name that HTTP does not allow.
    #[error("{field}: {name:?} is not a valid header name")]
    HeaderName {
        field: &'static str,
        name: String,
        #[source]
        source: http::header::InvalidHeaderName,
    },
    /// An RFC 6901 JSON pointer that does not parse or names the whole document.
    #[error("{field}: invalid JSON pointer {pointer:?}: {why}")]
    JsonPointer {
        field: &'static str,
        pointer: String,
        why: &'static str,
    },
    /// A `generic-hmac` `signed_payload` template that cannot be used.
    #[error("signed_payload template {template:?}: {why}")]
    Template { template: String, why: &'static str },
    /// A `generic-hmac` setting that could never match a delivery (a header asked to carry two
    /// things, a prefix HTTP would not deliver as written).
    #[error("{scheme}: {field}: {why}")]
    Setting {
        scheme: &'static str,
        field: &'static str,
        why: &'static str,
    },
    /// A scheme that verifies with keys it is given otherwise (a JWKS, a certificate URL) was
    /// given secrets.
    #[error("the {scheme} scheme takes no secrets: {why}")]
    SecretsNotTaken {
        scheme: &'static str,
        why: &'static str,
    },
    /// A zero timestamp tolerance would reject every delivery.
    #[error("the timestamp tolerance must be greater than zero")]
    ZeroTolerance,
}

/// Why a delivery was refused. [`status`](Self::status) and [`kind`](Self::kind) tell the gateway
/// how to answer; no variant reveals a secret, an expected signature or which secret was tried.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// A header the scheme needs is absent.
    #[error("missing header {header}")]
    MissingHeader { header: HeaderName },
    /// A header is present but cannot be read (not UTF-8, wrong shape, bad encoding). The value is
    /// not echoed.
    #[error("malformed header {header}: {why}")]
    MalformedHeader {
        header: HeaderName,
        why: &'static str,
    },
    /// No signature in the request matches any active secret.
    #[error("no signature matches")]
    BadSignature,
    /// The signed timestamp is older than the tolerance (a replay guard, not the retry window).
    #[error("signature timestamp is {}s old, beyond the tolerance", age.as_secs())]
    StaleTimestamp { age: Duration },
    /// The signed timestamp is further in the future than the tolerance.
    #[error("signature timestamp is {}s in the future, beyond the tolerance", ahead.as_secs())]
    FutureTimestamp { ahead: Duration },
    /// The verified delivery carries no event id where the scheme expects one.
    #[error("no event id in {location}")]
    MissingEventId { location: String },
    /// The event id is there but is not a valid [`EventId`](idemgate_core::EventId).
    #[error("event id refused")]
    InvalidEventId(#[source] KeyError),
    /// The event id must come from a JSON body, and the body does not parse.
    #[error("body is not valid JSON")]
    InvalidJson(#[source] serde_json::Error),
    /// The body is what the scheme authenticates or carries the signature in, and it cannot be
    /// read (an SNS message that is not a JSON object or lacks a signed field; a Mailgun body
    /// without a readable `signature` block). The sender is not authenticated.
    #[error("malformed body: {why}")]
    MalformedBody { why: &'static str },
    /// A signed token's claim does not hold (Pub/Sub: `aud`, `iss`, `exp`, `iat`, `email`).
    #[error("token claim {claim} refused: {why}")]
    Claim {
        claim: &'static str,
        why: &'static str,
    },
    /// No key has the id the delivery names (a JWKS without the token's `kid`). Keys rotate: a
    /// caller that fetched the keys may fetch them again and retry.
    #[error("no key has the id {kid:?}")]
    UnknownKey { kid: String },
    /// A URL in the delivery that the source does not trust (SNS: not https, or a host outside
    /// the allowed patterns). Nothing was fetched.
    #[error("{field}: {why}")]
    UntrustedUrl { field: &'static str, why: String },
    /// The document at `url` ([`Verifier::needs`](crate::Verifier::needs)) was not passed in.
    #[error("the document at {url} is needed to verify this delivery")]
    NeedsDocument { url: String },
    /// The document passed in for `url` cannot be used.
    #[error("the document at {url} cannot be used: {why}")]
    BadDocument { url: String, why: &'static str },
    /// The `Authorization: Basic` credentials match none of the configured ones (Postmark).
    #[error("the basic auth credentials match none configured")]
    BadCredentials,
    /// A verified SNS message of a topic the source does not accept (`topic_arns`): AWS signs
    /// messages of any account's topics, so the signature alone proves nothing of the sender.
    #[error("topic {topic_arn} is not one of the source's topic_arns")]
    UntrustedTopic { topic_arn: String },
}

impl VerifyError {
    /// The HTTP status to answer with: 401 when the sender is not authenticated, 400 when it is but
    /// the delivery has no usable event id; 503 when a document the check needs was not passed
    /// in, 502 when the one fetched cannot be used (the sender should retry either way).
    pub fn status(&self) -> u16 {
        match self {
            Self::MissingHeader { .. }
            | Self::MalformedHeader { .. }
            | Self::BadSignature
            | Self::StaleTimestamp { .. }
            | Self::FutureTimestamp { .. }
            | Self::MalformedBody { .. }
            | Self::Claim { .. }
            | Self::UnknownKey { .. }
            | Self::UntrustedUrl { .. }
            | Self::BadCredentials => 401,
            Self::MissingEventId { .. } | Self::InvalidEventId(_) | Self::InvalidJson(_) => 400,
            Self::NeedsDocument { .. } => 503,
            Self::BadDocument { .. } => 502,
            Self::UntrustedTopic { .. } => 403,
        }
    }

    /// A stable slug for problem+json `type` URIs and metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingHeader { .. } => "missing_header",
            Self::MalformedHeader { .. } => "malformed_header",
            Self::BadSignature => "bad_signature",
            Self::StaleTimestamp { .. } => "stale_timestamp",
            Self::FutureTimestamp { .. } => "future_timestamp",
            Self::MissingEventId { .. } => "missing_event_id",
            Self::InvalidEventId(_) => "invalid_event_id",
            Self::InvalidJson(_) => "invalid_json",
            Self::MalformedBody { .. } => "malformed_body",
            Self::Claim { .. } => "bad_claim",
            Self::UnknownKey { .. } => "unknown_key",
            Self::UntrustedUrl { .. } => "untrusted_url",
            Self::NeedsDocument { .. } => "document_unavailable",
            Self::BadDocument { .. } => "bad_document",
            Self::BadCredentials => "bad_credentials",
            Self::UntrustedTopic { .. } => "untrusted_topic",
        }
    }
}

/// Why a signing helper could not produce a delivery's headers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// The event id cannot be sent in the header the scheme reads it from.
    #[error("the event id cannot be sent in header {header}")]
    HeaderValue {
        header: HeaderName,
        #[source]
        source: http::header::InvalidHeaderValue,
    },
    /// The value would not arrive as written: HTTP strips the spaces and tabs around a header
    /// value, so a receiver would check other bytes than were signed.
    #[error("the value for header {header} has spaces or tabs around it, which HTTP strips")]
    Whitespace { header: HeaderName },
    /// The signing time is before 1970.
    #[error("the signing time is before the Unix epoch")]
    BeforeEpoch,
    /// The scheme cannot sign with what the verifier holds: a public key verifies but cannot
    /// sign, and some schemes are signed with keys a verifier never holds.
    #[error("cannot sign for {scheme}: {why}")]
    CannotSign {
        scheme: &'static str,
        why: &'static str,
    },
    /// A signing helper's private key cannot be used.
    #[error("{scheme}: the signing key cannot be used: {why}")]
    Key {
        scheme: &'static str,
        why: &'static str,
    },
    /// A message to sign lacks what the scheme signs.
    #[error("the message cannot be signed: {why}")]
    Message { why: String },
    /// The scheme signs more than headers (Mailgun writes its signature into the body):
    /// [`Verifier::sign`](crate::Verifier::sign) cannot express it.
    #[error("the {scheme} scheme writes its signature into the body: use Verifier::sign_request")]
    NeedsRequest { scheme: &'static str },
    /// The body cannot carry what the scheme signs (Mailgun: not a JSON object).
    #[error("{scheme}: {why}")]
    Body {
        scheme: &'static str,
        why: &'static str,
    },
}
