//! [`Outcome`]: what the gateway did with a request, one typed value carried through it.
//!
//! A handler (or [`crate::error::AppError`]) puts the outcome on its response with [`Outcome::on`]:
//! that writes the `Idemgate-Outcome` header and leaves the value in the response's extensions,
//! where the guard layer reads it to log the request and count it, so the header, the problem
//! type, the metric and the log line cannot drift. One spelling everywhere: snake_case, as
//! history's outcomes (`claimed`, `in_flight`, `late_duplicate`, ...).

use axum::http::HeaderValue;
use axum::response::Response;
use idemgate_providers::VerifyError;

/// The header naming what idemgate did with a request.
pub const HEADER: &str = "idemgate-outcome";

macro_rules! outcomes {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// What the gateway did with a request.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Outcome {
            $($(#[$doc])* $variant,)*
        }

        impl Outcome {
            /// Every outcome, for documentation and tests.
            pub const ALL: &'static [Outcome] = &[$(Outcome::$variant,)*];

            /// The spelling in the header, the problem type, the metrics and the logs.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Outcome::$variant => $name,)*
                }
            }
        }
    };
}

outcomes! {
    /// Forwarded; the downstream answered 2xx.
    Forwarded => "forwarded",
    /// Claimed and acknowledged (a source without a `forward_url`).
    Accepted => "accepted",
    /// Inbox mode: claimed and queued in one transaction (202); the dispatcher delivers it.
    Queued => "queued",
    /// Slack's signed URL verification, answered with its challenge.
    Challenge => "challenge",
    /// A verified message for the gateway itself (SNS's subscription handshake), handled.
    Handshake => "handshake",
    /// A batch of events (SendGrid), each claimed on its own: the body says what became of each.
    Batch => "batch",
    /// Processed before, within the TTL: nothing forwarded.
    Duplicate => "duplicate",
    /// Processed before, after its record expired, and rejected by the source's policy.
    LateDuplicate => "late_duplicate",
    /// The same id with another payload.
    Conflict => "conflict",
    /// Another delivery holds the claim under a live lease.
    InFlight => "in_flight",
    /// Claim API: claimed.
    Claimed => "claimed",
    /// Claim API: completed.
    Completed => "completed",
    /// Claim API: released.
    Released => "released",
    /// Claim API: a token that no longer holds the claim.
    StaleToken => "stale_token",
    /// Claim API: a release of a claim its token completed (refused: the event was processed).
    CompletedClaim => "completed_claim",
    /// `/v1/events`: an event's record and history.
    Lookup => "lookup",
    /// `/v1/sources/{source}/replay`: dead letters moved back to the queue.
    Replayed => "replayed",
    /// Replay of a source that is not in inbox mode.
    NotInbox => "not_inbox",
    /// A replay without a reason (or with a `since_s` that is not whole seconds).
    InvalidReason => "invalid_reason",
    /// `/healthz`: every component answered.
    Healthy => "healthy",
    /// `/healthz`: the store answered; another component did not, or warns (the Redis tier is
    /// down, an inbox lags or holds dead letters).
    Degraded => "degraded",
    /// `/livez`: the process answers.
    Live => "live",
    /// `/readyz`: the store answers at the binary's schema, every dispatcher runs.
    Ready => "ready",
    /// `/readyz`: not ready (503); the body says which check failed.
    NotReady => "not_ready",
    /// `/metrics`.
    Metrics => "metrics",
    /// `/openapi.json`.
    Openapi => "openapi",
    /// `/dashboard`: the overview (or the redirect that keeps a `?token=` in a cookie).
    Dashboard => "dashboard",
    /// `/dashboard` refused: no valid token, and not a loopback peer (or `dashboard_token` set).
    DashboardForbidden => "dashboard_forbidden",
    /// The downstream answered other than 2xx.
    ForwardFailed => "forward_failed",
    /// The downstream could not be reached.
    ForwardUnreachable => "forward_unreachable",
    /// The downstream did not answer within `forward_timeout`.
    ForwardTimeout => "forward_timeout",
    /// A broker destination did not take the event (503 with `Retry-After`: the sender's retry
    /// publishes again).
    DestinationUnavailable => "destination_unavailable",
    /// No source of that name.
    UnknownSource => "unknown_source",
    /// The body is over `limits.body_limit`.
    BodyTooLarge => "body_too_large",
    /// The body could not be read.
    BodyUnreadable => "body_unreadable",
    /// No valid bearer token.
    Unauthorized => "unauthorized",
    /// A valid bearer token without the scope the route needs (403).
    InsufficientScope => "insufficient_scope",
    /// The store failed.
    StoreUnavailable => "store_unavailable",
    /// The gateway is stopping.
    ShuttingDown => "shutting_down",
    /// The request took longer than `limits.request_timeout`.
    RequestTimeout => "request_timeout",
    /// A header the sender's scheme needs is absent.
    MissingHeader => "missing_header",
    /// A header is there but cannot be read.
    MalformedHeader => "malformed_header",
    /// No signature matches an active secret.
    BadSignature => "bad_signature",
    /// The signed timestamp is older than the tolerance.
    StaleTimestamp => "stale_timestamp",
    /// The signed timestamp is further ahead than the tolerance.
    FutureTimestamp => "future_timestamp",
    /// A verified delivery without an event id.
    MissingEventId => "missing_event_id",
    /// An event id that is not valid.
    InvalidEventId => "invalid_event_id",
    /// A body that is not the JSON the route or the scheme needs.
    InvalidJson => "invalid_json",
    /// A body the scheme authenticates or reads its signature from that cannot be read (an SNS
    /// message, a Mailgun body).
    MalformedBody => "malformed_body",
    /// A signed token whose claim does not hold (Pub/Sub: `aud`, `iss`, `exp`, ...).
    BadClaim => "bad_claim",
    /// A token naming a key the source's JWKS lacks.
    UnknownKey => "unknown_key",
    /// A URL in the delivery the source does not trust (SNS's `SigningCertURL`).
    UntrustedUrl => "untrusted_url",
    /// A document the signature check needs could not be fetched.
    DocumentUnavailable => "document_unavailable",
    /// A fetched document the signature check cannot use.
    BadDocument => "bad_document",
    /// An SNS subscription could not be confirmed.
    ConfirmFailed => "confirm_failed",
    /// Basic auth credentials that match none configured (Postmark).
    BadCredentials => "bad_credentials",
    /// A verified SNS message of a topic outside the source's `topic_arns`.
    UntrustedTopic => "untrusted_topic",
    /// The bodies being read already hold `limits.body_budget`: 503, retry shortly.
    BodyBudget => "body_budget",
    /// A connection from an address outside the source's `allow_from`.
    ForbiddenPeer => "forbidden_peer",
    /// A fingerprint that is not 64 hex digits.
    InvalidFingerprint => "invalid_fingerprint",
    /// A lease that is not a whole number of seconds from 1.
    InvalidLease => "invalid_lease",
    /// A claim token that does not parse.
    InvalidToken => "invalid_token",
    /// No such route.
    NotFound => "not_found",
    /// The route does not take that method.
    MethodNotAllowed => "method_not_allowed",
    /// A path that does not decode.
    InvalidPath => "invalid_path",
    /// A request the router refused as malformed.
    BadRequest => "bad_request",
    /// A content type the route does not take.
    UnsupportedMediaType => "unsupported_media_type",
    /// An error of the gateway's own.
    InternalError => "internal_error",
    /// Any other refusal the router made.
    Error => "error",
    /// A connection beyond `limits.max_connections` (answered before HTTP is read).
    TooManyConnections => "too_many_connections",
    /// Bytes that are not HTTP/1.1 (answered for hyper, at the connection).
    MalformedRequest => "malformed_request",
    /// Headers larger than the gateway reads.
    HeadersTooLarge => "headers_too_large",
    /// A request line longer than the gateway reads.
    UriTooLong => "uri_too_long",
}

impl Outcome {
    /// Puts this outcome on `response`: the header, and the value for the guard layer.
    pub fn on(self, mut response: Response) -> Response {
        response
            .headers_mut()
            .insert(HEADER, HeaderValue::from_static(self.as_str()));
        response.extensions_mut().insert(self);
        response
    }

    /// The outcome of a verifier's refusal.
    pub fn of_refusal(e: &VerifyError) -> Self {
        match e {
            VerifyError::MissingHeader { .. } => Self::MissingHeader,
            VerifyError::MalformedHeader { .. } => Self::MalformedHeader,
            VerifyError::BadSignature => Self::BadSignature,
            VerifyError::StaleTimestamp { .. } => Self::StaleTimestamp,
            VerifyError::FutureTimestamp { .. } => Self::FutureTimestamp,
            VerifyError::MissingEventId { .. } => Self::MissingEventId,
            VerifyError::InvalidEventId(_) => Self::InvalidEventId,
            VerifyError::InvalidJson(_) => Self::InvalidJson,
            VerifyError::MalformedBody { .. } => Self::MalformedBody,
            VerifyError::Claim { .. } => Self::BadClaim,
            VerifyError::UnknownKey { .. } => Self::UnknownKey,
            VerifyError::UntrustedUrl { .. } => Self::UntrustedUrl,
            VerifyError::NeedsDocument { .. } => Self::DocumentUnavailable,
            VerifyError::BadDocument { .. } => Self::BadDocument,
            VerifyError::BadCredentials => Self::BadCredentials,
            VerifyError::UntrustedTopic { .. } => Self::UntrustedTopic,
            _ => Self::Error,
        }
    }
}

/// The metrics label of the source a response answered for (a configured name, or `unknown`),
/// left in its extensions for the guard layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Label(pub(crate) String);

/// `response`, labelled with its source for the guard layer's count and log line.
pub(crate) fn labelled(label: String, mut response: Response) -> Response {
    response.extensions_mut().insert(Label(label));
    response
}

impl From<idemgate::answer::Seen> for Outcome {
    fn from(seen: idemgate::answer::Seen) -> Self {
        use idemgate::answer::Seen;
        match seen {
            Seen::Duplicate { .. } => Self::Duplicate,
            Seen::LateDuplicate { .. } => Self::LateDuplicate,
            Seen::InFlight { .. } => Self::InFlight,
            Seen::Conflict { .. } => Self::Conflict,
        }
    }
}

impl serde::Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_spelled_once_in_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for o in Outcome::ALL {
            let name = o.as_str();
            assert!(seen.insert(name), "{name} twice");
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
        }
        // History's outcomes, where they meet the gateway's, are spelled alike.
        for h in idemgate_core::HistoryOutcome::ALL {
            if let Some(o) = Outcome::ALL.iter().find(|o| o.as_str() == h.as_str()) {
                assert_eq!(o.as_str(), h.as_str());
            }
        }
        assert_eq!(
            Outcome::InFlight.as_str(),
            idemgate_core::HistoryOutcome::InFlight.as_str()
        );
        assert_eq!(
            Outcome::LateDuplicate.as_str(),
            idemgate_core::HistoryOutcome::LateDuplicate.as_str()
        );
    }

    #[test]
    fn refusals_match_the_providers_kinds() {
        for e in [
            VerifyError::BadSignature,
            VerifyError::BadCredentials,
            VerifyError::MalformedBody { why: "x" },
            VerifyError::UntrustedTopic {
                topic_arn: "arn:aws:sns:us-east-1:1:t".into(),
            },
        ] {
            assert_eq!(Outcome::of_refusal(&e).as_str(), e.kind());
        }
    }
}
