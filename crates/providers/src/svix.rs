//! Svix (and senders built on it, such as Clerk): the [Standard Webhooks](crate::standard_webhooks)
//! scheme with `svix-id`, `svix-timestamp` and `svix-signature` headers. Secrets are
//! `whsec_<base64>`. The event id is `svix-id`, kept on every retry and manual replay.

use http::HeaderName;

use crate::error::ConfigError;
use crate::standard_webhooks::{self, Names};

/// The header carrying the message id (and event id).
pub const ID_HEADER: HeaderName = HeaderName::from_static("svix-id");
/// The header carrying the signed timestamp.
pub const TIMESTAMP_HEADER: HeaderName = HeaderName::from_static("svix-timestamp");
/// The header carrying the signatures.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("svix-signature");

pub(crate) static SVIX: Names = Names {
    scheme: "svix",
    id: ID_HEADER,
    timestamp: TIMESTAMP_HEADER,
    signature: SIGNATURE_HEADER,
};

/// The `svix-signature` value Svix would send: `v1,<base64>`. `secret` is the `whsec_...` form;
/// `timestamp` is Unix seconds (also sent as `svix-timestamp`).
///
/// For tests and load generation.
///
/// # Errors
/// [`ConfigError::Secret`] when the secret is not `whsec_` + base64.
pub fn sign(
    secret: &[u8],
    msg_id: &str,
    timestamp: u64,
    body: &[u8],
) -> Result<String, ConfigError> {
    standard_webhooks::sign_as(&SVIX, secret, msg_id, timestamp, body)
}
