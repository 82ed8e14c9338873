//! Standard Webhooks (<https://www.standardwebhooks.com>): `webhook-signature: v1,<base64>`, a
//! space-separated list during secret rotation, each the HMAC-SHA256 of
//! `{webhook-id}.{webhook-timestamp}.{body}`. The secret is `whsec_` followed by the base64 of the
//! key; it is decoded once, when the [`Verifier`](crate::Verifier) is built.
//!
//! Asymmetric signing (the spec's `v1a`): `v1a,<base64>` entries are ed25519 signatures of the
//! same bytes, verified with public keys `whpk_<base64 of 32 bytes>` given among the secrets,
//! beside or instead of `whsec_` ones. A `whsk_<base64>` secret key (the 32-byte seed, or the 64
//! bytes of seed and public key that libsodium calls the secret key) verifies too and signs, for
//! tests and `idemgate send`.
//!
//! Any `v1` entry may match a `whsec_` secret and any `v1a` entry a public key; entries of other
//! versions are skipped. The timestamp must be within the tolerance (the reference libraries use 5
//! minutes, both ways). The event id is `webhook-id`, kept on every retry.
//!
//! [Svix](crate::svix) is the same scheme with `svix-` header names.

use std::time::SystemTime;

use http::{HeaderMap, HeaderName};

use crate::asym::{PrivateKey, PublicKey};
use crate::error::{ConfigError, VerifyError};
use crate::keyed::{Keyed, require_match};
use crate::util::{base64_decode, base64_encode, header, malformed, parse_unix_seconds};

/// The header carrying the message id (and event id).
pub const ID_HEADER: HeaderName = HeaderName::from_static("webhook-id");
/// The header carrying the signed timestamp.
pub const TIMESTAMP_HEADER: HeaderName = HeaderName::from_static("webhook-timestamp");
/// The header carrying the signatures.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("webhook-signature");
/// What every symmetric (HMAC) secret of this scheme starts with.
pub const SECRET_PREFIX: &str = "whsec_";
/// What an ed25519 public key (verifies `v1a` signatures) starts with.
pub const PUBLIC_KEY_PREFIX: &str = "whpk_";
/// What an ed25519 secret key (signs `v1a` signatures) starts with.
pub const SECRET_KEY_PREFIX: &str = "whsk_";

/// The three header names of one flavour of the scheme.
#[derive(Debug)]
pub(crate) struct Names {
    pub(crate) scheme: &'static str,
    pub(crate) id: HeaderName,
    pub(crate) timestamp: HeaderName,
    pub(crate) signature: HeaderName,
}

pub(crate) static STANDARD: Names = Names {
    scheme: "standard-webhooks",
    id: ID_HEADER,
    timestamp: TIMESTAMP_HEADER,
    signature: SIGNATURE_HEADER,
};

/// One configured secret, decoded.
#[derive(Debug)]
pub(crate) enum Key {
    /// `whsec_`: the HMAC key.
    Hmac(Vec<u8>),
    /// `whpk_`: verifies `v1a`.
    Public(PublicKey),
    /// `whsk_`: signs `v1a`, and verifies with its public half.
    Private(Box<PrivateKey>, PublicKey),
}

/// Decodes a `whsec_`, `whpk_` or `whsk_` secret.
///
/// # Errors
/// A short reason that never quotes the secret.
pub(crate) fn decode_key(secret: &[u8]) -> Result<Key, &'static str> {
    const FORM: &str = "expected whsec_, whpk_ or whsk_ followed by base64";
    let text = std::str::from_utf8(secret).map_err(|_| FORM)?;
    if let Some(encoded) = text.strip_prefix(PUBLIC_KEY_PREFIX) {
        let bytes = base64_decode(encoded).ok_or("the part after whpk_ is not valid base64")?;
        if bytes.len() != 32 {
            return Err("a whpk_ public key is 32 bytes (ed25519)");
        }
        Ok(Key::Public(PublicKey::Ed25519(bytes)))
    } else if let Some(encoded) = text.strip_prefix(SECRET_KEY_PREFIX) {
        let bytes = base64_decode(encoded).ok_or("the part after whsk_ is not valid base64")?;
        let private = PrivateKey::ed25519(&bytes)?;
        let public = private.public();
        Ok(Key::Private(Box::new(private), public))
    } else if text.starts_with(SECRET_PREFIX) {
        decode_secret(secret).map(Key::Hmac)
    } else {
        Err(FORM)
    }
}

/// The HMAC key inside a `whsec_<base64>` secret.
///
/// # Errors
/// A short reason that never quotes the secret.
pub(crate) fn decode_secret(secret: &[u8]) -> Result<Vec<u8>, &'static str> {
    const FORM: &str = "expected whsec_ followed by the base64 of the key";
    let text = std::str::from_utf8(secret).map_err(|_| FORM)?;
    let encoded = text.strip_prefix(SECRET_PREFIX).ok_or(FORM)?;
    if encoded.is_empty() {
        return Err("the key after whsec_ is empty");
    }
    base64_decode(encoded).ok_or("the part after whsec_ is not valid base64")
}

/// The `webhook-signature` value for a message, as a Standard Webhooks sender would send it:
/// `v1,<base64>`. `secret` is the `whsec_...` form; `timestamp` is Unix seconds (also sent as
/// `webhook-timestamp`).
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
    sign_as(&STANDARD, secret, msg_id, timestamp, body)
}

pub(crate) fn sign_as(
    names: &Names,
    secret: &[u8],
    msg_id: &str,
    timestamp: u64,
    body: &[u8],
) -> Result<String, ConfigError> {
    let key = decode_secret(secret).map_err(|why| ConfigError::Secret {
        index: 0,
        scheme: names.scheme,
        why,
    })?;
    Ok(sign_with(&Keyed::sha256(&key), msg_id, timestamp, body))
}

/// The `webhook-signature` value for a message signed with an ed25519 secret key
/// (`whsk_<base64>`): `v1a,<base64>`.
///
/// For tests and load generation.
///
/// # Errors
/// [`ConfigError::Secret`] when the key is not `whsk_` + base64 of an ed25519 secret key.
pub fn sign_v1a(
    secret_key: &[u8],
    msg_id: &str,
    timestamp: u64,
    body: &[u8],
) -> Result<String, ConfigError> {
    let refuse = |why| ConfigError::Secret {
        index: 0,
        scheme: STANDARD.scheme,
        why,
    };
    match decode_key(secret_key).map_err(refuse)? {
        Key::Private(key, _) => Ok(sign_v1a_with(&key, msg_id, timestamp, body)),
        Key::Public(_) | Key::Hmac(_) => Err(refuse("expected a whsk_ secret key")),
    }
}

pub(crate) fn sign_v1a_with(key: &PrivateKey, msg_id: &str, timestamp: u64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let signature = key.sign(&[msg_id.as_bytes(), b".", ts.as_bytes(), b".", body]);
    format!("v1a,{}", base64_encode(&signature))
}

pub(crate) fn sign_with(key: &Keyed, msg_id: &str, timestamp: u64, body: &[u8]) -> String {
    let ts = timestamp.to_string();
    let mac = key
        .over(&[msg_id.as_bytes(), b".", ts.as_bytes(), b".", body])
        .finalize();
    format!("v1,{}", base64_encode(&mac))
}

pub(crate) fn check(
    names: &Names,
    keys: &[Keyed],
    public: &[PublicKey],
    headers: &HeaderMap,
    body: &[u8],
) -> Result<SystemTime, VerifyError> {
    // The id is signed as the bytes it is; whether it is a usable event id is decided after the
    // signature (a 400, not a 401).
    let id = headers
        .get(&names.id)
        .ok_or_else(|| VerifyError::MissingHeader {
            header: names.id.clone(),
        })?
        .as_bytes();
    let ts = header(headers, &names.timestamp)?.trim();
    let value = header(headers, &names.signature)?;
    let mut entries = 0;
    let mut signatures = Vec::new();
    let mut asymmetric = Vec::new();
    for entry in value.split_ascii_whitespace() {
        let Some((version, signature)) = entry.split_once(',') else {
            continue;
        };
        entries += 1;
        // Not base64: cannot match, like the libraries' string comparison.
        match version {
            "v1" => signatures.extend(base64_decode(signature)),
            "v1a" => asymmetric.extend(base64_decode(signature)),
            _ => {}
        }
    }
    if entries == 0 {
        return Err(malformed(
            &names.signature,
            "expected space-separated version,signature entries",
        ));
    }
    let signed_at = parse_unix_seconds(ts, &names.timestamp)?;
    let signed: [&[u8]; 5] = [id, b".", ts.as_bytes(), b".", body];
    let by_public_key = || {
        public
            .iter()
            .any(|key| asymmetric.iter().any(|sig| key.verifies(&signed, sig)))
    };
    if !asymmetric.is_empty() && by_public_key() {
        return Ok(signed_at);
    }
    require_match(keys, &signed, &signatures)?;
    Ok(signed_at)
}
