//! `[[api]]`: idemgate as a sidecar in front of an HTTP API of the user's own, applying the
//! `Idempotency-Key` rules ([`idemgate::idempotency_key`]) to the routes it names and passing
//! every other request through.

use std::time::Duration;

use axum::http::{self, HeaderName};
use idemgate::idempotency_key::{KeyRules, Principal, ReleaseOn, Route};
use idemgate_core::policy::{ContractTerms, TtlPolicy};
use idemgate_core::{Human, SourceName};
use idemgate_tls::{ClientTls, TlsError};
use serde::Deserialize;

use super::tls::Peer;
use super::{ConfigError, SourceTls, check_listen};

/// An api's upstream, as its TLS errors name it.
const UPSTREAM: Peer = Peer {
    url_key: "upstream",
    noun: "upstream",
};

/// One `[[api]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// The API's name: the source its keys are claimed under, in history, `idemgate lookup`,
    /// metrics and the dashboard. Distinct from every source's.
    pub name: String,
    /// Where the sidecar listens for the API's clients, `host:port`: its own address, so the
    /// API's paths never meet the gateway's.
    pub listen: String,
    /// The API itself: `http://host:port` or `https://host:port`, optionally with a path prefix
    /// every request's path is appended to.
    pub upstream: String,
    /// The keyed routes, `"METHOD /path"` with `*` for one whole segment (`"POST /payments"`,
    /// `"PATCH /orders/*"`). Required: every other request passes through untouched.
    #[serde(default)]
    pub routes: Vec<String>,
    /// Whose keys they are: `"none"` (the default: one key space), `"bearer"` (a key space per
    /// `Authorization` header) or `"header:X-Account-Id"` (per value of that header).
    pub principal: Option<String>,
    /// The clients' retry contract, which sets how long a key is kept: `retry_window`
    /// (required), and as for a source `queue_lag`, `clock_skew` and `replay_margin`.
    #[serde(default, with = "humantime_serde")]
    pub retry_window: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub queue_lag: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub clock_skew: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub replay_margin: Option<Duration>,
    /// How long a keyed request may run upstream before another copy of its key may run it
    /// (default twice `upstream_timeout`, at least 60 s, at most the key's lifetime).
    #[serde(default, with = "humantime_serde")]
    pub lease: Option<Duration>,
    /// Longest the upstream may take to answer a request (default 30 s); then the key is given
    /// back and the client hears 502.
    #[serde(default = "default_upstream_timeout", with = "humantime_serde")]
    pub upstream_timeout: Duration,
    /// Request headers that are part of a keyed request's fingerprint besides its method, path,
    /// query and body.
    #[serde(default)]
    pub fingerprint_headers: Vec<String>,
    /// Response headers kept and replayed besides `Content-Type`, `Location` and
    /// `Content-Location`.
    #[serde(default)]
    pub replay_headers: Vec<String>,
    /// A copy of a key whose first request is still running waits up to this long for its
    /// response instead of hearing 409 at once.
    #[serde(default, with = "humantime_serde")]
    pub wait_for_first: Option<Duration>,
    /// Whether a keyed route's request needs a key (default true: 400 without one); false
    /// passes such a request through unkeyed.
    #[serde(default = "default_true")]
    pub key_required: bool,
    /// The response statuses that give the key back so the retry runs again: any of `"5xx"`,
    /// `"429"` and `"4xx"` (default `["5xx", "429"]`; every other response is kept).
    pub release_on: Option<Vec<String>>,
    /// The largest keyed request body, in bytes (default 1 MiB; larger gets 413).
    pub body_limit: Option<usize>,
    /// `[api.tls]`, for an `https://` upstream: the authorities trusted for it besides (or
    /// instead of) the system's, and a client certificate shown when it asks for one; the same
    /// keys as `[source.tls]`.
    pub tls: Option<SourceTls>,
}

fn default_upstream_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_true() -> bool {
    true
}

/// A validated `[[api]]`.
#[derive(Debug, Clone)]
pub struct ApiPolicy {
    /// `listen`.
    pub listen: String,
    /// The rules its keyed requests follow.
    pub rules: KeyRules,
    /// `upstream`, parsed: scheme, authority and path prefix (without a trailing `/`).
    pub upstream: http::Uri,
    /// `upstream_timeout`.
    pub upstream_timeout: Duration,
    /// How an `https://` upstream is trusted (`[api.tls]`, or the system's authorities);
    /// `None` for `http://`.
    pub tls: Option<ClientTls>,
}

impl ApiConfig {
    pub(crate) fn invalid(&self, key: &'static str, why: impl Into<String>) -> ConfigError {
        ConfigError::Api {
            name: self.name.clone(),
            key,
            why: why.into(),
        }
    }

    /// The API's rules and upstream, every key checked.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the API and the key.
    pub fn policy(&self) -> Result<ApiPolicy, ConfigError> {
        let name =
            SourceName::new(self.name.clone()).map_err(|e| self.invalid("name", e.to_string()))?;
        check_listen("listen", &self.listen).map_err(|e| match e {
            ConfigError::Global { why, .. } => self.invalid("listen", why),
            e => e,
        })?;
        let upstream = self.upstream()?;
        let tls = self.client_tls(&upstream)?;
        if self.routes.is_empty() {
            return Err(self.invalid(
                "routes",
                "list the routes whose requests are keyed, such as [\"POST /payments\", \"PATCH /orders/*\"]",
            ));
        }
        let routes = self
            .routes
            .iter()
            .map(|r| {
                r.parse::<Route>()
                    .map_err(|e| self.invalid("routes", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let principal = match self.principal.as_deref() {
            None | Some("none") => Principal::None,
            Some("bearer") => Principal::Bearer,
            Some(other) => match other.strip_prefix("header:") {
                Some(header) => {
                    Principal::Header(HeaderName::try_from(header.trim()).map_err(|_| {
                        self.invalid("principal", format!("{header:?} is not a header name"))
                    })?)
                }
                None => {
                    return Err(self.invalid(
                        "principal",
                        format!("{other:?} is not one of \"none\", \"bearer\" and \"header:NAME\""),
                    ));
                }
            },
        };
        let contract = ContractTerms {
            retry_window: self.retry_window,
            queue_lag: self.queue_lag,
            clock_skew: self.clock_skew,
            replay_margin: self.replay_margin,
        }
        .resolve(&self.name, "api", None)
        .map_err(|_| {
            self.invalid(
                "retry_window",
                "required: how long the API's clients retry a request (the key is kept that long, plus queue_lag, clock_skew and replay_margin)",
            )
        })?;
        let ttl = TtlPolicy::new(&self.name, contract, None)?.ttl;
        let lease = self.lease.unwrap_or_else(|| {
            self.upstream_timeout
                .saturating_mul(2)
                .max(Duration::from_secs(60))
                .min(ttl)
        });
        if lease > ttl {
            return Err(self.invalid(
                "lease",
                format!(
                    "{} is longer than the key's lifetime of {}",
                    Human(lease),
                    Human(ttl)
                ),
            ));
        }
        if lease <= self.upstream_timeout {
            return Err(self.invalid(
                "lease",
                format!(
                    "{} is not longer than upstream_timeout ({}): a copy of the key could run the request again while the first still waits for the upstream",
                    Human(lease),
                    Human(self.upstream_timeout)
                ),
            ));
        }
        let headers = |key: &'static str, names: &[String]| {
            names
                .iter()
                .map(|n| {
                    HeaderName::try_from(n.as_str())
                        .map_err(|_| self.invalid(key, format!("{n:?} is not a header name")))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let mut release = ReleaseOn {
            server_errors: false,
            too_many_requests: false,
            client_errors: false,
        };
        match &self.release_on {
            None => release = ReleaseOn::default(),
            Some(classes) => {
                for class in classes {
                    match class.as_str() {
                        "5xx" => release.server_errors = true,
                        "429" => release.too_many_requests = true,
                        "4xx" => {
                            release.client_errors = true;
                            release.too_many_requests = true;
                        }
                        other => {
                            return Err(self.invalid(
                                "release_on",
                                format!("{other:?} is not one of \"5xx\", \"429\" and \"4xx\""),
                            ));
                        }
                    }
                }
            }
        }
        let mut rules = KeyRules::new(name, ttl)
            .routes(routes)
            .principal(principal)
            .lease(lease)
            .fingerprint_headers(headers("fingerprint_headers", &self.fingerprint_headers)?)
            .replay_headers(headers("replay_headers", &self.replay_headers)?)
            .release_on(release);
        if let Some(limit) = self.body_limit {
            rules = rules.body_limit(limit);
        }
        if let Some(wait) = self.wait_for_first {
            rules = rules.wait_for_first(wait);
        }
        if !self.key_required {
            rules = rules.key_optional();
        }
        Ok(ApiPolicy {
            listen: self.listen.clone(),
            rules,
            upstream,
            upstream_timeout: self.upstream_timeout,
            tls,
        })
    }

    /// The TLS settings of an `https://` upstream (`[api.tls]`, or the system's authorities
    /// without it), checked by reading every file they name; `None` for `http://`.
    fn client_tls(&self, upstream: &http::Uri) -> Result<Option<ClientTls>, ConfigError> {
        if upstream.scheme_str() != Some("https") {
            if self.tls.is_some() {
                return Err(self.invalid(
                    "tls",
                    "is set but upstream is http://, which speaks no TLS: use https://, or remove [api.tls]",
                ));
            }
            return Ok(None);
        }
        UPSTREAM
            .settings(self.tls.as_ref(), |key, why| self.invalid(key, why))
            .map(Some)
    }

    /// `e` as a [`ConfigError`] naming the `[api.tls]` key of the file at fault.
    pub(crate) fn tls_invalid(&self, e: &TlsError) -> ConfigError {
        UPSTREAM.error(self.tls.is_some(), e, |key, why| self.invalid(key, why))
    }

    fn upstream(&self) -> Result<http::Uri, ConfigError> {
        let bad = |why: &str| self.invalid("upstream", format!("{:?}: {why}", self.upstream));
        let uri: http::Uri = self
            .upstream
            .parse()
            .map_err(|_| bad("not a URL (http://host:port or https://host:port)"))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => return Err(bad("the scheme is http:// or https://")),
        }
        if uri.authority().is_none_or(|a| a.host().is_empty()) {
            return Err(bad("no host"));
        }
        if uri.query().is_some() {
            return Err(bad("no query: each request brings its own"));
        }
        Ok(uri)
    }
}
