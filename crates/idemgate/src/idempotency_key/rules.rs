//! [`KeyRules`]: which requests are keyed and how their keys are kept, and every answer of
//! idemgate's own ([`Refusal`]): problem+json (RFC 9457) with a stable `type`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use http_body_util::Full;
use idemgate_core::{
    ClaimRequest, EventId, Fingerprint, Key, LateDuplicates, SourceName, StoredResult, Timestamp,
};

use super::request::{
    IdempotencyKey, KeyProblem, Principal, PrincipalProblem, REPLAYED, Route, event_id, fingerprint,
};
use crate::answer::{problem_body, with_body};

/// The largest request body fingerprinted by default (1 MiB); a keyed request with a larger one
/// is refused (413), since its retries could not be told from another request.
pub const BODY_LIMIT: usize = 1 << 20;

/// Which response statuses give the key back (released: the client's retry runs the request
/// again) rather than keep the response for every retry. By default a 5xx and a 429 are released
/// and everything else is kept, a 4xx included, as Stripe's API does: a 400 for a bad request
/// is the answer to that request, and its retry gets the same 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseOn {
    /// Release on 5xx (default true).
    pub server_errors: bool,
    /// Release on 429 Too Many Requests (default true): the request was not run.
    pub too_many_requests: bool,
    /// Release on every other 4xx (default false).
    pub client_errors: bool,
}

impl Default for ReleaseOn {
    fn default() -> Self {
        Self {
            server_errors: true,
            too_many_requests: true,
            client_errors: false,
        }
    }
}

impl ReleaseOn {
    /// Whether a response of `status` releases the key.
    pub fn releases(&self, status: StatusCode) -> bool {
        if status.is_server_error() {
            self.server_errors
        } else if status == StatusCode::TOO_MANY_REQUESTS {
            self.too_many_requests
        } else if status.is_client_error() {
            self.client_errors
        } else {
            false
        }
    }
}

/// Which requests are keyed and how their keys are kept: the API's name (the source its keys
/// are claimed under, as `idemgate lookup` and history show them), its routes, whose keys they
/// are, what makes two requests the same, and how long a key lives.
#[derive(Debug, Clone)]
pub struct KeyRules {
    pub(crate) source: SourceName,
    routes: Vec<Route>,
    principal: Principal,
    fingerprint_headers: Vec<HeaderName>,
    ttl: Duration,
    lease: Duration,
    required: bool,
    pub(crate) wait: Option<Duration>,
    pub(crate) release: ReleaseOn,
    body_limit: usize,
    replay_headers: Vec<HeaderName>,
}

impl KeyRules {
    /// The rules of the API named `source`, whose clients retry for up to `ttl` (a key is kept
    /// that long after its first request: take it from the clients' retry contract, see
    /// [`idemgate_core::policy`]). By default: every request that is not GET, HEAD, OPTIONS or
    /// TRACE is keyed, a key is required, keys are shared by all clients
    /// ([`Principal::None`]), the lease is a minute, an in-flight key is answered 409 at once,
    /// and `Content-Type`, `Location` and `Content-Location` are kept with the body.
    pub fn new(source: SourceName, ttl: Duration) -> Self {
        Self {
            source,
            routes: Vec::new(),
            principal: Principal::None,
            fingerprint_headers: Vec::new(),
            ttl,
            lease: Duration::from_secs(60).min(ttl),
            required: true,
            wait: None,
            release: ReleaseOn::default(),
            body_limit: BODY_LIMIT,
            replay_headers: vec![
                header::CONTENT_TYPE,
                header::LOCATION,
                header::CONTENT_LOCATION,
            ],
        }
    }

    /// Keys only these routes (`"POST /payments"`, `"PATCH /orders/*"`); any other request
    /// passes through untouched.
    #[must_use]
    pub fn routes(mut self, routes: impl IntoIterator<Item = Route>) -> Self {
        self.routes = routes.into_iter().collect();
        self
    }

    /// Whose keys these are ([`Principal`]).
    #[must_use]
    pub fn principal(mut self, principal: Principal) -> Self {
        self.principal = principal;
        self
    }

    /// Request headers that are part of the fingerprint besides the method, path, query and
    /// body (a currency or an API version header that changes what the request does).
    #[must_use]
    pub fn fingerprint_headers(mut self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        self.fingerprint_headers = headers.into_iter().collect();
        self
    }

    /// How long a request may run before another copy of its key may run it (default a minute,
    /// at most the TTL): longer than the slowest request.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.min(self.ttl);
        self
    }

    /// A keyed route's request without a key passes through unkeyed instead of being refused
    /// (400).
    #[must_use]
    pub fn key_optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// A copy of a key whose first request is still running waits up to `wait` for it and is
    /// answered with its response, instead of 409 at once. The copy reads the key's record
    /// while it waits (every 50 ms; no write, no history row) and claims again only once the
    /// first has ended or its lease has run out.
    #[must_use]
    pub fn wait_for_first(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Which statuses give the key back ([`ReleaseOn`]).
    #[must_use]
    pub fn release_on(mut self, release: ReleaseOn) -> Self {
        self.release = release;
        self
    }

    /// The largest request body fingerprinted ([`BODY_LIMIT`] by default).
    #[must_use]
    pub fn body_limit(mut self, limit: usize) -> Self {
        self.body_limit = limit;
        self
    }

    /// Response headers kept with the body and replayed (besides `Content-Type`, `Location`
    /// and `Content-Location`).
    #[must_use]
    pub fn replay_headers(mut self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        self.replay_headers.extend(headers);
        self
    }

    /// The largest keyed request body ([`KeyRules::body_limit`]).
    pub fn max_body(&self) -> usize {
        self.body_limit
    }

    /// The API's name: the source its keys are claimed under.
    pub fn source(&self) -> &SourceName {
        &self.source
    }

    /// How long a key is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The route that keys a request of `method` to `path`: `None` when it passes through.
    pub fn route(&self, method: &Method, path: &str) -> Option<Route> {
        if self.routes.is_empty() {
            let safe = matches!(
                *method,
                Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
            );
            return (!safe).then(|| Route::any(method.clone()));
        }
        self.routes
            .iter()
            .find(|r| r.matches(method, path))
            .cloned()
    }

    /// What to do with a request, from its head: pass it through (not a keyed route, or no key
    /// where none is required), refuse it, or key it.
    pub fn admit(&self, parts: &http::request::Parts) -> Admission {
        let Some(route) = self.route(&parts.method, parts.uri.path()) else {
            return Admission::Pass;
        };
        let key = match IdempotencyKey::from_headers(&parts.headers) {
            Ok(Some(key)) => key,
            Ok(None) if self.required => return Admission::Refuse(Refusal::MissingKey { route }),
            Ok(None) => return Admission::Pass,
            Err(e) => return Admission::Refuse(Refusal::BadKey(e)),
        };
        let principal = match self.principal.of(&parts.headers) {
            Ok(p) => p,
            Err(e) => return Admission::Refuse(Refusal::NoPrincipal(e)),
        };
        Admission::Keyed(Keyed {
            event_id: event_id(&principal, &route, &key),
            key,
            route,
        })
    }

    /// The claim of a keyed request with its body.
    ///
    /// # Errors
    /// [`Refusal::BadKey`] should the event id not be one (it always is: the key is bounded and
    /// printable).
    pub fn claim(
        &self,
        keyed: &Keyed,
        parts: &http::request::Parts,
        body: &[u8],
    ) -> Result<ClaimRequest, Refusal> {
        let event_id = EventId::new(keyed.event_id.clone()).map_err(|_| {
            Refusal::BadKey(KeyProblem::Syntax {
                why: "it cannot be kept",
            })
        })?;
        let path = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path(), http::uri::PathAndQuery::as_str);
        let fp = fingerprint(
            &parts.method,
            path,
            &parts.headers,
            &self.fingerprint_headers,
            body,
        );
        Ok(ClaimRequest::new(
            Key::new(self.source.clone(), event_id),
            self.lease,
            self.ttl,
        )
        .fingerprint(Fingerprint(fp))
        // An expired key is a new key (draft section 2.3), not a late duplicate.
        .late_duplicates(LateDuplicates::Off))
    }

    /// What is kept of a response: its status, the replayed headers, its body.
    pub fn keep(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> StoredResult {
        let mut kept = StoredResult::new(status.as_u16()).body(body.to_vec());
        for name in &self.replay_headers {
            for value in headers.get_all(name) {
                kept = kept.header(name.as_str(), value.as_bytes().to_vec());
            }
        }
        kept
    }
}

/// What [`KeyRules::admit`] makes of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Not keyed: pass it through untouched.
    Pass,
    /// Refused before anything is stored.
    Refuse(Refusal),
    /// Keyed: claim it.
    Keyed(Keyed),
}

/// A keyed request's key, the route it matched and the event id it is claimed under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyed {
    /// The client's key.
    pub key: IdempotencyKey,
    /// The route it matched.
    pub route: Route,
    /// The event id it is claimed under ([`super::request::event_id`]).
    pub event_id: String,
}

/// An answer of idemgate's own to a keyed request, as problem+json (RFC 9457) with `type`
/// `urn:idemgate:problem:{kind}`, and an `error` member as Stripe's API writes one (`type`
/// `idempotency_error`, or `api_error` for a 5xx; `code` the kind; `message` the detail), which
/// the stripe client packages raise as errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 400 `missing_idempotency_key`: a keyed route's request without a key (draft section 2.7).
    MissingKey {
        /// The route.
        route: Route,
    },
    /// 400 `invalid_idempotency_key`.
    BadKey(KeyProblem),
    /// 400 `missing_principal`: the header that says whose key it is is absent.
    NoPrincipal(PrincipalProblem),
    /// 400 `body_unreadable`: the request body could not be read (the client went away while
    /// sending it); nothing was claimed.
    BodyUnreadable,
    /// 413 `body_too_large`: the body is over the fingerprint limit.
    BodyTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// 422 `idempotency_key_reused`: the key was first used for another request (another
    /// fingerprint; draft section 2.7).
    Reused {
        /// The key's first request.
        first_seen: Timestamp,
    },
    /// 409 `in_flight` with `Retry-After`: the key's first request is still running (draft
    /// section 2.7).
    InFlight {
        /// Until its lease ends, at least 1 s.
        retry_after: Duration,
    },
    /// 410 `response_not_kept`: the key's request was processed, but its response was not kept
    /// (over the result limit), so it cannot be given back; the request is not run again.
    NotKept {
        /// The key's first request.
        first_seen: Option<Timestamp>,
        /// The response's size, when it was too large.
        size: Option<usize>,
    },
    /// 503 `store_unavailable` with `Retry-After: 1`: the key could not be claimed; nothing ran.
    StoreUnavailable,
    /// 502 `upstream_unavailable`: the upstream could not be reached or failed mid-answer; the
    /// key was released.
    Upstream {
        /// What failed.
        detail: String,
    },
}

impl Refusal {
    /// Its status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingKey { .. }
            | Self::BadKey(_)
            | Self::NoPrincipal(_)
            | Self::BodyUnreadable => StatusCode::BAD_REQUEST,
            Self::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Reused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::InFlight { .. } => StatusCode::CONFLICT,
            Self::NotKept { .. } => StatusCode::GONE,
            Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Upstream { .. } => StatusCode::BAD_GATEWAY,
        }
    }

    /// Its stable kind: the problem type's last part and `Idemgate-Outcome`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingKey { .. } => "missing_idempotency_key",
            Self::BadKey(_) => "invalid_idempotency_key",
            Self::NoPrincipal(_) => "missing_principal",
            Self::BodyUnreadable => "body_unreadable",
            Self::BodyTooLarge { .. } => "body_too_large",
            Self::Reused { .. } => "idempotency_key_reused",
            Self::InFlight { .. } => "in_flight",
            Self::NotKept { .. } => "response_not_kept",
            Self::StoreUnavailable => "store_unavailable",
            Self::Upstream { .. } => "upstream_unavailable",
        }
    }

    /// What happened, for a person.
    pub fn detail(&self) -> String {
        match self {
            Self::MissingKey { route } => format!(
                "{route} requires an Idempotency-Key header: send a unique key per operation (a UUID) and the same key on each retry"
            ),
            Self::BadKey(e) => e.to_string(),
            Self::NoPrincipal(e) => e.to_string(),
            Self::BodyUnreadable => {
                "the request body could not be read; nothing was processed".to_owned()
            }
            Self::BodyTooLarge { limit } => format!(
                "the body is over {limit} bytes, the most a keyed request's body may be (its retries are told apart by it)"
            ),
            Self::Reused { first_seen } => format!(
                "this Idempotency-Key was first used at {first_seen} for a different request (method, path, query or body): use a new key for a new request"
            ),
            Self::InFlight { retry_after } => format!(
                "a request with this Idempotency-Key is still being processed; retry after {} s",
                retry_after.as_secs().max(1)
            ),
            Self::NotKept { size, .. } => match size {
                Some(size) => format!(
                    "the request with this Idempotency-Key was processed, but its response ({size} bytes) was over the limit of what is kept and cannot be given back; it is not processed again"
                ),
                None => "the request with this Idempotency-Key was processed, but its response was not kept and cannot be given back; it is not processed again".to_owned(),
            },
            Self::StoreUnavailable => {
                "the idempotency store is unavailable; nothing was processed: retry".to_owned()
            }
            Self::Upstream { detail } => format!(
                "the upstream did not answer ({detail}); the Idempotency-Key was released: retry with the same key"
            ),
        }
    }

    /// The answer: problem+json, `Idemgate-Outcome`, and `Retry-After` where one applies.
    pub fn into_response(self) -> http::Response<Full<Bytes>> {
        let status = self.status();
        let mut body = problem_body(status, self.kind(), &self.detail());
        let retry_after = match &self {
            Self::InFlight { retry_after } => Some(retry_after.as_secs().max(1)),
            Self::StoreUnavailable => Some(1),
            _ => None,
        };
        match &self {
            Self::Reused { first_seen }
            | Self::NotKept {
                first_seen: Some(first_seen),
                ..
            } => {
                body["first_seen"] = serde_json::json!(first_seen.to_string());
            }
            _ => {}
        }
        if let Some(s) = retry_after {
            body["retry_after_s"] = serde_json::json!(s);
        }
        // Also as Stripe's API writes an error, so that clients written for it (the stripe
        // packages, which read a body without `error` as a success) raise it.
        body["error"] = serde_json::json!({
            "type": if status.is_server_error() { "api_error" } else { "idempotency_error" },
            "code": self.kind(),
            "message": self.detail(),
        });
        let mut r = with_body(status, self.kind(), "application/problem+json", body);
        if let Some(s) = retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// A kept response given back to a retry: its status, its kept headers and its body byte for
/// byte, with `Idempotent-Replayed: true`.
pub fn replay(kept: &StoredResult) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(Bytes::from(kept.body.clone())));
    *r.status_mut() = StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK);
    for (name, value) in &kept.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            r.headers_mut().append(name, value);
        }
    }
    r.headers_mut()
        .insert(REPLAYED, HeaderValue::from_static("true"));
    r
}
