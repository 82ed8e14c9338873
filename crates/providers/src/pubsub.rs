//! Google Cloud Pub/Sub push subscriptions with authentication: `Authorization: Bearer <JWT>`, an
//! OpenID Connect token signed by Google (RS256), whose key is found by its `kid` in a JWKS
//! (Google publishes its keys at [`GOOGLE_JWKS_URL`]).
//!
//! Checked, after the signature: `aud` is the configured audience (required: by default Pub/Sub
//! uses the push endpoint's URL), `iss` is one of the accepted issuers (by default
//! `https://accounts.google.com` and `accounts.google.com`), `exp` is not past and `iat` not
//! ahead, each within the tolerance, and, when configured, `email` is the push subscription's
//! service account with `email_verified` true. The event id is the body's `message.messageId`.
//!
//! The token is read and its signature verified by `jsonwebtoken` (on *ring*), told to check
//! nothing else: the claims are checked here, so that each refusal names its claim. Its parts are
//! base64url without padding, as RFC 7515 writes them.
//!
//! The JWKS is given at configuration ([`Jwks::Document`]) or fetched by the caller
//! ([`Jwks::Url`]: [`Verifier::needs`](crate::Verifier::needs) names it, and the caller passes it
//! in with [`Delivery::with_document`](crate::Delivery::with_document)). A token whose `kid` is
//! not in the JWKS is [`VerifyError::UnknownKey`]: the caller may fetch the JWKS again (keys
//! rotate) and retry.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use http::{HeaderMap, HeaderName};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::asym::RsaSigner;
use crate::error::{ConfigError, SignError, VerifyError};
use crate::util::{header, malformed};

/// The header carrying the token.
pub const AUTHORIZATION_HEADER: HeaderName = http::header::AUTHORIZATION;
/// Where the event id is in the body.
pub const EVENT_ID_POINTER: &str = "/message/messageId";
/// Google's OAuth 2.0 signing keys, as a JWKS.
pub const GOOGLE_JWKS_URL: &str = "https://www.googleapis.com/oauth2/v3/certs";
/// The longest a token may still be valid for.
const MAX_LIFETIME: Duration = Duration::from_secs(86_400);
/// The issuers accepted when none is configured.
pub const DEFAULT_ISSUERS: [&str; 2] = ["https://accounts.google.com", "accounts.google.com"];

/// Where the keys that sign the tokens are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jwks {
    /// A JWKS document given at configuration (read from a file).
    Document(Vec<u8>),
    /// A JWKS the caller fetches over HTTPS (and caches).
    Url(String),
}

/// The settings of the `pubsub` scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pubsub {
    /// The `aud` the tokens must carry: the push subscription's audience. Required.
    pub audience: String,
    /// The accepted `iss` values; empty means [`DEFAULT_ISSUERS`].
    pub issuers: Vec<String>,
    /// The push subscription's service account, if the `email` claim is to be checked.
    pub email: Option<String>,
    /// The signing keys.
    pub jwks: Jwks,
}

impl TryFrom<&crate::Keys> for Pubsub {
    type Error = crate::SettingError;

    /// `audience` (required), `issuers`, `service_account` (required unless
    /// `allow_any_service_account = true`) and the JWKS: `jwks_file` (read now) or `jwks_url`
    /// (default Google's), not both.
    fn try_from(keys: &crate::Keys) -> Result<Self, crate::SettingError> {
        use crate::SettingError;
        let audience = keys.audience.clone().ok_or_else(|| {
            SettingError {
                key: "audience",
                why: "required for provider \"pubsub\": the audience the push subscription puts in its tokens (by default the push endpoint's URL)".to_owned(),
            }
        })?;
        let jwks = match (&keys.jwks_file, &keys.jwks_url) {
            (Some(_), Some(_)) => {
                return Err(SettingError {
                    key: "jwks_url",
                    why: "set jwks_file or jwks_url, not both".to_owned(),
                });
            }
            (Some(_), None) if keys.fetch_ca_file.is_some() => {
                return Err(SettingError {
                    key: "fetch_ca_file",
                    why: "only for providers that fetch documents (\"pubsub\" with jwks_url, \"sns\"), not \"pubsub\" with jwks_file".to_owned(),
                });
            }
            (Some(file), None) => {
                Jwks::Document(std::fs::read(file).map_err(|e| SettingError {
                    key: "jwks_file",
                    why: format!("cannot read {}: {e}", file.display()),
                })?)
            }
            (None, url) => Jwks::Url(url.clone().unwrap_or_else(|| GOOGLE_JWKS_URL.to_owned())),
        };
        if keys.service_account.is_none() && keys.allow_any_service_account != Some(true) {
            return Err(SettingError {
                key: "service_account",
                why: "required for provider \"pubsub\": the push subscription's service account (its tokens' email); without it a token any Google service account obtained for this audience is accepted. Set allow_any_service_account = true to accept any (warned at start)".to_owned(),
            });
        }
        Ok(Self {
            audience,
            issuers: keys.issuers.clone().unwrap_or_default(),
            email: keys.service_account.clone(),
            jwks,
        })
    }
}

impl Default for Pubsub {
    fn default() -> Self {
        Self {
            audience: String::new(),
            issuers: Vec::new(),
            email: None,
            jwks: Jwks::Url(GOOGLE_JWKS_URL.to_owned()),
        }
    }
}

/// `pubsub`, validated.
#[derive(Debug)]
pub(crate) struct Compiled {
    audience: String,
    issuers: Vec<String>,
    email: Option<String>,
    /// The keys, when given at configuration.
    keys: Option<Vec<Jwk>>,
    pub(crate) url: Option<String>,
}

/// One RSA key of a JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Jwk {
    kid: Option<String>,
    n: Vec<u8>,
    e: Vec<u8>,
}

const URL_SAFE: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::URL_SAFE,
    base64::engine::GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

fn b64url(text: &str) -> Option<Vec<u8>> {
    URL_SAFE.decode(text).ok()
}

/// The RSA signing keys of a JWKS (`{"keys": [{"kty": "RSA", "kid", "n", "e"}, ..]}`); keys of
/// other kinds, or meant for encryption, are skipped.
fn parse_jwks(document: &[u8]) -> Result<Vec<Jwk>, &'static str> {
    let doc: Value = serde_json::from_slice(document).map_err(|_| "not JSON")?;
    let keys = doc
        .get("keys")
        .and_then(Value::as_array)
        .ok_or("not a JWKS: no \"keys\" array")?;
    let mut out = Vec::new();
    for key in keys {
        let text = |name| key.get(name).and_then(Value::as_str);
        if text("kty") != Some("RSA")
            || text("use").is_some_and(|u| u != "sig")
            || text("alg").is_some_and(|a| a != "RS256")
        {
            continue;
        }
        let (Some(n), Some(e)) = (text("n").and_then(b64url), text("e").and_then(b64url)) else {
            return Err("an RSA key without a base64url n and e");
        };
        out.push(Jwk {
            kid: text("kid").map(str::to_owned),
            n,
            e,
        });
    }
    if out.is_empty() {
        return Err("holds no RSA signing key");
    }
    Ok(out)
}

impl Compiled {
    pub(crate) fn new(config: &Pubsub) -> Result<Self, ConfigError> {
        const SCHEME: &str = "pubsub";
        if config.audience.trim().is_empty() {
            return Err(ConfigError::Missing {
                scheme: SCHEME,
                field: "audience",
            });
        }
        let issuers = if config.issuers.is_empty() {
            DEFAULT_ISSUERS.iter().map(|s| (*s).to_owned()).collect()
        } else {
            config.issuers.clone()
        };
        let (keys, url) = match &config.jwks {
            Jwks::Document(doc) => (
                Some(parse_jwks(doc).map_err(|why| ConfigError::Setting {
                    scheme: SCHEME,
                    field: "jwks",
                    why,
                })?),
                None,
            ),
            Jwks::Url(url) => {
                if !url.starts_with("https://") {
                    return Err(ConfigError::Setting {
                        scheme: SCHEME,
                        field: "jwks_url",
                        why: "must be an https:// URL",
                    });
                }
                (None, Some(url.clone()))
            }
        };
        Ok(Self {
            audience: config.audience.clone(),
            issuers,
            email: config.email.clone(),
            keys,
            url,
        })
    }

    /// Checks the token; the signed time is its `iat`.
    pub(crate) fn check(
        &self,
        headers: &HeaderMap,
        document: Option<&[u8]>,
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<SystemTime, VerifyError> {
        let name = &AUTHORIZATION_HEADER;
        let value = header(headers, name)?;
        let token = value
            .strip_prefix("Bearer ")
            .or_else(|| value.strip_prefix("bearer "))
            .ok_or_else(|| malformed(name, "expected Bearer and a token"))?
            .trim();
        let mut parts = token.split('.');
        let (Some(head), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed(
                name,
                "the token is not three dot-separated parts",
            ));
        };
        let header =
            jsonwebtoken::decode_header(token).map_err(|e| header_refused(name, head, &e))?;
        // Checked here, before the algorithm, so that a signature jsonwebtoken could not decode is
        // named as such (its own error does not say which part).
        if TOKEN_PART.decode(sig).is_err() {
            return Err(malformed(name, "the token signature is not base64url"));
        }
        if header.alg != Algorithm::RS256 {
            return Err(malformed(name, "the token is not signed with RS256"));
        }
        let kid = header.kid.as_deref();
        let fetched;
        let keys = match (&self.keys, document) {
            (Some(keys), _) => keys,
            (None, Some(doc)) => {
                fetched = parse_jwks(doc).map_err(|why| VerifyError::BadDocument {
                    url: self.url.clone().unwrap_or_default(),
                    why,
                })?;
                &fetched
            }
            (None, None) => {
                return Err(VerifyError::NeedsDocument {
                    url: self.url.clone().unwrap_or_default(),
                });
            }
        };
        let candidates: Vec<&Jwk> = keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .collect();
        if candidates.is_empty() {
            return Err(VerifyError::UnknownKey {
                kid: kid.unwrap_or_default().chars().take(64).collect(),
            });
        }
        let claims = verified_claims(name, token, payload, &candidates)?;
        self.check_claims(&claims, now, tolerance)
    }

    fn check_claims(
        &self,
        claims: &Value,
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<SystemTime, VerifyError> {
        let claim = |claim, why| VerifyError::Claim { claim, why };
        let audience_ok = match claims.get("aud") {
            Some(Value::String(aud)) => *aud == self.audience,
            Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(&self.audience)),
            _ => false,
        };
        if !audience_ok {
            return Err(claim("aud", "is not the configured audience"));
        }
        let iss = claims.get("iss").and_then(Value::as_str);
        if !iss.is_some_and(|iss| self.issuers.iter().any(|i| i == iss)) {
            return Err(claim("iss", "is not an accepted issuer"));
        }
        let time = |name| {
            claims
                .get(name)
                .and_then(Value::as_u64)
                .map(|s| UNIX_EPOCH + Duration::from_secs(s))
                .ok_or(claim(name, "is missing or not a number of seconds"))
        };
        let exp = time("exp")?;
        let iat = time("iat")?;
        if now.duration_since(exp).is_ok_and(|past| past > tolerance) {
            return Err(claim("exp", "the token expired"));
        }
        // As google-auth-library: Google's tokens live an hour; one good for over a day is not
        // Google's.
        if exp
            .duration_since(now)
            .is_ok_and(|ahead| ahead > MAX_LIFETIME)
        {
            return Err(claim("exp", "the token expires more than a day ahead"));
        }
        if iat.duration_since(now).is_ok_and(|ahead| ahead > tolerance) {
            return Err(claim("iat", "the token is issued in the future"));
        }
        if let Some(email) = &self.email {
            if claims.get("email").and_then(Value::as_str) != Some(email) {
                return Err(claim("email", "is not the configured service account"));
            }
            if claims.get("email_verified").and_then(Value::as_bool) != Some(true) {
                return Err(claim("email_verified", "is not true"));
            }
        }
        Ok(iat)
    }
}

/// How a token's parts are encoded: base64url without padding, as jsonwebtoken reads them.
const TOKEN_PART: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A token part as JSON, if it is base64url and JSON.
fn json_part(part: &str) -> Option<Value> {
    serde_json::from_slice(&TOKEN_PART.decode(part).ok()?).ok()
}

/// Why [`jsonwebtoken::decode_header`] refused the token's header `head`, said as before.
fn header_refused(name: &HeaderName, head: &str, e: &jsonwebtoken::errors::Error) -> VerifyError {
    match e.kind() {
        ErrorKind::Base64(_) => malformed(name, "a token part is not base64url"),
        // jsonwebtoken reads the header into its own struct, whose `alg` is one it knows: a
        // header with none, or another, is a JSON error there.
        ErrorKind::Json(_) => match json_part(head) {
            None => malformed(name, "a token part is not JSON"),
            Some(head) if head.get("alg").and_then(Value::as_str) != Some("RS256") => {
                malformed(name, "the token is not signed with RS256")
            }
            Some(_) => malformed(name, "the token header is not a JWS header"),
        },
        _ => malformed(name, "the token header does not decode"),
    }
}

/// The claims of `token` (whose middle part is `payload`) once its RS256 signature verifies with
/// one of `keys`: jsonwebtoken checks the signature and nothing else (the claims are
/// [`Compiled::check_claims`]' to check).
fn verified_claims(
    name: &HeaderName,
    token: &str,
    payload: &str,
    keys: &[&Jwk],
) -> Result<Value, VerifyError> {
    let mut signature_only = Validation::new(Algorithm::RS256);
    signature_only.required_spec_claims.clear();
    signature_only.validate_exp = false;
    signature_only.validate_nbf = false;
    signature_only.validate_aud = false;
    signature_only.iss = None;
    signature_only.sub = None;
    signature_only.aud = None;
    for key in keys {
        let key = DecodingKey::from_rsa_raw_components(&key.n, &key.e);
        let e = match jsonwebtoken::decode::<Value>(token, &key, &signature_only) {
            Ok(token) => return Ok(token.claims),
            Err(e) => e,
        };
        match e.kind() {
            ErrorKind::InvalidSignature => {}
            // The signature decoded above: the payload does not.
            ErrorKind::Base64(_) => return Err(malformed(name, "a token part is not base64url")),
            // The header parsed above: the payload is not JSON, or, signed, JSON that is not
            // an object, which jsonwebtoken cannot read its claims from (the claims' checks
            // refuse it).
            ErrorKind::Json(_) => {
                return json_part(payload)
                    .ok_or_else(|| malformed(name, "a token part is not JSON"));
            }
            _ => return Err(malformed(name, "the token does not decode")),
        }
    }
    Err(VerifyError::BadSignature)
}

/// A token Google would send: `claims` (a JSON object: `aud`, `iss`, `iat`, `exp`, `email`, ..)
/// signed RS256 with a PKCS#8 RSA private key (DER or PEM), with `kid` in its header. Put it in
/// `Authorization: Bearer <token>`.
///
/// For tests and load generation.
///
/// # Errors
/// [`SignError::Key`] when the key is not a PKCS#8 RSA private key.
pub fn sign_token(private_key: &[u8], kid: &str, claims: &Value) -> Result<String, SignError> {
    let key = RsaSigner::new(private_key).map_err(|why| SignError::Key {
        scheme: "pubsub",
        why,
    })?;
    let head = serde_json::json!({"alg": "RS256", "kid": kid, "typ": "JWT"});
    let signed = format!(
        "{}.{}",
        URL_SAFE.encode(head.to_string()),
        URL_SAFE.encode(claims.to_string())
    );
    let signature = key.sign_sha256(signed.as_bytes());
    Ok(format!("{signed}.{}", URL_SAFE.encode(signature)))
}

/// A JWKS holding the public half of a PKCS#8 RSA private key (DER or PEM) under `kid`: what
/// verifies [`sign_token`]'s tokens.
///
/// For tests.
///
/// # Errors
/// [`SignError::Key`] when the key is not a PKCS#8 RSA private key.
pub fn jwks_of(private_key: &[u8], kid: &str) -> Result<String, SignError> {
    let key = RsaSigner::new(private_key).map_err(|why| SignError::Key {
        scheme: "pubsub",
        why,
    })?;
    let (n, e) = key.components();
    Ok(serde_json::json!({"keys": [{
        "kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
        "n": URL_SAFE.encode(n), "e": URL_SAFE.encode(e),
    }]})
    .to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = include_str!("../tests/fixtures/pubsub/signing-key.pem");
    const NOW: u64 = 1_800_000_000;
    const AUDIENCE: &str = "https://hooks.example.com/hooks/pubsub";

    fn compiled() -> Compiled {
        let jwks = jwks_of(KEY.as_bytes(), "k1").unwrap();
        Compiled::new(&Pubsub {
            audience: AUDIENCE.to_owned(),
            jwks: Jwks::Document(jwks.into_bytes()),
            ..Pubsub::default()
        })
        .unwrap()
    }

    fn claims() -> Value {
        serde_json::json!({
            "aud": AUDIENCE, "iss": "https://accounts.google.com", "iat": NOW, "exp": NOW + 3600,
        })
    }

    /// `head.payload` signed with the fixture key, the signature appended.
    fn signed(head: &str, payload: &str) -> String {
        let key = RsaSigner::new(KEY.as_bytes()).unwrap();
        let signature = key.sign_sha256(format!("{head}.{payload}").as_bytes());
        format!("{head}.{payload}.{}", URL_SAFE.encode(signature))
    }

    fn part(json: &Value) -> String {
        URL_SAFE.encode(json.to_string())
    }

    fn check(token: &str) -> Result<SystemTime, VerifyError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            AUTHORIZATION_HEADER,
            format!("Bearer {token}").parse().unwrap(),
        );
        compiled().check(
            &headers,
            None,
            UNIX_EPOCH + Duration::from_secs(NOW),
            Duration::from_secs(300),
        )
    }

    fn why(token: &str) -> &'static str {
        match check(token) {
            Err(VerifyError::MalformedHeader { why, .. }) => why,
            other => panic!("{token}: {other:?}"),
        }
    }

    #[test]
    fn a_good_token_and_its_signed_time() {
        let token = sign_token(KEY.as_bytes(), "k1", &claims()).unwrap();
        assert_eq!(
            check(&token).unwrap(),
            UNIX_EPOCH + Duration::from_secs(NOW)
        );
        // Without a kid every key is tried.
        let token = signed(
            &part(&serde_json::json!({"alg": "RS256"})),
            &part(&claims()),
        );
        assert!(check(&token).is_ok());
    }

    #[test]
    fn each_malformed_token_is_named() {
        let head = part(&serde_json::json!({"alg": "RS256", "kid": "k1"}));
        let payload = part(&claims());
        let good = signed(&head, &payload);
        let sig = good.rsplit_once('.').unwrap().1;
        assert_eq!(why("a.b"), "the token is not three dot-separated parts");
        assert_eq!(why("a.b.c.d"), "the token is not three dot-separated parts");
        assert_eq!(
            why(&format!("!!.{payload}.{sig}")),
            "a token part is not base64url"
        );
        let not_json = URL_SAFE.encode("{alg");
        assert_eq!(
            why(&format!("{not_json}.{payload}.{sig}")),
            "a token part is not JSON"
        );
        assert_eq!(
            why(&format!("{head}.{payload}.!!")),
            "the token signature is not base64url"
        );
        for alg in [
            serde_json::json!({"alg": "HS256"}),
            serde_json::json!({"alg": "none"}),
            serde_json::json!({"alg": "RS257"}),
            serde_json::json!({"kid": "k1"}),
            serde_json::json!([]),
        ] {
            let token = signed(&part(&alg), &payload);
            assert_eq!(why(&token), "the token is not signed with RS256", "{alg}");
        }
        let odd = signed(
            &part(&serde_json::json!({"alg": "RS256", "kid": 7})),
            &payload,
        );
        assert_eq!(why(&odd), "the token header is not a JWS header");
        // A payload that does not decode, signed.
        assert_eq!(why(&signed(&head, "!!")), "a token part is not base64url");
        assert_eq!(why(&signed(&head, &not_json)), "a token part is not JSON");
        // Padding is not base64url as JWS writes it.
        let padded = URL_SAFE.encode(r#"{"alg":"RS256","kid":"k1"}"#);
        let padded = format!("{padded}=");
        assert_eq!(
            why(&signed(&padded, &payload)),
            "a token part is not base64url"
        );
    }

    #[test]
    fn the_signature_comes_before_the_payload_and_claims() {
        let head = part(&serde_json::json!({"alg": "RS256", "kid": "k1"}));
        let payload = part(&claims());
        let good = signed(&head, &payload);
        let sig = good.rsplit_once('.').unwrap().1;
        // Another payload under this signature, even one that is not JSON: a bad signature.
        let other = part(&serde_json::json!({"aud": "x"}));
        assert!(matches!(
            check(&format!("{head}.{other}.{sig}")),
            Err(VerifyError::BadSignature)
        ));
        assert!(matches!(
            check(&format!("{head}.!!.{sig}")),
            Err(VerifyError::BadSignature)
        ));
        // A key not in the JWKS.
        let head = part(&serde_json::json!({"alg": "RS256", "kid": "k2"}));
        assert!(matches!(
            check(&signed(&head, &payload)),
            Err(VerifyError::UnknownKey { kid }) if kid == "k2"
        ));
        // Signed claims that are JSON but no object: refused by their first check.
        let head = part(&serde_json::json!({"alg": "RS256", "kid": "k1"}));
        for claims in ["[]", "\"x\"", "7"] {
            let token = signed(&head, &URL_SAFE.encode(claims));
            assert!(
                matches!(check(&token), Err(VerifyError::Claim { claim: "aud", .. })),
                "{claims}"
            );
        }
    }
}
