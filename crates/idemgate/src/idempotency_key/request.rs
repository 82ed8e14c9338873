//! What a keyed request is made of, read from its head and body: the [`IdempotencyKey`], the
//! [`Route`] it matched, the [`Principal`] it is scoped to, and its [`fingerprint`]. Pure: no
//! store, no I/O.

use std::fmt;
use std::str::FromStr;

use http::{HeaderMap, HeaderName, Method};
use sha2::{Digest, Sha256};

/// The request header carrying the key (draft-ietf-httpapi-idempotency-key-header, section 2).
pub const HEADER: HeaderName = HeaderName::from_static("idempotency-key");
/// The response header set on a stored response given back to a retry: `Idempotent-Replayed:
/// true`, as Stripe's API answers.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// The longest key accepted, in bytes of its value (a UUID is 36).
pub const MAX_KEY_LEN: usize = 255;

/// A request's idempotency key, as the client sent it (without the quotes of a structured-field
/// string).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The key of `headers`: `None` when the request carries no `Idempotency-Key`.
    ///
    /// The draft defines the field as a structured-field string (RFC 8941 section 3.3.3),
    /// `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`. A bare value without the quotes
    /// is accepted too, since the clients people use send one (Stripe's libraries send
    /// `stripe-node-retry-<uuid>`): printable ASCII without spaces, quotes, backslashes, commas or
    /// semicolons, so that it cannot be mistaken for structured-field syntax.
    ///
    /// # Errors
    /// A [`KeyProblem`]: the header repeated, empty, longer than [`MAX_KEY_LEN`], not UTF-8, or
    /// neither a structured-field string nor a bare token.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, KeyProblem> {
        let mut values = headers.get_all(&HEADER).iter();
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(KeyProblem::Repeated);
        }
        let text = value.to_str().map_err(|_| KeyProblem::Syntax {
            why: "not printable ASCII",
        })?;
        text.trim_matches(' ').parse().map(Some)
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for IdempotencyKey {
    type Err = KeyProblem;

    /// A structured-field string (`"..."`, with `\"` and `\\` escapes) or a bare token.
    fn from_str(text: &str) -> Result<Self, KeyProblem> {
        let key = match text.strip_prefix('"') {
            Some(quoted) => unquote(quoted)?,
            None => {
                if let Some(c) = text
                    .chars()
                    .find(|c| !c.is_ascii_graphic() || matches!(c, '"' | '\\' | ',' | ';'))
                {
                    return Err(KeyProblem::Syntax {
                        why: if c == ' ' || c == '\t' {
                            "a bare key has no spaces: quote it as a structured-field string"
                        } else {
                            "a bare key is printable ASCII without quotes, backslashes, commas or semicolons: quote it as a structured-field string"
                        },
                    });
                }
                text.to_owned()
            }
        };
        if key.is_empty() {
            return Err(KeyProblem::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyProblem::TooLong { len: key.len() });
        }
        Ok(Self(key))
    }
}

/// The inside of a structured-field string after its opening quote (RFC 8941 section 4.2.5).
fn unquote(rest: &str) -> Result<String, KeyProblem> {
    let mut out = String::with_capacity(rest.len());
    let mut chars = rest.chars();
    loop {
        match chars.next() {
            None => {
                return Err(KeyProblem::Syntax {
                    why: "the string has no closing quote",
                });
            }
            Some('"') => break,
            Some('\\') => match chars.next() {
                Some(c @ ('"' | '\\')) => out.push(c),
                _ => {
                    return Err(KeyProblem::Syntax {
                        why: "a backslash escapes only a quote or a backslash",
                    });
                }
            },
            Some(c) if c == ' ' || c.is_ascii_graphic() => out.push(c),
            Some(_) => {
                return Err(KeyProblem::Syntax {
                    why: "a string holds printable ASCII only",
                });
            }
        }
    }
    if chars.next().is_some() {
        return Err(KeyProblem::Syntax {
            why: "text after the closing quote (parameters are not accepted)",
        });
    }
    Ok(out)
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an `Idempotency-Key` header was refused (400, nothing stored).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyProblem {
    /// The header appears more than once.
    #[error("Idempotency-Key is sent more than once: send one")]
    Repeated,
    /// The key is empty (`""`, or nothing).
    #[error("Idempotency-Key is empty")]
    Empty,
    /// The key is longer than [`MAX_KEY_LEN`] bytes.
    #[error("Idempotency-Key is {len} bytes long; at most {MAX_KEY_LEN} are accepted")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// Neither a structured-field string nor a bare token.
    #[error("Idempotency-Key is not a structured-field string: {why}")]
    Syntax {
        /// What is wrong.
        why: &'static str,
    },
}

/// A route the key rules apply to: `"POST /payments"`, `"PATCH /orders/*"`. `*` stands for one
/// whole path segment; a path matches when every segment does (a trailing slash is a segment of
/// its own, so `/payments/` is not `/payments`). The query is not part of the match.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Route {
    method: Method,
    /// `None`: every path ([`Route::any`]).
    segments: Option<Vec<Segment>>,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Segment {
    Literal(String),
    Any,
}

impl Route {
    /// Whether a request of `method` to `path` (without its query) is this route.
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        if *method != self.method {
            return false;
        }
        let Some(rest) = path.strip_prefix('/') else {
            return false;
        };
        let Some(segments) = &self.segments else {
            return true;
        };
        let mut parts = rest.split('/');
        for segment in segments {
            match (segment, parts.next()) {
                (Segment::Any, Some(part)) if !part.is_empty() => {}
                (Segment::Literal(lit), Some(part)) if lit == part => {}
                _ => return false,
            }
        }
        parts.next().is_none()
    }

    /// Every path of `method`: `POST *`.
    pub fn any(method: Method) -> Self {
        Self {
            text: format!("{method} *"),
            method,
            segments: None,
        }
    }

    /// The route as written: `POST /payments`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The route's method.
    pub fn method(&self) -> &Method {
        &self.method
    }
}

impl FromStr for Route {
    type Err = RouteProblem;

    fn from_str(text: &str) -> Result<Self, RouteProblem> {
        let bad = |why: &str| RouteProblem {
            route: text.to_owned(),
            why: why.to_owned(),
        };
        let (method, path) = text
            .split_once(' ')
            .ok_or_else(|| bad("write a method, a space and a path: \"POST /payments\""))?;
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(bad(
                "the method is an upper-case HTTP method (POST, PUT, PATCH, DELETE)",
            ));
        }
        let method =
            Method::from_bytes(method.as_bytes()).map_err(|_| bad("not an HTTP method"))?;
        if matches!(method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Err(bad(
                "GET, HEAD and OPTIONS are idempotent already: key the methods that are not (POST, PATCH)",
            ));
        }
        let rest = path
            .strip_prefix('/')
            .ok_or_else(|| bad("the path starts with /"))?;
        let segments = rest
            .split('/')
            .map(|part| match part {
                "*" => Ok(Segment::Any),
                p if p.contains('*') => Err(bad(
                    "* stands for a whole segment (/orders/*), not part of one",
                )),
                p if p.contains(['?', '#', ' ']) => {
                    Err(bad("a path without query, fragment or spaces"))
                }
                p => Ok(Segment::Literal(p.to_owned())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if segments.len() > 1
            && segments[..segments.len() - 1].contains(&Segment::Literal(String::new()))
        {
            return Err(bad("an empty segment (//)"));
        }
        Ok(Self {
            method,
            segments: Some(segments),
            text: text.to_owned(),
        })
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A route pattern that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("route {route:?}: {why}")]
pub struct RouteProblem {
    /// The pattern as written.
    pub route: String,
    /// What is wrong with it.
    pub why: String,
}

/// Whose keys these are: two clients' keys never meet, even when equal (a replayed response
/// belongs to the client that caused it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Principal {
    /// Every client shares one key space: for an API with one client, or behind a gateway that
    /// already made the keys unique.
    #[default]
    None,
    /// The value of a request header (`X-Account-Id`, set by an authenticating proxy); a request
    /// without it is refused (400).
    Header(HeaderName),
    /// The SHA-256 of the `Authorization` header: each API key or token its own key space; a
    /// request without one is refused (400).
    Bearer,
}

impl Principal {
    /// The principal of a request: a digest of what identifies it, or "" for [`Principal::None`].
    ///
    /// # Errors
    /// The header that identifies the principal is absent (or repeated).
    pub fn of(&self, headers: &HeaderMap) -> Result<String, PrincipalProblem> {
        let name = match self {
            Self::None => return Ok(String::new()),
            Self::Header(name) => name,
            Self::Bearer => &http::header::AUTHORIZATION,
        };
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (Some(value), None) => Ok(Self::digest(value.as_bytes())),
            (None, _) => Err(PrincipalProblem {
                header: name.as_str().to_owned(),
                why: "absent",
            }),
            (Some(_), Some(_)) => Err(PrincipalProblem {
                header: name.as_str().to_owned(),
                why: "sent more than once",
            }),
        }
    }
}

impl Principal {
    /// What [`Principal::of`] makes of the value of the header that names the principal (the
    /// whole `Authorization` value for [`Principal::Bearer`]): a digest, never the value.
    pub fn digest(value: &[u8]) -> String {
        hex16(&Sha256::digest(value))
    }
}

/// A request whose principal cannot be told (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{header} is {why}: idempotency keys are kept per client, and this request names none")]
pub struct PrincipalProblem {
    /// The header that identifies the principal.
    pub header: String,
    /// `absent`, `sent more than once`.
    pub why: &'static str,
}

/// The request's fingerprint (draft section 2.4): SHA-256 over the method, the path with its
/// query, the values of `headers` (in the order given; an absent one counts as absent, not as
/// empty) and the body. The same key with another fingerprint is a different request (422).
pub fn fingerprint(
    method: &Method,
    path_and_query: &str,
    request_headers: &HeaderMap,
    headers: &[HeaderName],
    body: &[u8],
) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    field(method.as_str().as_bytes());
    field(path_and_query.as_bytes());
    for name in headers {
        let values: Vec<&[u8]> = request_headers
            .get_all(name)
            .iter()
            .map(http::HeaderValue::as_bytes)
            .collect();
        field(name.as_str().as_bytes());
        field(&(values.len() as u64).to_be_bytes());
        for v in values {
            field(v);
        }
    }
    field(body);
    h.finalize().into()
}

/// The event id a keyed request is claimed under, within its API's source: the scope (principal,
/// method, route) as 12 hex digits, a colon, and the key (`3f9a0c1b27de:8e03978e-...`). A key too
/// long to fit an event id with its scope is replaced by its SHA-256 (`...:sha256:<hex>`).
pub fn event_id(principal: &str, route: &Route, key: &IdempotencyKey) -> String {
    let mut h = Sha256::new();
    for part in [principal, route.method().as_str(), route.as_str()] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    let scope = &hex16(&h.finalize())[..12];
    let id = format!("{scope}:{key}");
    if id.len() <= idemgate_core::EventId::MAX_LEN {
        id
    } else {
        let digest = Sha256::digest(key.as_str().as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{scope}:sha256:{hex}")
    }
}

fn hex16(digest: &[u8]) -> String {
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(value: &str) -> Result<Option<IdempotencyKey>, KeyProblem> {
        let mut h = HeaderMap::new();
        h.insert(HEADER, value.parse().unwrap());
        IdempotencyKey::from_headers(&h)
    }

    #[test]
    fn keys_are_structured_field_strings_or_bare_tokens() {
        assert_eq!(
            key("\"8e03978e-40d5-43e8-bc93-6894a57f9324\"")
                .unwrap()
                .unwrap()
                .as_str(),
            "8e03978e-40d5-43e8-bc93-6894a57f9324"
        );
        assert_eq!(
            key("stripe-node-retry-2b6c1f0e-5d0e-4a5b-9d9e-3c0e7a1b2c3d")
                .unwrap()
                .unwrap()
                .as_str(),
            "stripe-node-retry-2b6c1f0e-5d0e-4a5b-9d9e-3c0e7a1b2c3d"
        );
        assert_eq!(
            key(r#""a \"quoted\" \\ key""#).unwrap().unwrap().as_str(),
            r#"a "quoted" \ key"#
        );
        assert_eq!(IdempotencyKey::from_headers(&HeaderMap::new()), Ok(None));
    }

    #[test]
    fn bad_keys_are_named() {
        assert_eq!(key("\"\""), Err(KeyProblem::Empty));
        assert_eq!(key(""), Err(KeyProblem::Empty));
        assert_eq!(key(&"k".repeat(256)), Err(KeyProblem::TooLong { len: 256 }));
        assert!(key(&"k".repeat(255)).unwrap().is_some());
        for bad in ["\"open", "\"a\";p=1", "a b", "a,b", "\"a\\n\"", "\"a\" x"] {
            assert!(matches!(key(bad), Err(KeyProblem::Syntax { .. })), "{bad}");
        }
        let mut h = HeaderMap::new();
        h.append(HEADER, "a".parse().unwrap());
        h.append(HEADER, "b".parse().unwrap());
        assert_eq!(IdempotencyKey::from_headers(&h), Err(KeyProblem::Repeated));
    }

    #[test]
    fn routes_match_whole_segments() {
        let r: Route = "PATCH /orders/*".parse().unwrap();
        assert!(r.matches(&Method::PATCH, "/orders/42"));
        assert!(!r.matches(&Method::POST, "/orders/42"));
        assert!(!r.matches(&Method::PATCH, "/orders"));
        assert!(!r.matches(&Method::PATCH, "/orders/"));
        assert!(!r.matches(&Method::PATCH, "/orders/42/items"));
        let r: Route = "POST /payments".parse().unwrap();
        assert!(r.matches(&Method::POST, "/payments"));
        assert!(!r.matches(&Method::POST, "/payments/"));
        assert!(!r.matches(&Method::POST, "/paymentsx"));
        for bad in [
            "POST",
            "post /payments",
            "POST payments",
            "POST /orders/ord*",
            "GET /payments",
            "POST /a//b",
            "POST /a?b=1",
        ] {
            assert!(bad.parse::<Route>().is_err(), "{bad}");
        }
    }

    #[test]
    fn principals_scope_keys() {
        let route: Route = "POST /payments".parse().unwrap();
        let k: IdempotencyKey = "k1".parse().unwrap();
        let mut a = HeaderMap::new();
        a.insert(http::header::AUTHORIZATION, "Bearer sk_a".parse().unwrap());
        let mut b = HeaderMap::new();
        b.insert(http::header::AUTHORIZATION, "Bearer sk_b".parse().unwrap());
        let pa = Principal::Bearer.of(&a).unwrap();
        let pb = Principal::Bearer.of(&b).unwrap();
        assert_ne!(event_id(&pa, &route, &k), event_id(&pb, &route, &k));
        assert_eq!(event_id(&pa, &route, &k), event_id(&pa, &route, &k));
        assert!(Principal::Bearer.of(&HeaderMap::new()).is_err());
        assert_eq!(Principal::None.of(&a).unwrap(), "");
        let long: IdempotencyKey = "k".repeat(255).parse().unwrap();
        let id = event_id("", &route, &long);
        assert!(id.contains(":sha256:") && id.len() <= idemgate_core::EventId::MAX_LEN);
        assert!(idemgate_core::EventId::new(event_id("", &route, &k)).is_ok());
    }

    #[test]
    fn fingerprints_cover_method_path_headers_and_body() {
        let h = HeaderMap::new();
        let base = fingerprint(&Method::POST, "/p", &h, &[], b"{}");
        assert_eq!(base, fingerprint(&Method::POST, "/p", &h, &[], b"{}"));
        assert_ne!(base, fingerprint(&Method::POST, "/p", &h, &[], b"{ }"));
        assert_ne!(base, fingerprint(&Method::PUT, "/p", &h, &[], b"{}"));
        assert_ne!(base, fingerprint(&Method::POST, "/p?x=1", &h, &[], b"{}"));
        let name = HeaderName::from_static("x-currency");
        let mut eur = HeaderMap::new();
        eur.insert(name.clone(), "eur".parse().unwrap());
        assert_ne!(
            fingerprint(&Method::POST, "/p", &h, std::slice::from_ref(&name), b"{}"),
            fingerprint(
                &Method::POST,
                "/p",
                &eur,
                std::slice::from_ref(&name),
                b"{}"
            )
        );
    }
}
