//! One `[[api]]` as the sidecar serves it: its rules, its upstream and the client that reaches
//! it, built once from the configuration ([`crate::state::Sources`]).

use std::sync::Arc;
use std::time::Duration;

use axum::http;
use idemgate::idempotency_key::KeyRules;

use crate::config::ApiPolicy;
use crate::forward::ProxyClient;

/// One API: its rules, its upstream and the client that reaches it.
#[derive(Debug)]
pub(crate) struct Api {
    /// Where its clients reach it.
    pub(crate) listen: String,
    pub(crate) rules: Arc<KeyRules>,
    upstream: http::Uri,
    pub(crate) timeout: Duration,
    pub(crate) client: ProxyClient,
}

impl Api {
    /// The API of `policy`, with a client of its own.
    ///
    /// # Errors
    /// The `https://` upstream's TLS settings cannot be used (a file, no authority trusted).
    pub(crate) fn new(policy: ApiPolicy) -> Result<Self, idemgate_tls::TlsError> {
        let client = match &policy.tls {
            Some(tls) => crate::forward::streaming_client(tls)?,
            None => crate::forward::streaming_http_client(),
        };
        Ok(Self {
            listen: policy.listen,
            rules: Arc::new(policy.rules),
            upstream: policy.upstream,
            timeout: policy.upstream_timeout,
            client,
        })
    }

    /// Whether the upstream speaks TLS (`https://`).
    pub(crate) fn https(&self) -> bool {
        self.upstream.scheme_str() == Some("https")
    }

    /// The upstream URI of a request to `path_and_query`: the upstream's scheme and authority,
    /// its path prefix, then the request's path and query.
    pub(crate) fn target(&self, path_and_query: &str) -> Result<http::Uri, http::Error> {
        let prefix = self.upstream.path().trim_end_matches('/');
        let scheme = self.upstream.scheme_str().unwrap_or("http");
        let authority = self.upstream.authority().map_or("", |a| a.as_str());
        Ok(format!("{scheme}://{authority}{prefix}{path_and_query}").parse()?)
    }
}
