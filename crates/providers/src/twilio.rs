//! Twilio: `X-Twilio-Signature: <base64>`, the HMAC-SHA1 of the URL Twilio requested, keyed with
//! the account's auth token. No timestamp is signed, so no tolerance applies.
//!
//! What follows the URL in the signed bytes depends on the body, as in Twilio's SDKs
//! (`validateRequest`, `validateRequestWithBody` in `twilio` for Node):
//!
//! - **form bodies** (`application/x-www-form-urlencoded`, what Twilio sends for SMS, voice and
//!   most status callbacks): each parameter's name and value, sorted by name, appended without
//!   separators; a name sent several times contributes each distinct value, sorted. So the
//!   form's distinct parameters are signed, not its bytes: a pair sent twice counts once, and
//!   `%48i` reads as `Hi`, as Twilio's SDK checks it;
//! - **other bodies** (JSON): nothing; Twilio instead adds `bodySHA256=<hex SHA-256 of the body>`
//!   to the URL's query, which is signed with the URL, and the body must hash to it. A request
//!   whose query has `bodySHA256` is checked this way, any other as a form.
//!
//! The URL is the configured one ([`TwilioScheme::signed_url`](crate::TwilioScheme): the public
//! URL Twilio was given, which the gateway behind a proxy cannot know) followed by `?` and the
//! request's own query string, if it has one. Twilio's back end signs the URL with or without the
//! port inconsistently (`https://host/` or `https://host:443/`), so both are tried, as the SDK
//! does.
//!
//! The event id is the `I-Twilio-Idempotency-Token` header by default: Twilio sets it on its
//! webhook requests and keeps it when it retries one (its own Agent Connect library deduplicates
//! retries by it). Twilio documents no other id that is stable across retries: `MessageSid` or
//! `CallSid` are shared by every status callback of one message or call. A source may read the id
//! elsewhere instead ([`TwilioScheme::event_id`](crate::TwilioScheme)).

use http::{HeaderMap, HeaderName};
use sha2::{Digest, Sha256};

use crate::error::{ConfigError, VerifyError};
use crate::keyed::Keyed;
use crate::util::{
    base64_decode, base64_encode, digests_equal, form_params, header, hex_decode, hex_encode,
    malformed,
};

/// The header carrying the signature.
pub const SIGNATURE_HEADER: HeaderName = HeaderName::from_static("x-twilio-signature");
/// The default event id: set by Twilio on each webhook request, kept on its retries.
pub const IDEMPOTENCY_TOKEN_HEADER: HeaderName =
    HeaderName::from_static("i-twilio-idempotency-token");
/// The query parameter holding the body's SHA-256 (hex) for bodies that are not forms.
pub const BODY_SHA256_PARAM: &str = "bodySHA256";

/// A configured URL, in the two forms Twilio may have signed: with the port (the scheme's default
/// when none is written) and without it.
#[derive(Debug, Clone)]
pub(crate) struct SignedUrl {
    /// As configured (normalized): what [`sign`] signs.
    pub(crate) url: String,
    variants: [String; 2],
}

impl SignedUrl {
    /// Validates and normalizes `url`: scheme and host in lower case, `/` for an empty path, as
    /// the URL parser in Twilio's SDK writes it.
    pub(crate) fn new(url: &str) -> Result<Self, ConfigError> {
        const SCHEME: &str = "twilio";
        let setting = |why| ConfigError::Setting {
            scheme: SCHEME,
            field: "signed_url",
            why,
        };
        crate::square::check_url(SCHEME, url)?;
        if url.contains('?') {
            return Err(setting(
                "give the URL without its query string: the query of each request is appended, as Twilio signs the URL it requests",
            ));
        }
        if url.contains('#') {
            return Err(setting(
                "leave out the #fragment (connection overrides such as #rc=2 are neither sent nor signed)",
            ));
        }
        let (scheme, rest) = url.split_once("://").expect("checked by check_url");
        let scheme = scheme.to_ascii_lowercase();
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, "/"),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        // A port is digits after the last ':' that is not inside an IPv6 literal.
        let (host, port) = match hostport.rfind(':') {
            Some(at) if !hostport[at..].contains(']') => {
                let port = &hostport[at + 1..];
                if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(setting("has a port that is not a number"));
                }
                (&hostport[..at], Some(port))
            }
            _ => (hostport, None),
        };
        if host.is_empty() {
            return Err(setting("has no host"));
        }
        let host = host.to_ascii_lowercase();
        let default_port = if scheme == "https" { "443" } else { "80" };
        let explicit = port.filter(|p| *p != default_port);
        let base = |port: Option<&str>| match port {
            Some(port) => format!("{scheme}://{userinfo}{host}:{port}{path}"),
            None => format!("{scheme}://{userinfo}{host}{path}"),
        };
        // The default port is dropped when written, as a URL parser does.
        let url = base(explicit);
        let with_port = base(Some(explicit.unwrap_or(default_port)));
        let without_port = base(None);
        Ok(Self {
            url,
            variants: [without_port, with_port],
        })
    }
}

/// The `X-Twilio-Signature` value Twilio would send for a form-encoded `body` posted to `url`
/// (the full URL, with its query string if any).
///
/// For tests and load generation.
pub fn sign_form(auth_token: &[u8], url: &str, body: &[u8]) -> String {
    base64_encode(
        &mac(
            &Keyed::new(crate::Algorithm::Sha1, auth_token),
            &[url.as_bytes()],
            Some(body),
        )
        .finalize(),
    )
}

/// The query parameter (`bodySHA256=<hex>`) Twilio adds to the URL for a body that is not a form.
pub fn body_sha256_param(body: &[u8]) -> String {
    format!("{BODY_SHA256_PARAM}={}", hex_encode(&Sha256::digest(body)))
}

/// The `X-Twilio-Signature` value for a URL alone (which, for a JSON body, carries the
/// `bodySHA256` parameter).
///
/// For tests and load generation.
pub fn sign_url(auth_token: &[u8], url: &str) -> String {
    base64_encode(
        &mac(
            &Keyed::new(crate::Algorithm::Sha1, auth_token),
            &[url.as_bytes()],
            None,
        )
        .finalize(),
    )
}

/// What [`sign_with`] produces: the signature, and the query the request must carry.
pub(crate) struct Signature {
    pub(crate) header: String,
    pub(crate) query: Option<String>,
}

/// Signs as Twilio does: a form body by its parameters, any other body by a `bodySHA256` query
/// parameter.
pub(crate) fn sign_with(key: &Keyed, url: &SignedUrl, body: &[u8], form: bool) -> Signature {
    if form {
        let mac = mac(key, &[url.url.as_bytes()], Some(body));
        Signature {
            header: base64_encode(&mac.finalize()),
            query: None,
        }
    } else {
        let query = body_sha256_param(body);
        let mac = mac(key, &[url.url.as_bytes(), b"?", query.as_bytes()], None);
        Signature {
            header: base64_encode(&mac.finalize()),
            query: Some(query),
        }
    }
}

/// The MAC of the URL `parts` followed, for a form, by its sorted parameters.
fn mac(key: &Keyed, url: &[&[u8]], form: Option<&[u8]>) -> Keyed {
    let mut mac = key.over(url);
    if let Some(body) = form {
        for (name, value) in sorted_params(body) {
            mac.update(&name);
            mac.update(&value);
        }
    }
    mac
}

/// The form's parameters sorted by name, each name's distinct values sorted (byte order, which is
/// Twilio's order for the ASCII names it sends).
fn sorted_params(body: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut params = form_params(body);
    params.sort();
    params.dedup();
    params
}

/// The first value of the query parameter `name`, as written (Twilio's hex needs no decoding).
fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some((n, v)) if n == name => Some(v),
            None if pair == name => Some(""),
            _ => None,
        })
}

pub(crate) fn check(
    keys: &[Keyed],
    url: &SignedUrl,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), VerifyError> {
    let value = header(headers, &SIGNATURE_HEADER)?;
    let signature = base64_decode(value.trim())
        .ok_or_else(|| malformed(&SIGNATURE_HEADER, "signature is not base64"))?;
    let query = query.filter(|q| !q.is_empty());
    let body_hash = query.and_then(|q| query_param(q, BODY_SHA256_PARAM));
    let candidates = [signature];
    let matched = url.variants.iter().any(|prefix| {
        let mut parts: Vec<&[u8]> = vec![prefix.as_bytes()];
        if let Some(q) = query {
            parts.extend([&b"?"[..], q.as_bytes()]);
        }
        let form = body_hash.is_none().then_some(body);
        keys.iter().any(|key| {
            let mac = mac(key, &parts, form);
            candidates.iter().any(|c| mac.matches(c))
        })
    });
    if !matched {
        return Err(VerifyError::BadSignature);
    }
    if let Some(expected) = body_hash {
        // The hash is signed with the URL; the body must be the one it was made of.
        let expected = hex_decode(expected).ok_or(VerifyError::BadSignature)?;
        require_match_digest(&expected, body)?;
    }
    Ok(())
}

fn require_match_digest(expected: &[u8], body: &[u8]) -> Result<(), VerifyError> {
    let actual: [u8; 32] = Sha256::digest(body).into();
    match <[u8; 32]>::try_from(expected) {
        Ok(expected) if digests_equal(&expected, &actual) => Ok(()),
        _ => Err(VerifyError::BadSignature),
    }
}
