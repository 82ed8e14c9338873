//! [`Keyed`]: an HMAC keyed once with one secret, the constant-time signature check every HMAC
//! scheme shares, and [`TaggedList`], the `t=..,v1=..` header Stripe and Paddle write.

use std::fmt;
use std::time::SystemTime;

use hmac::{Hmac, KeyInit, Mac};
use http::{HeaderMap, HeaderName};

use crate::error::VerifyError;
use crate::scheme::Algorithm;
use crate::util::{header, hex_decode, malformed, parse_unix_seconds};

/// An HMAC already keyed with one secret: cloning it skips re-hashing the key on every request.
#[derive(Clone)]
pub(crate) enum Keyed {
    Sha1(Hmac<sha1::Sha1>),
    Sha256(Hmac<sha2::Sha256>),
    Sha512(Hmac<sha2::Sha512>),
}

impl fmt::Debug for Keyed {
    // Never print key material, however it is derived.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let alg = match self {
            Self::Sha1(_) => "sha1",
            Self::Sha256(_) => "sha256",
            Self::Sha512(_) => "sha512",
        };
        write!(f, "Keyed({alg}, <redacted>)")
    }
}

impl Keyed {
    pub(crate) fn new(algorithm: Algorithm, key: &[u8]) -> Self {
        // HMAC accepts keys of any length (long ones are hashed first), so `new_from_slice`
        // cannot fail here: this is an invariant of the construction, not a property of input.
        const ANY_LENGTH: &str = "HMAC accepts keys of any length";
        match algorithm {
            Algorithm::Sha1 => Self::Sha1(Hmac::new_from_slice(key).expect(ANY_LENGTH)),
            Algorithm::Sha256 => Self::Sha256(Hmac::new_from_slice(key).expect(ANY_LENGTH)),
            Algorithm::Sha512 => Self::Sha512(Hmac::new_from_slice(key).expect(ANY_LENGTH)),
        }
    }

    pub(crate) fn sha256(key: &[u8]) -> Self {
        Self::new(Algorithm::Sha256, key)
    }

    pub(crate) fn update(&mut self, data: &[u8]) {
        match self {
            Self::Sha1(m) => m.update(data),
            Self::Sha256(m) => m.update(data),
            Self::Sha512(m) => m.update(data),
        }
    }

    /// The MAC of `parts`, concatenated.
    pub(crate) fn over(&self, parts: &[&[u8]]) -> Self {
        let mut mac = self.clone();
        for part in parts {
            mac.update(part);
        }
        mac
    }

    /// Constant-time comparison of this MAC with `tag` (a wrong length is simply no match).
    pub(crate) fn matches(&self, tag: &[u8]) -> bool {
        match self.clone() {
            Self::Sha1(m) => m.verify_slice(tag).is_ok(),
            Self::Sha256(m) => m.verify_slice(tag).is_ok(),
            Self::Sha512(m) => m.verify_slice(tag).is_ok(),
        }
    }

    pub(crate) fn finalize(self) -> Vec<u8> {
        match self {
            Self::Sha1(m) => m.finalize().into_bytes().to_vec(),
            Self::Sha256(m) => m.finalize().into_bytes().to_vec(),
            Self::Sha512(m) => m.finalize().into_bytes().to_vec(),
        }
    }
}

/// Whether any key's MAC over `parts` equals any candidate signature.
///
/// Every comparison is constant-time. The loop stops at the first match: which secret or which
/// signature matched is not secret, only the expected value is.
pub(crate) fn any_match(keys: &[Keyed], parts: &[&[u8]], candidates: &[Vec<u8>]) -> bool {
    keys.iter().any(|key| {
        let mac = key.over(parts);
        candidates.iter().any(|c| mac.matches(c))
    })
}

/// The signature check shared by every HMAC scheme.
pub(crate) fn require_match(
    keys: &[Keyed],
    parts: &[&[u8]],
    candidates: &[Vec<u8>],
) -> Result<(), VerifyError> {
    if any_match(keys, parts, candidates) {
        Ok(())
    } else {
        Err(VerifyError::BadSignature)
    }
}

/// A header that lists `key=value` items: a timestamp and one or more hex signatures over
/// `{timestamp}{joiner}{body}`. Stripe (`t=..,v1=..`) and Paddle (`ts=..;h1=..`) differ only in
/// these fields.
pub(crate) struct TaggedList {
    pub header: HeaderName,
    pub separator: char,
    pub timestamp: &'static str,
    pub signature: &'static str,
    pub joiner: &'static [u8],
    /// The messages for a missing timestamp or signature item.
    pub no_timestamp: &'static str,
    pub no_signature: &'static str,
}

impl TaggedList {
    /// Checks the header against `keys`: any listed signature may match (rotation). Items of other
    /// schemes are ignored; a signature that is not hex cannot match. The last timestamp item
    /// wins (it is signed, so it cannot be swapped).
    pub(crate) fn check(
        &self,
        keys: &[Keyed],
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<SystemTime, VerifyError> {
        let value = header(headers, &self.header)?;
        let mut ts = None;
        let mut saw_signature = false;
        let mut signatures = Vec::new();
        for item in value.split(self.separator) {
            let Some((key, val)) = item.trim().split_once('=') else {
                continue;
            };
            if key == self.timestamp {
                ts = Some(val);
            } else if key == self.signature {
                saw_signature = true;
                signatures.extend(hex_decode(val));
            }
        }
        let ts = ts.ok_or_else(|| malformed(&self.header, self.no_timestamp))?;
        if !saw_signature {
            return Err(malformed(&self.header, self.no_signature));
        }
        let signed_at = parse_unix_seconds(ts, &self.header)?;
        require_match(keys, &[ts.as_bytes(), self.joiner, body], &signatures)?;
        Ok(signed_at)
    }
}
