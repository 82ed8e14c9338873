//! Webhook signature verification and event-id extraction, per provider, for the idemgate
//! gateway.
//!
//! # Layout
//! - [`Provider`] is what a source's `provider = "..."` names; [`Scheme::from_keys`] reads a
//!   source's flat [`Keys`] into its typed [`Scheme`] in one step, refusing a key meant for another
//!   provider ([`SettingError`] names the key).
//! - [`Scheme`] names what a source's sender signs and where its event id lives: the built-in
//!   providers ([`stripe`], [`github`], [`shopify`], [`slack`], [`standard_webhooks`], [`svix`],
//!   [`paddle`], [`square`], [`twilio`], [`mailgun`], and [`postmark`], which sends basic auth
//!   credentials instead of a signature), a configurable [`GenericHmac`], and `none`
//!   ([`NoneScheme`]) for trusted internal senders, which the gateway must then guard with a
//!   bearer token.
//! - [`Verifier`] holds one source's scheme, its active [`Secret`]s (several during rotation) and
//!   the timestamp tolerance; [`Verifier::verify`] checks a delivery and returns its
//!   [`Verified`] event id; [`Verifier::verify_delivery`] also sees the request's query (Twilio
//!   signs the URL). [`Verifier::sign`] produces a delivery's headers and
//!   [`Verifier::sign_request`] the whole request ([`Signed`]: headers, query, body), for tests
//!   and load generation.
//! - Each provider module holds its header names and a `sign` helper that writes the signature
//!   header exactly as the provider does (for tests and load generation).
//! - Errors: [`ConfigError`] at configuration time, [`VerifyError`] per delivery (with
//!   [`status`](VerifyError::status) and [`kind`](VerifyError::kind) for the HTTP answer),
//!   [`SignError`] from the signing helpers.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use idemgate_providers::{Scheme, Secret, Verifier};
//!
//! // Two active secrets while the sender rotates: either may sign.
//! let verifier = Verifier::new(
//!     Scheme::from_name("svix")?,
//!     vec![Secret::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), Secret::from("whsec_b2xkIHNlY3JldA==")],
//!     Verifier::DEFAULT_TOLERANCE,
//! )?;
//! let now = SystemTime::now();
//! let body = br#"{"type":"invoice.paid"}"#;
//! let headers = verifier.sign("msg_2LJf9JQbLkzQhkBvQBM8sXrQK2s", now, body)?;
//! let verified = verifier.verify(&headers, body, now)?;
//! assert_eq!(verified.event_id.as_str(), "msg_2LJf9JQbLkzQhkBvQBM8sXrQK2s");
//!
//! // A minute later the same delivery still verifies; ten minutes later it is stale (401).
//! assert!(verifier.verify(&headers, body, now + Duration::from_secs(60)).is_ok());
//! let err = verifier.verify(&headers, body, now + Duration::from_secs(600)).unwrap_err();
//! assert_eq!((err.status(), err.kind()), (401, "stale_timestamp"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every signature comparison is constant-time. The timestamp tolerance (default 5 minutes) is a
//! replay guard, **not** the retry window: each retry is signed again with a fresh timestamp, and
//! how long an event id is remembered is set by the source's delivery contract.

mod asym;
mod der;
mod error;
mod generic;
mod keyed;
mod provider;
mod scheme;
mod secret;
mod settings;
mod util;
mod verified;
mod verifier;

pub mod github;
pub mod mailgun;
pub mod paddle;
pub mod postmark;
pub mod pubsub;
pub mod sendgrid;
pub mod shopify;
pub mod slack;
pub mod sns;
pub mod square;
pub mod standard_webhooks;
pub mod stripe;
pub mod svix;
pub mod twilio;

pub use error::{ConfigError, SignError, VerifyError};
pub use provider::Provider;
pub use scheme::{
    Algorithm, Encoding, GenericHmac, KeySource, MailgunScheme, NoneScheme, PostmarkScheme, Scheme,
    SquareScheme, TwilioScheme,
};
pub use secret::Secret;
pub use settings::{Keys, SettingError};
pub use verified::{BatchEvent, Control, Verified};
pub use verifier::{Delivery, Document, DocumentKind, Needed, Signed, Verifier};

pub use idemgate_core::{EventId, KeyError};
