//! The gateway's configuration: one TOML file, overridable by `IDEMGATE_*` environment variables.
//!
//! Every key is documented in `idemgate.example.toml` at the repository root. Unknown keys are
//! errors that name the key; durations are human (`90s`, `10m`, `3d`); each source's TTL is
//! validated against its delivery contract at load, so a TTL below the retry window never starts.
//!
//! This file holds the types and their defaults; `load.rs` reads the file and the environment and
//! locates an error at its key's line; `validate.rs` checks the whole and each source's policy;
//! `verifier.rs` builds each source's verifier from its provider's keys (read by the providers
//! crate into the provider's typed settings); `report.rs` says an error with its line and a
//! "did you mean".

use std::time::Duration;

use idemgate_core::policy::{PolicyError, TtlPolicy};
use idemgate_core::{ClaimMode, InstanceName, KeyError, LateDuplicates, SourceName};
use idemgate_providers::Provider;
use serde::Deserialize;

mod api;
mod load;
mod report;
mod tls;
pub(crate) mod token;
mod validate;
mod verifier;

pub use api::{ApiConfig, ApiPolicy};
pub use tls::SourceTls;
pub use token::{ApiToken, Scope};
pub use verifier::verifier;

/// Environment variables that share the prefix but are not configuration.
const NOT_CONFIG: &[&str] = &["config", "log", "data_dir", "test_postgres", "test_redis"];

/// Why a configuration was refused. Each names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or the environment does not deserialize; the text names each key, where it was
    /// written, and what is wrong.
    #[error("{0}")]
    Parse(String),
    #[error("source #{}: name: {source}", index + 1)]
    SourceName {
        index: usize,
        #[source]
        source: KeyError,
    },
    #[error("source {name:?} is defined twice")]
    DuplicateSource { name: String },
    #[error("source {name:?}: provider {provider:?} is not known; known: {known}")]
    UnknownProvider {
        name: String,
        provider: String,
        known: String,
    },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("source {name:?}: ttl_override_reason is set but ttl_override is not")]
    ReasonWithoutOverride { name: String },
    #[error("source {name:?}: {key}: {why}")]
    Invalid {
        name: String,
        key: &'static str,
        why: String,
    },
    #[error("{key}: {why}")]
    Global { key: &'static str, why: String },
    /// An `[[api]]` key that cannot be used.
    #[error("api {name:?}: {key}: {why}")]
    Api {
        name: String,
        key: &'static str,
        why: String,
    },
    /// A validation error, with where the key at fault is written.
    #[error("{file} (line {line}): {error}")]
    At {
        file: String,
        line: usize,
        #[source]
        error: Box<ConfigError>,
    },
    /// A validation error about a value set by an environment variable, which it names.
    #[error("{variable}: {error}")]
    Env {
        variable: String,
        #[source]
        error: Box<ConfigError>,
    },
    /// Every problem found, one per line: a configuration is refused with all of them at once.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Many(Vec<ConfigError>),
}

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the gateway listens: `host:port`, the host an address or a name
    /// (`127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// This gateway's instance name, recorded with every claim it takes, so that after a crash
    /// the restarted process frees its own earlier claims at once instead of waiting out their
    /// leases. Every gateway running at the same time on one store needs its own name; the
    /// default, `{host name}-{listen port}`, is stable across restarts and distinct on one host.
    /// 1 to 64 characters of ASCII letters, digits, `.`, `_` and `-`.
    pub instance: Option<String>,
    /// How long this process holds its instance name without renewing it: its liveness lease
    /// in the store, renewed every quarter of it and ended when the process stops. A second
    /// process started under a name whose lease runs is refused, naming the first; a process
    /// that crashed frees its name (and its claims, to the next boot) once its lease lapses, so a
    /// restart after a crash waits at most this long. A process cut off from the store, or
    /// frozen, for longer than this is taken for dead: keep it above the longest pause you
    /// expect. 3 s to 10 min.
    #[serde(default = "default_instance_lease", with = "humantime_serde")]
    pub instance_lease: Duration,
    /// How often the window audit reads each JetStream destination's `duplicate_window` again
    /// after the one at start (every 30 s while a window is not known: the broker did not
    /// answer). 10 s to 1 h; 5 min by default.
    #[serde(default = "default_window_audit_interval", with = "humantime_serde")]
    pub window_audit_interval: Duration,
    /// Bearer tokens, each for what its scopes allow: `send` (deliveries to sources with
    /// `provider = "none"`), `claims` (the claim API), `replay` (re-driving dead letters) and
    /// `dashboard`. A token written as a plain string has every scope; a table
    /// `{ token = "...", scopes = ["claims"] }` only those it names.
    #[serde(default)]
    pub api_tokens: Vec<ApiToken>,
    /// A second listener, `host:port`, for the operator's routes: when set, `/metrics`,
    /// `/healthz`, `/livez`, `/readyz`, `/dashboard`, `/openapi.json` and the claim API's replay
    /// route are served only there, and `listen` serves only `/hooks/*` and the claim API's
    /// worker routes. The production setting: keep it on a private address.
    pub admin_listen: Option<String>,
    /// Reverse proxies and load balancers whose `X-Forwarded-For` is believed, as addresses or
    /// CIDR blocks (`10.0.0.0/8`, `127.0.0.1`): for a connection from one of them, the client's
    /// address is the right-most address of `X-Forwarded-For` that is not itself a trusted
    /// proxy. That address is what `allow_from` and the dashboard's loopback rule judge, and what
    /// the request's log line names. Empty (the default): the connection's own peer.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// A token that opens `/dashboard` from any address (as a bearer token, or once in a
    /// browser as `/dashboard?token=...`, kept in a cookie). Without it, the dashboard answers
    /// loopback peers only (and `api_tokens` from anywhere); with it, every peer needs a token.
    pub dashboard_token: Option<String>,
    #[serde(default)]
    pub store: StoreConfig,
    /// History beyond the store: `[history.archive]`.
    #[serde(default)]
    pub history: HistoryConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default, rename = "source")]
    pub sources: Vec<SourceConfig>,
    /// `[[api]]`: the gateway as a sidecar in front of HTTP APIs of your own, applying the
    /// `Idempotency-Key` rules to the routes each names.
    #[serde(default, rename = "api")]
    pub apis: Vec<ApiConfig>,
}

/// `[history]`: what happens to history beyond the store's own retention.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryConfig {
    /// Where history is exported before the retention job drops it (`[history.archive]`).
    pub archive: Option<idemgate_archive::ArchiveConfig>,
}

fn default_window_audit_interval() -> Duration {
    Duration::from_secs(300)
}

fn default_instance_lease() -> Duration {
    Duration::from_secs(15)
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_owned()
}

/// Checks that `listen` reads as `host:port` (the host is resolved when the gateway binds).
///
/// # Errors
/// A [`ConfigError`] naming `key`.
pub fn check_listen(key: &'static str, listen: &str) -> Result<(), ConfigError> {
    let ok = listen.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty() && !host.contains(char::is_whitespace) && port.parse::<u16>().is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(ConfigError::Global {
            key,
            why: format!(
                "{listen:?} is not host:port (such as 127.0.0.1:8080, [::1]:8080 or localhost:8080)"
            ),
        })
    }
}

/// Request limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Largest request body accepted, in bytes (default 1 MiB); larger gets 413.
    #[serde(default = "default_body_limit")]
    pub body_limit: usize,
    /// Longest a request may take to arrive and be answered (slow bodies get 408).
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Longest a client may take to send a request's headers, and longest a keep-alive
    /// connection may sit idle between requests; then the connection is closed.
    #[serde(default = "default_header_timeout", with = "humantime_serde")]
    pub header_timeout: Duration,
    /// Most connections served at once; one more is answered 503 and closed at once. Default:
    /// half the process's open-file limit less a reserve (each connection may forward over a
    /// connection of its own).
    pub max_connections: Option<std::num::NonZeroUsize>,
    /// On shutdown, how long in-flight requests may take to finish.
    #[serde(default = "default_shutdown_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Most bytes of request bodies held at once, across every connection, before the senders
    /// are authenticated (a body is read before its signature is checked). A body that would go
    /// past it is answered 503 with `Retry-After`. Default: a 32nd of the memory the process may
    /// use (its cgroup's limit in a container), between 16 MiB and 256 MiB, and at least the
    /// largest body limit.
    pub body_budget: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_limit: default_body_limit(),
            request_timeout: default_request_timeout(),
            header_timeout: default_header_timeout(),
            max_connections: None,
            shutdown_grace: default_shutdown_grace(),
            body_budget: None,
        }
    }
}

fn default_body_limit() -> usize {
    1 << 20
}
fn default_request_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_header_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_shutdown_grace() -> Duration {
    Duration::from_secs(15)
}

/// What to do with a delivery whose id is live with another payload: the facade's, answered as
/// [`idemgate::answer`] says.
pub use idemgate::OnConflict;

/// What to do when a broker destination's own dedup window is shorter than the time after a
/// first publish at which idemgate may publish the same event again (the window audit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnShortWindow {
    /// Say so: at start, in `idemgate check`, on `/healthz` (`degraded`) and on the dashboard.
    #[default]
    Warn,
    /// Refuse to start.
    Refuse,
}

/// When a delivery counts as processed, and who delivers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Forward while the sender waits; the downstream's 2xx completes the claim.
    #[default]
    OnSuccess,
    /// The claim itself marks the event processed.
    OnReceipt,
    /// Claim and queue in one transaction, answer 202; the dispatcher delivers from the queue.
    Inbox,
}

impl Mode {
    /// The store's claim mode: an inbox claim is done at once, like `on_receipt`.
    pub fn claim_mode(self) -> ClaimMode {
        match self {
            Self::OnSuccess => ClaimMode::OnSuccess,
            Self::OnReceipt | Self::Inbox => ClaimMode::OnReceipt,
        }
    }

    /// The mode as written in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OnSuccess => "on_success",
            Self::OnReceipt => "on_receipt",
            Self::Inbox => "inbox",
        }
    }
}

/// `[source.dispatch]`: delivering an inbox source's queue.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Dispatch {
    /// Deliveries in flight at once, per gateway. Default 4.
    pub concurrency: std::num::NonZeroU32,
    /// How long one delivery may take. Default 10 s.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Attempts before an item is dead-lettered. Default 12.
    pub max_attempts: std::num::NonZeroU32,
    /// The first retry's delay; each later one doubles, with full jitter. Default 1 s.
    #[serde(with = "humantime_serde")]
    pub backoff: Duration,
    /// The longest delay between attempts. Default 10 min.
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// An item older than this is dead-lettered instead of tried again. Default: the source's
    /// `queue_lag` (past it, the TTL no longer covers the sender's retries).
    #[serde(with = "humantime_serde")]
    pub max_age: Option<Duration>,
    /// How long dead letters are kept. Default 14 days.
    #[serde(with = "humantime_serde")]
    pub dead_letter_retention: Duration,
}

impl Dispatch {
    /// The lease a dispatcher takes an item under: it covers a delivery of at most `timeout` and
    /// its report, with room to spare. An item whose dispatcher stopped is taken again once it
    /// lapses.
    pub fn item_lease(&self) -> Duration {
        self.timeout.saturating_mul(2) + Duration::from_secs(5)
    }
}

impl Default for Dispatch {
    fn default() -> Self {
        Self {
            concurrency: std::num::NonZeroU32::new(4).expect("non-zero"),
            timeout: Duration::from_secs(10),
            max_attempts: std::num::NonZeroU32::new(12).expect("non-zero"),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(600),
            max_age: None,
            dead_letter_retention: Duration::from_secs(14 * 86_400),
        }
    }
}

/// One `[[source]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub name: String,
    /// A provider preset (`idemgate providers`), `generic-hmac`, or `none`.
    pub provider: String,
    /// Active signing secrets; several during rotation.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Where accepted deliveries are sent: `http://` or `https://` (a POST), `nats://` or
    /// `tls://` (a JetStream publish), `amqp://` or `amqps://` (a confirmed RabbitMQ publish).
    /// Without one, a delivery is acknowledged once claimed.
    pub forward_url: Option<String>,
    /// `[source.tls]`: how a TLS destination (`https://`, `tls://`, `amqps://`) is trusted, and
    /// the client certificate shown to it.
    pub tls: Option<SourceTls>,
    /// A broker destination whose dedup window is shorter than the time idemgate may publish
    /// an event again after its first publish: `warn` (the default) or `refuse` (the gateway
    /// does not start; found later, publishing is held until the window covers it again).
    pub on_short_window: Option<OnShortWindow>,
    #[serde(default, with = "humantime_serde")]
    pub retry_window: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub queue_lag: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub clock_skew: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub replay_margin: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub ttl_override: Option<Duration>,
    pub ttl_override_reason: Option<String>,
    /// `on_success` (forward, then complete), `on_receipt` (the claim marks it processed) or
    /// `inbox` (claim and queue in one step, answer 202, deliver from the queue).
    #[serde(default)]
    pub mode: Mode,
    /// `[source.dispatch]`: how an inbox source's queue is delivered.
    #[serde(default)]
    pub dispatch: Dispatch,
    /// How long a forward may hold the claim before another delivery takes it over.
    #[serde(default, with = "humantime_serde")]
    pub lease: Option<Duration>,
    #[serde(default)]
    pub on_conflict: OnConflict,
    /// A delivery whose record expired but whose event history shows processed: "flag" (process
    /// it, record and count it), "reject" (answer 200 without processing) or "off".
    #[serde(default)]
    pub late_duplicates: LateDuplicates,
    /// How far back a claim asks history whether an expired event was processed: a delivery is
    /// a late duplicate when its event was first received within this long. Default twice the
    /// TTL, at least 30 days; it must be longer than the TTL.
    #[serde(default, with = "humantime_serde")]
    pub late_duplicate_horizon: Option<Duration>,
    #[serde(default = "default_forward_timeout", with = "humantime_serde")]
    pub forward_timeout: Duration,
    /// Signature timestamp tolerance: a replay guard, not the retry window. Default 5 minutes;
    /// for Mailgun, whose retries resend the first attempt's timestamp, the retry window plus the
    /// clock skew ([`SourceConfig::tolerance`]).
    #[serde(default, with = "humantime_serde")]
    pub tolerance: Option<Duration>,
    /// `generic-hmac`: the signature's header.
    pub signature_header: Option<String>,
    /// `generic-hmac`: `hex` (default) or `base64`.
    pub signature_encoding: Option<String>,
    /// `generic-hmac`: a prefix before the signature, such as `sha256=`.
    pub signature_prefix: Option<String>,
    /// `generic-hmac`: `sha256` (default), `sha512` or `sha1`.
    pub signature_algorithm: Option<String>,
    /// `generic-hmac`: the signed bytes as a template of `{timestamp}` and `{body}`
    /// (default `{body}`, or `{timestamp}.{body}` with a timestamp header).
    pub signed_payload: Option<String>,
    /// `generic-hmac`: the header holding the signed timestamp, if the sender signs one.
    pub timestamp_header: Option<String>,
    /// `generic-hmac` and `none`: the header holding the event id.
    pub event_id_header: Option<String>,
    /// `generic-hmac` and `none`: a JSON pointer to the event id in the body (`/data/id`).
    pub event_id_pointer: Option<String>,
    /// `pubsub`: the `aud` the push tokens must carry (the subscription's audience). Required.
    pub audience: Option<String>,
    /// `pubsub`: the accepted token issuers (default `https://accounts.google.com` and
    /// `accounts.google.com`).
    pub issuers: Option<Vec<String>>,
    /// `pubsub`: the push subscription's service account; when set, the token's `email` must be
    /// it (and verified).
    pub service_account: Option<String>,
    /// `pubsub`: a JWKS file holding the token signing keys (read at start).
    pub jwks_file: Option<std::path::PathBuf>,
    /// `pubsub`: an `https://` JWKS URL, fetched and cached (default Google's,
    /// `https://www.googleapis.com/oauth2/v3/certs`, unless `jwks_file` is set).
    pub jwks_url: Option<String>,
    /// `sns`: host patterns `SigningCertURL` and `SubscribeURL` must match (`*` is one DNS label;
    /// default `sns.*.amazonaws.com` and `sns.*.amazonaws.com.cn`).
    pub cert_hosts: Option<Vec<String>>,
    /// `sns`: what to do with a verified `SubscriptionConfirmation`: `log` (default: log its
    /// `SubscribeURL` for an operator to visit) or `confirm` (visit it at once).
    pub sns_subscription: Option<SnsSubscription>,
    /// `pubsub` and `sns`: a PEM file of certificate authorities trusted (besides the system's)
    /// for the documents the source fetches: the JWKS, SNS certificates and `SubscribeURL`s.
    pub fetch_ca_file: Option<std::path::PathBuf>,
    /// `generic-hmac` and `none`: the parameter of a form-encoded body holding the event id
    /// (Twilio's `MessageSid`). Twilio, Mailgun and Postmark take any of the three `event_id_*`
    /// keys to read their id elsewhere than their built-in place.
    pub event_id_field: Option<String>,
    /// `square` and `twilio` (required there, refused elsewhere): the public URL the sender was
    /// given for this source, as it shows it; the sender signs it. For Twilio, without its query
    /// string (each request's own is appended).
    pub signed_url: Option<String>,
    /// Any source: the networks (IPv4 or IPv6 CIDR blocks, or single addresses) deliveries are
    /// accepted from, checked against the connection's peer address before anything else; a
    /// peer outside them gets 403. Empty (the default): any address. Behind a proxy the peer is
    /// the proxy: forwarded headers are not trusted.
    #[serde(default)]
    pub allow_from: Vec<String>,
    /// Any source: the largest body accepted for it, in bytes (larger gets 413). Default:
    /// `limits.body_limit`, or the provider's documented maximum when larger (GitHub: 25 MB).
    pub body_limit: Option<usize>,
    /// Any source: also claim each delivery's payload fingerprint (SHA-256 of the body) within
    /// the TTL, so a captured delivery replayed under a new event id is a duplicate. For senders
    /// whose event id is not signed (GitHub's `X-GitHub-Delivery`, Shopify's and Twilio's id
    /// headers), where a new id header makes an old request new. On by default for `github`.
    /// The cost: two deliveries with byte-identical bodies and different ids count as one.
    pub dedupe_on_body: Option<bool>,
    /// `sns`: the topics (`TopicArn`s) whose messages are accepted; any other is refused (403).
    /// Any AWS account can make SNS sign a message to this endpoint, so this is required,
    /// unless `allow_any_topic = true`.
    pub topic_arns: Option<Vec<String>>,
    /// `sns`: accept messages of every topic (warned at start and by `check`).
    pub allow_any_topic: Option<bool>,
    /// `pubsub`: accept tokens of any service account (warned at start and by `check`); without
    /// it, `service_account` is required.
    pub allow_any_service_account: Option<bool>,
}

/// `sns_subscription`: what a verified SNS `SubscriptionConfirmation` leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SnsSubscription {
    /// Log the `SubscribeURL` (answer 200): an operator confirms by visiting it. Anyone with an
    /// AWS account can subscribe an endpoint to a topic of theirs, so nothing is confirmed
    /// unasked.
    #[default]
    Log,
    /// GET the `SubscribeURL` at once (after the host check), then answer 200.
    Confirm,
}

fn default_forward_timeout() -> Duration {
    Duration::from_secs(10)
}
/// The tolerance of a source that sets none (Mailgun's aside).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// A source's validated name and TTL.
#[derive(Debug, Clone)]
pub struct SourcePolicy {
    pub name: SourceName,
    pub ttl: TtlPolicy,
    pub lease: Duration,
    /// `forward_url`, parsed.
    pub destination: Option<crate::target::Target>,
    /// The TLS settings of a TLS destination (checked: every file named was read); `None` for
    /// one that speaks no TLS.
    pub tls: Option<idemgate_tls::ClientTls>,
    /// `on_short_window`, for a broker destination (`warn` when not set).
    pub on_short_window: OnShortWindow,
    /// `allow_from`, parsed: empty for any address.
    pub allow_from: Vec<crate::allow::Cidr>,
}

impl Limits {
    /// The body budget: `body_budget`, or the default from the memory the process may use, at
    /// least the largest body limit of `sources`.
    pub fn body_budget(&self, sources: &[SourceConfig]) -> usize {
        self.body_budget.unwrap_or_else(|| {
            let largest = sources
                .iter()
                .map(|s| {
                    let scheme = idemgate_providers::Scheme::from_name(&s.provider).ok();
                    match scheme {
                        Some(scheme) => s.body_limit(self.body_limit, &scheme),
                        None => s.body_limit.unwrap_or(self.body_limit),
                    }
                })
                .fold(self.body_limit, usize::max);
            crate::budget::default_body_budget(crate::budget::memory_limit(), largest)
        })
    }
}

impl SourceConfig {
    /// The largest body accepted: `body_limit`, or `limits.body_limit` (`global`), or the
    /// provider's documented maximum when that is larger.
    pub fn body_limit(&self, global: usize, scheme: &idemgate_providers::Scheme) -> usize {
        self.body_limit.unwrap_or_else(|| {
            scheme
                .documented_max_body()
                .map_or(global, |(max, _)| max.max(global))
        })
    }

    /// `dedupe_on_body`, by default on for `github` (whose event id, `X-GitHub-Delivery`, is not
    /// signed and whose deliveries sign no timestamp).
    pub fn dedupe_on_body(&self) -> bool {
        self.dedupe_on_body
            .unwrap_or(self.kind() == Some(Provider::Github))
    }

    /// The timestamp tolerance: the configured one, or 5 minutes; for Mailgun, the retry window
    /// plus the clock skew (its preset's, or this source's), since a Mailgun retry resends the
    /// first attempt's signed timestamp, hours later.
    pub fn tolerance(&self) -> Duration {
        if let Some(tolerance) = self.tolerance {
            return tolerance;
        }
        let mailgun = self.kind().filter(|p| *p == Provider::Mailgun);
        match mailgun.and_then(Provider::preset).and_then(|p| p.contract) {
            Some(c) => self
                .retry_window
                .unwrap_or(c.retry_window)
                .saturating_add(self.clock_skew.unwrap_or(c.clock_skew)),
            _ => DEFAULT_TOLERANCE,
        }
    }

    /// The lease: the configured one, or by default long enough for a forward to time out and
    /// be released (twice `forward_timeout`, at least 60 s), but never longer than the TTL.
    pub fn lease(&self, ttl: Duration) -> Duration {
        self.lease.unwrap_or_else(|| {
            self.forward_timeout
                .saturating_mul(2)
                .max(Duration::from_secs(60))
                .min(ttl)
        })
    }

    pub(crate) fn invalid(&self, key: &'static str, why: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            name: self.name.clone(),
            key,
            why: why.into(),
        }
    }
}

impl Config {
    /// This gateway's instance name: `instance`, or by default `{host name}-{listen port}`
    /// (`{host name}-p{process id}` when the port is chosen by the system, since such a port does
    /// not survive a restart anyway).
    pub fn instance_name(&self) -> InstanceName {
        if let Some(name) = self
            .instance
            .as_deref()
            .and_then(|n| InstanceName::new(n).ok())
        {
            return name;
        }
        let port = self
            .listen
            .rsplit_once(':')
            .map(|(_, p)| p)
            .filter(|p| *p != "0")
            .map_or_else(|| format!("p{}", std::process::id()), str::to_owned);
        let host: String = host_name()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .take(InstanceName::MAX_LEN - port.len() - 1)
            .collect();
        let host = if host.is_empty() {
            "idemgate".to_owned()
        } else {
            host
        };
        InstanceName::new(format!("{host}-{port}")).unwrap_or_else(|_| {
            InstanceName::new(format!("idemgate-{port}")).expect("a valid instance name")
        })
    }

    /// `trusted_proxies`, parsed (an entry that does not parse is left out; validation refuses
    /// it).
    pub fn trusted_proxies(&self) -> Vec<crate::allow::Cidr> {
        self.trusted_proxies
            .iter()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

/// A value copied from `idemgate.example.toml` without being filled in: `whsec_...`, `...`,
/// `change-me-...`.
fn is_placeholder(value: &str) -> bool {
    value.ends_with("...") || value.starts_with("change-me")
}

/// The machine's host name (Linux: the kernel's; else `HOSTNAME`), or empty.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

pub use idemgate::config::{RedisSection, StoreConfig, StoreKind};
