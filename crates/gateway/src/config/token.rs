//! `api_tokens`: bearer tokens, each for what its scopes allow.
//!
//! ```toml
//! api_tokens = [
//!     "a-token-for-everything-0123",                                  # every scope
//!     { token = "workers-token-0123456789", scopes = ["claims"] },
//!     { token = "ops-token-0123456789abcd", scopes = ["replay", "dashboard"] },
//! ]
//! ```

use serde::Deserialize;

/// What a token may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Deliveries to sources with `provider = "none"` (their senders' bearer token).
    Send,
    /// The claim API: `/v1/claims...` and `/v1/events/...`.
    Claims,
    /// Moving dead letters back to the queue: `/v1/sources/{source}/replay`.
    Replay,
    /// Opening `/dashboard`.
    Dashboard,
}

impl Scope {
    /// Every scope, as a token written as a plain string has them.
    pub const ALL: [Scope; 4] = [Self::Send, Self::Claims, Self::Replay, Self::Dashboard];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Claims => "claims",
            Self::Replay => "replay",
            Self::Dashboard => "dashboard",
        }
    }
}

/// One entry of `api_tokens`: a string (every scope) or `{ token, scopes }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub token: String,
    pub scopes: Vec<Scope>,
}

impl ApiToken {
    /// Whether the token may be used for `scope`.
    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Scoped {
    token: String,
    scopes: Vec<Scope>,
}

impl<'de> Deserialize<'de> for ApiToken {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ApiToken;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a token string, or a table { token = \"...\", scopes = [\"send\", \"claims\", \"replay\", \"dashboard\"] }")
            }

            fn visit_str<E: serde::de::Error>(self, token: &str) -> Result<ApiToken, E> {
                Ok(ApiToken {
                    token: token.to_owned(),
                    scopes: Scope::ALL.to_vec(),
                })
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ApiToken, A::Error> {
                let scoped =
                    Scoped::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                if scoped.scopes.is_empty() {
                    return Err(serde::de::Error::custom(
                        "a token with no scopes is good for nothing: name at least one of send, claims, replay, dashboard",
                    ));
                }
                Ok(ApiToken {
                    token: scoped.token,
                    scopes: scoped.scopes,
                })
            }
        }
        d.deserialize_any(Visitor)
    }
}

/// A token's SHA-256: what tokens are compared by (a fixed length, whatever was presented).
pub(crate) type Digest = [u8; 32];

pub(crate) fn digest(token: &str) -> Digest {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// Two digests compared in constant time (`subtle`).
pub(crate) fn digests_equal(a: &Digest, b: &Digest) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Doc {
        api_tokens: Vec<ApiToken>,
    }

    fn parse(text: &str) -> Result<Doc, String> {
        use figment::providers::Format;
        figment::Figment::from(figment::providers::Toml::string(text))
            .extract::<Doc>()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_string_is_every_scope_and_a_table_its_own() {
        let doc = parse(
            r#"api_tokens = ["all-0123456789abcdef", { token = "w-0123456789abcdef", scopes = ["claims"] }]"#,
        )
        .unwrap();
        assert_eq!(doc.api_tokens[0].scopes, Scope::ALL);
        assert!(doc.api_tokens[1].allows(Scope::Claims));
        assert!(!doc.api_tokens[1].allows(Scope::Dashboard));
        for (bad, says) in [
            (
                r#"api_tokens = [{ token = "x", scope = ["claims"] }]"#,
                "found `scope`",
            ),
            (
                r#"api_tokens = [{ token = "x", scopes = ["claim"] }]"#,
                "`claim`",
            ),
            (
                r#"api_tokens = [{ token = "x", scopes = [] }]"#,
                "no scopes",
            ),
            (r#"api_tokens = [7]"#, "a token string, or a table"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
