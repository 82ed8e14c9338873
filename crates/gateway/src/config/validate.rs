//! Checking the configuration as a whole and each source's policy: every problem named by its
//! key ([`Config::problems`]), the first as an error ([`Config::validate`]), and what holds
//! together but an operator should hear of ([`Config::warnings`]).

use std::time::Duration;

use idemgate_core::policy::{ContractTerms, TtlOverride, TtlPolicy};
use idemgate_core::{Human, InstanceName, SourceName};
use idemgate_providers::Provider;

use super::{
    Config, ConfigError, Mode, OnShortWindow, SourceConfig, SourcePolicy, StoreKind, check_listen,
    is_placeholder,
};

impl SourceConfig {
    /// Validates the name and computes the TTL from the preset and this source's terms.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the source and the key.
    pub fn policy(&self, index: usize) -> Result<SourcePolicy, ConfigError> {
        let name = SourceName::new(self.name.clone())
            .map_err(|source| ConfigError::SourceName { index, source })?;
        if self.provider == "custom" {
            return Err(self.invalid(
                "provider",
                "\"custom\" is the preset of a sender of your own, not a provider: write provider = \"generic-hmac\" (it signs with an HMAC) or \"none\" (it sends a bearer token), and give the sender's retry_window",
            ));
        }
        let Some(provider) = self.kind() else {
            return Err(ConfigError::UnknownProvider {
                name: self.name.clone(),
                provider: self.provider.clone(),
                known: Provider::ALL.map(Provider::as_str).join(", "),
            });
        };
        let base = provider.preset().and_then(|p| p.contract);
        let contract = ContractTerms {
            retry_window: self.retry_window,
            queue_lag: self.queue_lag,
            clock_skew: self.clock_skew,
            replay_margin: self.replay_margin,
        }
        .resolve(&self.name, &self.provider, base)?;
        let ttl_override = match (self.ttl_override, &self.ttl_override_reason) {
            (Some(ttl), reason) => Some(TtlOverride {
                ttl,
                reason: reason.clone(),
            }),
            (None, Some(_)) => {
                return Err(ConfigError::ReasonWithoutOverride {
                    name: self.name.clone(),
                });
            }
            (None, None) => None,
        };
        let ttl = TtlPolicy::new(&self.name, contract, ttl_override)?;
        if self.secrets.iter().any(|s| is_placeholder(s)) {
            return Err(self.invalid(
                "secrets",
                "holds the example's placeholder; fill in the signing secret the sender shows you",
            ));
        }
        let lease = self.lease(ttl.ttl);
        if lease.is_zero() {
            return Err(self.invalid("lease", "must be above zero"));
        }
        if lease > ttl.ttl {
            return Err(self.invalid(
                "lease",
                format!(
                    "{} is longer than the source's TTL of {} (a claim cannot outlive its record): shorten lease, or lengthen the TTL's terms (retry_window, queue_lag, clock_skew, replay_margin)",
                    Human(lease),
                    Human(ttl.ttl)
                ),
            ));
        }
        if self.forward_timeout.is_zero() {
            return Err(self.invalid("forward_timeout", "must be above zero"));
        }
        if let Some(horizon) = self.late_duplicate_horizon
            && horizon <= ttl.ttl
        {
            return Err(self.invalid(
                "late_duplicate_horizon",
                format!(
                    "{} is not longer than the source's TTL of {}: within the TTL the record answers, so no late duplicate could be told. Leave it out (the default is twice the TTL, at least 30 days), or give a longer one",
                    Human(horizon),
                    Human(ttl.ttl)
                ),
            ));
        }
        if self.mode == Mode::Inbox {
            if self.forward_url.is_none() {
                return Err(self.invalid(
                    "forward_url",
                    "required with mode = \"inbox\": the dispatcher delivers queued events there",
                ));
            }
            let d = &self.dispatch;
            for (key, value) in [
                ("dispatch.timeout", d.timeout),
                ("dispatch.backoff", d.backoff),
                ("dispatch.dead_letter_retention", d.dead_letter_retention),
            ] {
                if value.is_zero() {
                    return Err(self.invalid(key, "must be above zero"));
                }
            }
            if d.max_backoff < d.backoff {
                return Err(self.invalid(
                    "dispatch.max_backoff",
                    format!(
                        "{} is shorter than dispatch.backoff ({})",
                        Human(d.max_backoff),
                        Human(d.backoff)
                    ),
                ));
            }
            if d.max_age.is_some_and(|a| a.is_zero()) {
                return Err(self.invalid("dispatch.max_age", "must be above zero"));
            }
        }
        let destination = match &self.forward_url {
            None => None,
            Some(url) => Some(
                crate::target::Target::parse(url)
                    .map_err(|why| self.invalid("forward_url", why))?,
            ),
        };
        let tls = self.client_tls(destination.as_ref())?;
        let on_short_window = match (&destination, self.on_short_window) {
            (_, None) => OnShortWindow::Warn,
            (Some(crate::target::Target::Nats(_)), Some(on)) => on,
            (Some(crate::target::Target::Amqp(_)), Some(OnShortWindow::Warn)) => {
                OnShortWindow::Warn
            }
            (Some(crate::target::Target::Amqp(_)), Some(OnShortWindow::Refuse)) => {
                return Err(self.invalid(
                    "on_short_window",
                    "is \"refuse\", which an amqp:// destination can never meet: RabbitMQ keeps no dedup window, so consumers must dedupe by message_id; remove it (or set \"warn\")",
                ));
            }
            (target, Some(_)) => {
                return Err(self.invalid(
                    "on_short_window",
                    format!(
                        "judges a broker destination's dedup window, and forward_url is {}: remove it, or publish to nats:// or amqp://",
                        target.as_ref().map_or("not set", |t| t.scheme())
                    ),
                ));
            }
        };
        let allow_from = self
            .allow_from
            .iter()
            .map(|block| block.parse().map_err(|why| self.invalid("allow_from", why)))
            .collect::<Result<_, _>>()?;
        // Mailgun: a token is refused again only while its record lives; a signature still
        // within the tolerance after that would be processed a second time.
        if provider == Provider::Mailgun && self.tolerance() > ttl.ttl {
            return Err(self.invalid(
                "tolerance",
                format!(
                    "{} is longer than the source's TTL of {}: a replayed Mailgun token must still be remembered while its signature is accepted",
                    Human(self.tolerance()),
                    Human(ttl.ttl)
                ),
            ));
        }
        Ok(SourcePolicy {
            name,
            ttl,
            lease,
            destination,
            tls,
            on_short_window,
            allow_from,
        })
    }
}

impl Config {
    /// What holds together but an operator should hear of, one line each: a source that takes
    /// any SNS topic or any Pub/Sub service account, a body limit below what the sender
    /// documents sending. `serve` logs them at start, `check` prints them.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.sources.is_empty() && self.apis.is_empty() {
            out.push(
                "no sources are configured: every delivery will be refused 404; add a [[source]] table (see idemgate.example.toml)"
                    .to_owned(),
            );
        }
        for sc in &self.sources {
            if sc.kind() == Some(Provider::Sns) && sc.allow_any_topic == Some(true) {
                out.push(format!(
                    "source {:?} accepts SNS messages of every topic (allow_any_topic): any AWS account can make SNS sign a message to it; list its topic_arns",
                    sc.name
                ));
            }
            if sc.kind() == Some(Provider::Pubsub)
                && sc.service_account.is_none()
                && sc.allow_any_service_account == Some(true)
            {
                out.push(format!(
                    "source {:?} accepts push tokens of any service account (allow_any_service_account): set service_account to the push subscription's",
                    sc.name
                ));
            }
            if let (Some(limit), Ok(scheme)) = (
                sc.body_limit,
                idemgate_providers::Scheme::from_name(&sc.provider),
            ) && let Some((max, why)) = scheme.documented_max_body()
                && limit < max
            {
                out.push(format!(
                    "source {:?} has body_limit {limit} bytes, below the {max} its sender may send ({why}): larger deliveries get 413 and are lost",
                    sc.name
                ));
            }
        }
        out
    }

    /// Checks what serde cannot: names, TTLs, store settings.
    ///
    /// # Errors
    /// The first [`ConfigError`] found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.problems().into_iter().next() {
            Some(first) => Err(first),
            None => Ok(()),
        }
    }

    /// Every problem [`Config::validate`] would refuse, not only the first (`idemgate check`).
    pub fn problems(&self) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, source) in self.sources.iter().enumerate() {
            if let Err(e) = source.policy(i) {
                problems.push(e);
            }
            if !seen.insert(source.name.as_str()) {
                problems.push(ConfigError::DuplicateSource {
                    name: source.name.clone(),
                });
            }
        }
        for api in &self.apis {
            if let Err(e) = api.policy() {
                problems.push(e);
            }
            if !seen.insert(api.name.as_str()) {
                problems.push(api.invalid(
                    "name",
                    "is the name of a source or of another api: each keeps its keys under its own name",
                ));
            }
            let taken = std::iter::once(("listen", &self.listen))
                .chain(self.admin_listen.iter().map(|a| ("admin_listen", a)))
                .chain(
                    self.apis
                        .iter()
                        .take_while(|other| !std::ptr::eq(*other, api))
                        .map(|other| ("another api's listen", &other.listen)),
                )
                .find(|(_, addr)| **addr == api.listen);
            if let Some((what, _)) = taken {
                problems.push(api.invalid(
                    "listen",
                    format!(
                        "{} is also {what}: an api listens on an address of its own",
                        api.listen
                    ),
                ));
            }
        }
        for source in &self.sources {
            // A forward settles itself whatever its request's fate, but a sender whose request
            // times out first hears 408 and retries into `in_flight`: the forward must fit in it.
            if source.mode != Mode::Inbox
                && source.forward_url.is_some()
                && source.forward_timeout >= self.limits.request_timeout
            {
                problems.push(source.invalid(
                    "forward_timeout",
                    format!(
                        "{} is not shorter than limits.request_timeout ({}), which bounds the whole request (body, claim, forward, completion): the sender would hear 408 before the downstream's answer. Lower forward_timeout, or raise limits.request_timeout",
                        Human(source.forward_timeout),
                        Human(self.limits.request_timeout)
                    ),
                ));
            }
            if source.mode == Mode::Inbox && self.store.kind == idemgate::config::StoreKind::Redis {
                problems.push(source.invalid(
                    "mode",
                    "\"inbox\" needs a SQL store (store.kind = \"sqlite\" or \"postgres\"): its queue is written in the claim's transaction",
                ));
            }
        }
        for e in self.store.problems() {
            problems.push(ConfigError::Global {
                key: e.key,
                why: e.why,
            });
        }
        if let Err(e) = check_listen("listen", &self.listen) {
            problems.push(e);
        }
        if let Some(admin) = &self.admin_listen {
            if let Err(e) = check_listen("admin_listen", admin) {
                problems.push(e);
            } else if admin == &self.listen {
                problems.push(ConfigError::Global {
                    key: "admin_listen",
                    why: format!(
                        "{admin:?} is listen's address too: give the admin listener an address of its own (a private one)"
                    ),
                });
            }
        }
        for proxy in &self.trusted_proxies {
            if let Err(why) = proxy.parse::<crate::allow::Cidr>() {
                problems.push(ConfigError::Global {
                    key: "trusted_proxies",
                    why,
                });
            }
        }
        if let Some(name) = &self.instance
            && let Err(e) = InstanceName::new(name.as_str())
        {
            problems.push(ConfigError::Global {
                key: "instance",
                why: e.to_string(),
            });
        }
        if !(Duration::from_secs(3)..=Duration::from_secs(600)).contains(&self.instance_lease) {
            problems.push(ConfigError::Global {
                key: "instance_lease",
                why: format!(
                    "{} is outside 3s to 10m: shorter, a busy store's pause could take a live process for dead; longer, a restart after a crash waits that long",
                    Human(self.instance_lease)
                ),
            });
        }
        if !(Duration::from_secs(10)..=Duration::from_secs(3600))
            .contains(&self.window_audit_interval)
        {
            problems.push(ConfigError::Global {
                key: "window_audit_interval",
                why: format!(
                    "{} is outside 10s to 1h: a stream's duplicate window changed by an operator would go unsaid for too long, or the broker be asked too often",
                    Human(self.window_audit_interval)
                ),
            });
        }
        if let Some(archive) = &self.history.archive {
            if let Err(e) = archive.location() {
                problems.push(ConfigError::Parse(e.to_string()));
            }
            if self.store.kind == StoreKind::Redis {
                problems.push(ConfigError::Global {
                    key: "history.archive",
                    why: format!(
                        "the {} store keeps no history to archive: history archives come from SQLite or PostgreSQL",
                        self.store.kind.name()
                    ),
                });
            }
        }
        for (key, d) in [
            ("limits.request_timeout", self.limits.request_timeout),
            ("limits.header_timeout", self.limits.header_timeout),
        ] {
            if d.is_zero() {
                problems.push(ConfigError::Global {
                    key,
                    why: "must be above zero".into(),
                });
            }
        }
        if self.limits.body_budget == Some(0) {
            problems.push(ConfigError::Global {
                key: "limits.body_budget",
                why: "must be above zero".into(),
            });
        }
        if self.limits.body_limit == 0 {
            problems.push(ConfigError::Global {
                key: "limits.body_limit",
                why: "must be above zero".into(),
            });
        }
        if self.api_tokens.iter().any(|t| is_placeholder(&t.token)) {
            problems.push(ConfigError::Global {
                key: "api_tokens",
                why: "holds the example's placeholder; fill in a long random token of your own (e.g. `openssl rand -hex 24`)".into(),
            });
        }
        if let Some(token) = &self.dashboard_token {
            let why = if is_placeholder(token) {
                Some(
                    "holds the example's placeholder; fill in a long random token of your own (e.g. `openssl rand -hex 24`)",
                )
            } else if token.len() < 16 {
                Some("must be at least 16 characters")
            } else if !token
                .bytes()
                .all(|b| b.is_ascii_graphic() && !matches!(b, b';' | b',' | b'"' | b'\\'))
            {
                Some(
                    "may hold only printable ASCII without spaces, ';', ',', '\"' or '\\' (it travels in a cookie)",
                )
            } else {
                None
            };
            if let Some(why) = why {
                problems.push(ConfigError::Global {
                    key: "dashboard_token",
                    why: why.into(),
                });
            }
        }
        if self.api_tokens.iter().any(|t| t.token.len() < 16) {
            problems.push(ConfigError::Global {
                key: "api_tokens",
                why: "every token must be at least 16 characters".into(),
            });
        }
        problems
    }
}
