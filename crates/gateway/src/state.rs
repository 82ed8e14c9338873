//! What every handler shares: the configured sources, the store, the metrics, and the one place
//! each claim's outcome and each request's answer are logged and counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use idemgate::{AnyStore, Dedup};
use idemgate_core::{
    ClaimOutcome, ClaimRequest, Holder, Key, LateDuplicates, SourceName, StoreError, StoreStats,
};
use idemgate_providers::Verifier;

use crate::config::{self, Config, Dispatch, Limits, Mode, OnConflict, SourceConfig, SourcePolicy};
use crate::error::{self, AppError};
use crate::forward;
use crate::metrics::{Metrics, RowCounts, TierCounts};
use crate::outcome::Outcome;

/// A configured source, ready to serve.
#[derive(Debug)]
pub struct Source {
    pub name: SourceName,
    pub policy: SourcePolicy,
    pub verifier: Verifier,
    /// Where deliveries go (`forward_url`), with what sends there: built once, with the source's
    /// TLS settings (HTTP sources with the same settings share one client and its connection
    /// pool; a broker destination keeps one connection). `None` acknowledges a delivery once
    /// claimed.
    pub(crate) destination: Option<Arc<crate::destination::Destination>>,
    /// How long after a first publish idemgate may publish an event again: what a broker
    /// destination's dedup window is judged against ([`crate::window`]).
    pub(crate) exposure: crate::window::Exposure,
    /// The documents the verifier needs (`pubsub` with a `jwks_url`, `sns`), fetched and kept.
    pub(crate) documents: Option<crate::documents::Documents>,
    /// `sns`: what a verified subscription confirmation leads to.
    pub(crate) sns_subscription: config::SnsSubscription,
    pub forward_timeout: Duration,
    pub mode: Mode,
    /// `[source.dispatch]` (inbox mode).
    pub dispatch: Dispatch,
    pub on_conflict: OnConflict,
    pub late_duplicates: LateDuplicates,
    /// `late_duplicate_horizon` (`None`: the default for the TTL).
    pub late_duplicate_horizon: Option<std::time::Duration>,
    /// The largest body accepted for it (`body_limit`, or the defaults: `limits.body_limit`, or
    /// the provider's documented maximum when larger).
    pub body_limit: usize,
    /// `dedupe_on_body`: each delivery's payload fingerprint is claimed too.
    pub dedupe_on_body: bool,
}

impl Source {
    /// Where deliveries go, without credentials (`forward_url` as parsed); `None` when a
    /// delivery is acknowledged once claimed.
    pub fn destination(&self) -> Option<&crate::target::Target> {
        self.destination.as_ref().map(|d| &d.target)
    }

    /// `provider = "none"`: the sender proves itself with a bearer token instead of a signature.
    pub fn needs_bearer(&self) -> bool {
        !self.verifier.scheme().is_signed()
    }

    /// Whether a delivery from `peer` may be read: any address without `allow_from`; with it,
    /// only one inside its networks (an unknown peer is refused).
    ///
    /// # Errors
    /// [`AppError::ForbiddenPeer`] naming the address.
    pub fn admit(&self, peer: Option<std::net::IpAddr>) -> Result<(), AppError> {
        let allow = &self.policy.allow_from;
        if allow.is_empty() || peer.is_some_and(|ip| allow.iter().any(|c| c.contains(ip))) {
            Ok(())
        } else {
            Err(AppError::ForbiddenPeer {
                source_name: self.name.to_string(),
                peer,
            })
        }
    }

    /// A claim of `key` under this source's TTL, lease and mode.
    pub fn claim_request(&self, key: Key) -> ClaimRequest {
        let req = ClaimRequest::new(key, self.policy.lease, self.policy.ttl.ttl)
            .mode(self.mode.claim_mode())
            .late_duplicates(self.late_duplicates);
        match self.late_duplicate_horizon {
            Some(horizon) => req.late_horizon(horizon),
            None => req,
        }
    }
}

/// An inbox source whose queue lags past its `queue_lag` margin.
#[derive(Debug, Clone)]
pub(crate) struct Lagging {
    pub source: SourceName,
    pub lag: Duration,
    pub margin: Duration,
}

/// What every handler shares. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Inner>);

#[derive(Debug)]
pub struct Inner {
    pub sources: HashMap<String, Source>,
    /// `[[api]]`: the sidecar's APIs, each served on its own listener.
    pub(crate) apis: Vec<Arc<crate::upstream::Api>>,
    /// Claims, the work around them, and the retries of what the store did not take at once.
    pub dedup: Dedup,
    /// The store beneath (the same as the `dedup`'s).
    pub store: AnyStore,
    pub metrics: Arc<Metrics>,
    /// `api_tokens`, each kept as its SHA-256 and its scopes.
    api_tokens: Vec<(config::token::Digest, Vec<config::Scope>)>,
    pub(crate) limits: Limits,
    /// `/openapi.json`, with the configured source names.
    pub(crate) openapi: String,
    /// What the store holds, for `/metrics` and the dashboard, refreshed at most every few
    /// seconds (it costs a scan): both show the same figures.
    stats: Mutex<Option<(Instant, Arc<StoreStats>)>>,
    /// Held while the store counts: one count at a time, the rest wait for its figures.
    counting: tokio::sync::Mutex<()>,
    /// `/dashboard`: who may open it, the sweeper's last runs, the advisor's cached figures.
    pub(crate) dashboard: crate::dashboard::kept::Dashboard,
    /// This process's instance and boot, recorded with the claims and queue items it holds.
    pub(crate) holder: Option<Holder>,
    /// Wakes the inbox dispatchers when a delivery was queued.
    pub(crate) inbox_wakeup: tokio::sync::Notify,
    /// Forwards in flight, each on a task of its own so that it settles itself whatever becomes
    /// of the request it came with; shutdown waits for them.
    pub(crate) forwards: tokio_util::task::TaskTracker,
    /// The bytes of request bodies held at once, across every connection.
    pub(crate) body_budget: crate::budget::BodyBudget,
    /// The background tasks, supervised: panics logged, counted, shown, and restarted.
    pub(crate) tasks: crate::tasks::Tasks,
    /// `trusted_proxies`: whose `X-Forwarded-For` names the client.
    pub(crate) trusted_proxies: Arc<[crate::allow::Cidr]>,
    /// The SQLite data directory's serve lock, held while this gateway runs ([`crate::open`]).
    pub(crate) data_lock: Mutex<Option<std::fs::File>>,
    /// `[history.archive]`: where history goes before retention drops it, and how that went.
    pub(crate) archiving: Option<crate::archiving::Archiving>,
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// What [`AppState::store_stats_by`] found by its deadline.
#[derive(Debug, Clone)]
pub(crate) enum Counted {
    /// Counted just now, or within the last few seconds; `None` when the store is not counted
    /// (the Redis store) or the count failed (the reason is logged).
    Fresh(Option<Arc<StoreStats>>),
    /// The count is still running; these are the figures taken this long ago.
    Stale(Arc<StoreStats>, Duration),
    /// The first count is still running.
    Pending,
}

impl Counted {
    /// The figures, fresh or not.
    pub(crate) fn stats(&self) -> Option<&Arc<StoreStats>> {
        match self {
            Self::Fresh(s) => s.as_ref(),
            Self::Stale(s, _) => Some(s),
            Self::Pending => None,
        }
    }
}

/// Every configured source with its verifier, and every `[[api]]` with its rules and client,
/// built once from the configuration.
#[derive(Debug)]
pub struct Sources(HashMap<String, Source>, Vec<Arc<crate::upstream::Api>>);

impl Sources {
    /// Builds each source's TTL policy, verifier, forward target and the client that sends to
    /// it (one per distinct TLS settings, every file they name read now).
    ///
    /// # Errors
    /// A [`config::ConfigError`] naming the source and the key that cannot work.
    pub fn build(config: &Config) -> Result<Self, config::ConfigError> {
        let mut sources = HashMap::new();
        let mut clients = Clients::default();
        for (i, sc) in config.sources.iter().enumerate() {
            let source = build_source(i, sc, config.limits.body_limit, &mut clients)?;
            if source.needs_bearer() && config.api_tokens.is_empty() {
                return Err(sc.invalid(
                    "provider",
                    "\"none\" needs api_tokens: its senders authenticate with a bearer token",
                ));
            }
            sources.insert(sc.name.clone(), source);
        }
        let mut apis = Vec::new();
        for api in &config.apis {
            let policy = api.policy()?;
            let built = crate::upstream::Api::new(policy).map_err(|e| api.tls_invalid(&e))?;
            apis.push(Arc::new(built));
        }
        Ok(Self(sources, apis))
    }

    /// The source named `name`.
    pub fn get(&self, name: &str) -> Option<&Source> {
        self.0.get(name)
    }

    /// Every source, in no particular order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Source> {
        self.0.values()
    }
}

impl AppState {
    /// Builds the state from a validated config and an open store.
    ///
    /// # Errors
    /// A [`config::ConfigError`] naming the source whose verifier cannot be built.
    ///
    /// `holder` is this process's instance and boot (from [`crate::open`]), recorded with every
    /// claim it takes; `None` records none (tests, tools).
    pub fn new(
        config: &Config,
        store: AnyStore,
        holder: Option<Holder>,
    ) -> Result<Self, config::ConfigError> {
        Ok(Self::with_sources(
            config,
            Sources::build(config)?,
            store,
            holder,
        ))
    }

    /// Builds the state from sources built once by [`Sources::build`].
    pub fn with_sources(
        config: &Config,
        sources: Sources,
        store: AnyStore,
        holder: Option<Holder>,
    ) -> Self {
        let Sources(sources, apis) = sources;
        let metrics = Arc::new(Metrics::default());
        let mut dedup = Dedup::builder(store.clone()).on_claim({
            let metrics = metrics.clone();
            move |req, result, took| observe_claim(&metrics, req, result, took)
        });
        if let Some(holder) = &holder {
            dedup = dedup.holder(holder.clone());
        }
        Self(Arc::new(Inner {
            holder,
            inbox_wakeup: tokio::sync::Notify::new(),
            forwards: tokio_util::task::TaskTracker::new(),
            tasks: crate::tasks::Tasks::new(metrics.clone()),
            trusted_proxies: config.trusted_proxies().into(),
            data_lock: Mutex::default(),
            archiving: config
                .history
                .archive
                .as_ref()
                .map(crate::archiving::Archiving::new),
            body_budget: crate::budget::BodyBudget::new(config.limits.body_budget(&config.sources)),
            sources,
            apis,
            dedup: dedup.build(),
            store,
            metrics,
            api_tokens: config
                .api_tokens
                .iter()
                .map(|t| (config::token::digest(&t.token), t.scopes.clone()))
                .collect(),
            limits: config.limits.clone(),
            openapi: crate::openapi::openapi(config.sources.iter().map(|s| s.name.as_str())),
            stats: Mutex::default(),
            counting: tokio::sync::Mutex::new(()),
            dashboard: crate::dashboard::kept::Dashboard::new(config),
        }))
    }

    /// The configured source named `name`.
    ///
    /// # Errors
    /// [`AppError::UnknownSource`].
    pub fn source(&self, name: &str) -> Result<&Source, AppError> {
        self.sources
            .get(name)
            .ok_or_else(|| AppError::UnknownSource {
                name: name.chars().take(64).collect(),
            })
    }

    /// The name of the configured source or `[[api]]` called `name`: what the dashboard shows
    /// events of.
    ///
    /// # Errors
    /// [`AppError::UnknownSource`].
    pub(crate) fn known_name(&self, name: &str) -> Result<idemgate_core::SourceName, AppError> {
        if let Some(src) = self.sources.get(name) {
            return Ok(src.name.clone());
        }
        self.apis
            .iter()
            .map(|a| a.rules.source())
            .find(|s| s.as_str() == name)
            .cloned()
            .ok_or_else(|| AppError::UnknownSource {
                name: name.chars().take(64).collect(),
            })
    }

    /// Every configured source's and `[[api]]`'s name, sorted.
    pub(crate) fn known_names(&self) -> Vec<&idemgate_core::SourceName> {
        let mut names: Vec<_> = self
            .sources
            .values()
            .map(|s| &s.name)
            .chain(self.apis.iter().map(|a| a.rules.source()))
            .collect();
        names.sort();
        names
    }

    /// This process's instance and boot, when it registered one ([`crate::open`]).
    pub fn holder(&self) -> Option<&Holder> {
        self.holder.as_ref()
    }

    /// The largest body any route accepts: `limits.body_limit`, or a source's when larger.
    pub(crate) fn largest_body_limit(&self) -> usize {
        self.sources
            .values()
            .map(|s| s.body_limit)
            .fold(self.limits.body_limit, usize::max)
    }

    /// The body limit of `/hooks/{name}`: its source's, or `limits.body_limit` for a name no
    /// source has.
    pub(crate) fn body_limit_of(&self, name: &str) -> usize {
        self.sources
            .get(name)
            .map_or(self.limits.body_limit, |s| s.body_limit)
    }

    /// The metrics label for a source name: the name if configured, else `unknown` (one label,
    /// however many names are tried).
    pub(crate) fn label<'a>(&self, name: &'a str) -> &'a str {
        if self.sources.contains_key(name) {
            name
        } else {
            "unknown"
        }
    }

    /// Checks `Authorization: Bearer <token>` against the configured tokens, in constant time.
    ///
    /// # Errors
    /// [`AppError::Unauthorized`].
    pub fn authorize(&self, headers: &HeaderMap, scope: config::Scope) -> Result<(), AppError> {
        let presented = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(AppError::Unauthorized)?;
        match self.api_token_scopes(presented) {
            Some(scopes) if scopes.contains(&scope) => Ok(()),
            Some(_) => Err(AppError::Scope { scope }),
            None => Err(AppError::Unauthorized),
        }
    }

    /// Whether `presented` is one of the configured `api_tokens` with `scope`.
    pub(crate) fn is_api_token(&self, presented: &str, scope: config::Scope) -> bool {
        self.api_token_scopes(presented)
            .is_some_and(|scopes| scopes.contains(&scope))
    }

    /// The scopes of the `api_tokens` entry `presented` is. Compared as SHA-256 digests, each in
    /// constant time and every one of them, so neither the time taken nor an early return on a
    /// length tells anything of the tokens.
    fn api_token_scopes(&self, presented: &str) -> Option<&[config::Scope]> {
        let presented = config::token::digest(presented);
        let mut found = None;
        for (token, scopes) in &self.api_tokens {
            if config::token::digests_equal(token, &presented) {
                found = Some(scopes.as_slice());
            }
        }
        found
    }

    /// The claim API's claim, for a worker (timed, counted and logged in one place,
    /// `observe_claim`). It names no holder: the worker holds it, not this process.
    ///
    /// # Errors
    /// The store's error, as [`AppError::Store`].
    pub async fn claim(&self, req: ClaimRequest) -> Result<ClaimOutcome, AppError> {
        // The worker holds it, not this process: a restart of the gateway must not free it.
        Ok(self.dedup.claim_for_another(req).await?)
    }

    /// Inbox mode: claims `req` and queues `item` in one step (counted and logged as claims
    /// are), and wakes the dispatchers when it was queued.
    ///
    /// # Errors
    /// [`AppError::Store`]; nothing was written.
    pub async fn enqueue(
        &self,
        req: ClaimRequest,
        item: idemgate_core::inbox::QueuedItem,
    ) -> Result<ClaimOutcome, AppError> {
        use idemgate_core::inbox::Inbox;
        let started = Instant::now();
        let wait = self.dedup.store_wait();
        // Given up on, the enqueue still commits or not as a whole: a queued item is delivered,
        // and the sender's retry is a duplicate.
        let result = tokio::time::timeout(wait, self.store.enqueue(req.clone(), item))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::backend(
                    format!(
                        "the store did not answer an enqueue within {}",
                        idemgate_core::Human(wait)
                    ),
                    idemgate::NoAnswer,
                ))
            });
        self.dedup.health().note(&result);
        observe_claim(&self.metrics, &req, result.as_ref(), started.elapsed());
        let outcome = result?;
        if matches!(outcome, ClaimOutcome::Claimed { .. }) {
            self.inbox_wakeup.notify_waiters();
        }
        Ok(outcome)
    }

    /// Logs and counts a finished request by its outcome: the one place each outcome is
    /// emitted (the guard layer calls it), so the log line and the metric cannot drift.
    pub(crate) fn record(
        &self,
        source: &str,
        outcome: Outcome,
        status: axum::http::StatusCode,
        client: Option<std::net::IpAddr>,
    ) {
        self.metrics.delivery(source, outcome.as_str());
        tracing::info!(
            source,
            outcome = outcome.as_str(),
            status = status.as_u16(),
            client = client.map(tracing::field::display),
            "request"
        );
    }

    /// Logs and counts a request that named no configured source (a path no route serves, an
    /// unknown source): apart from the sources' deliveries, by outcome.
    pub(crate) fn refused(
        &self,
        outcome: Outcome,
        status: axum::http::StatusCode,
        client: Option<std::net::IpAddr>,
    ) {
        self.metrics.refused(outcome.as_str());
        tracing::info!(
            outcome = outcome.as_str(),
            status = status.as_u16(),
            client = client.map(tracing::field::display),
            "request refused"
        );
    }

    /// Live and expired record counts, cached for a few seconds.
    pub(crate) async fn row_counts(&self) -> Option<RowCounts> {
        self.store_stats().await.map(|s| RowCounts {
            live: s.live,
            expired: s.expired,
        })
    }

    /// What the store holds ([`Stats::stats`](idemgate_core::store::Stats::stats)), cached for
    /// a few seconds; `None` when the store counts too slowly for every scrape (the Redis store)
    /// or failed (the reason is logged).
    pub(crate) async fn store_stats(&self) -> Option<Arc<StoreStats>> {
        if !self.store.counts_cheaply() {
            return None;
        }
        if let Some(stats) = self.fresh_stats() {
            return Some(stats);
        }
        // One count at a time: whoever waited for it takes its figures.
        let _counting = self.counting.lock().await;
        if let Some(stats) = self.fresh_stats() {
            return Some(stats);
        }
        use idemgate_core::store::Stats;
        match self.store.stats().await {
            Ok(s) => {
                let stats = Arc::new(s);
                *self.stats.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((Instant::now(), stats.clone()));
                Some(stats)
            }
            Err(e) => {
                tracing::warn!(error = %error::ErrorChain(&e), "cannot count the store's rows");
                None
            }
        }
    }

    /// [`store_stats`](Self::store_stats) for a page that must not wait long: past `deadline`
    /// the count goes on behind it, for the next view, and the last figures taken are answered
    /// (`Counted::Stale`), or none yet (`Counted::Pending`).
    pub(crate) async fn store_stats_by(&self, deadline: tokio::time::Instant) -> Counted {
        if !self.store.counts_cheaply() {
            return Counted::Fresh(None);
        }
        if let Some(stats) = self.fresh_stats() {
            return Counted::Fresh(Some(stats));
        }
        let state = self.clone();
        let (tx, counting) = tokio::sync::oneshot::channel();
        self.tasks.spawn_once("store count", async move {
            let _ = tx.send(state.store_stats().await);
        });
        match tokio::time::timeout_at(deadline, counting).await {
            Ok(counted) => Counted::Fresh(counted.ok().flatten()),
            Err(_) => match &*self.stats.lock().unwrap_or_else(|p| p.into_inner()) {
                Some((at, stats)) => Counted::Stale(stats.clone(), at.elapsed()),
                None => Counted::Pending,
            },
        }
    }

    /// The figures last counted, if they are fresh enough to show again.
    fn fresh_stats(&self) -> Option<Arc<StoreStats>> {
        const FRESH: Duration = Duration::from_secs(5);
        match &*self.stats.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((at, stats)) if at.elapsed() < FRESH => Some(stats.clone()),
            _ => None,
        }
    }

    /// Inbox mode: each inbox source's queue, by the store's clock (empty without inbox sources,
    /// or when the store cannot tell: the reason is logged).
    pub(crate) async fn inbox_stats(&self) -> Vec<idemgate_core::inbox::InboxStats> {
        self.read_inbox().await.unwrap_or_default()
    }

    /// Every queue that holds anything, or `None` when the store could not say (logged), or when
    /// no source runs in inbox mode.
    pub(crate) async fn read_inbox(&self) -> Option<Vec<idemgate_core::inbox::InboxStats>> {
        use idemgate_core::inbox::Inbox;
        if !self.sources.values().any(|s| s.mode == Mode::Inbox) {
            return None;
        }
        match self.store.inbox_stats().await {
            Ok(stats) => Some(stats),
            Err(e) => {
                tracing::warn!(error = %error::ErrorChain(&e), "cannot read the inbox");
                None
            }
        }
    }

    /// Inbox sources whose oldest item is older than their `queue_lag` (past it, the TTL no
    /// longer covers the sender's retries): each with its lag and margin.
    pub(crate) async fn lagging(&self) -> Vec<Lagging> {
        self.inbox_stats()
            .await
            .into_iter()
            .filter_map(|s| {
                let margin = self
                    .sources
                    .get(s.source.as_str())?
                    .policy
                    .ttl
                    .contract
                    .queue_lag;
                let lag = s.oldest_pending.filter(|lag| *lag > margin)?;
                Some(Lagging {
                    source: s.source,
                    lag,
                    margin,
                })
            })
            .collect()
    }

    /// The Redis tier's answers since start, when there is a tier.
    pub(crate) fn tier_counts(&self) -> Option<TierCounts> {
        #[cfg(feature = "redis")]
        if let Some(c) = self.store.tier_counters() {
            return Some(TierCounts {
                hits: c.hits,
                misses: c.misses,
                errors: c.errors,
                bypassed: c.bypassed,
            });
        }
        None
    }
}

/// Hears every claim: the one place a claim's latency and a late duplicate are counted and
/// logged.
fn observe_claim(
    metrics: &Metrics,
    req: &ClaimRequest,
    result: Result<&ClaimOutcome, &StoreError>,
    took: Duration,
) {
    let source = &req.key.source;
    metrics.claim_latency(source.as_str(), took);
    let Ok(outcome) = result else {
        return;
    };
    if let ClaimOutcome::Claimed {
        late_duplicate: Some(first_seen),
        ..
    }
    | ClaimOutcome::LateDuplicate { first_seen, .. } = outcome
    {
        // A delivery after its record expired, of an event processed before: the TTL was too
        // short, or a request was replayed.
        metrics.late_duplicate(source.as_str());
        tracing::warn!(
            source = %source,
            policy = req.late_duplicates.as_str(),
            %first_seen,
            "late duplicate"
        );
    }
    tracing::debug!(source = %source, outcome = outcome.name(), "claim");
}

/// The clients built so far: one for plain `http://`, one per distinct TLS settings.
#[derive(Default)]
struct Clients {
    http: Option<forward::Client>,
    https: Vec<(idemgate_tls::ClientTls, forward::Client)>,
}

impl Clients {
    /// The client for `sc`'s `forward_url`, with `tls` (`None`: it speaks no TLS).
    fn get(
        &mut self,
        sc: &SourceConfig,
        tls: Option<&idemgate_tls::ClientTls>,
    ) -> Result<forward::Client, config::ConfigError> {
        let Some(tls) = tls else {
            return Ok(self.http.get_or_insert_with(forward::http_client).clone());
        };
        if let Some((_, client)) = self.https.iter().find(|(t, _)| t == tls) {
            return Ok(client.clone());
        }
        let client = forward::client(tls).map_err(|e| sc.tls_invalid(&e))?;
        self.https.push((tls.clone(), client.clone()));
        Ok(client)
    }
}

fn build_source(
    index: usize,
    sc: &SourceConfig,
    body_limit: usize,
    clients: &mut Clients,
) -> Result<Source, config::ConfigError> {
    let policy = sc.policy(index)?;
    let verifier = crate::config::verifier(sc)?;
    let body_limit = sc.body_limit(body_limit, verifier.scheme());
    Ok(Source {
        name: policy.name.clone(),
        destination: match &policy.destination {
            None => None,
            Some(target) => {
                // An HTTP destination sends with its (shared) client; a broker with its own
                // connection, speaking TLS as `policy.tls` says.
                let http = match target {
                    crate::target::Target::Http(_) => clients.get(sc, policy.tls.as_ref())?,
                    _ => clients.get(sc, None)?,
                };
                Some(Arc::new(crate::destination::Destination::new(
                    target.clone(),
                    policy.tls.clone(),
                    http,
                )))
            }
        },
        exposure: crate::window::Exposure::of(sc, &policy),
        documents: documents(sc, &verifier)?,
        sns_subscription: sc.sns_subscription.unwrap_or_default(),
        policy,
        verifier,
        forward_timeout: sc.forward_timeout,
        mode: sc.mode,
        dispatch: sc.dispatch.clone(),
        on_conflict: sc.on_conflict,
        late_duplicates: sc.late_duplicates,
        late_duplicate_horizon: sc.late_duplicate_horizon,
        body_limit,
        dedupe_on_body: sc.dedupe_on_body(),
    })
}

/// The document cache of a source that fetches (`pubsub` with a `jwks_url`, `sns`), with a client
/// trusting the system's authorities and `fetch_ca_file`'s.
fn documents(
    sc: &SourceConfig,
    verifier: &idemgate_providers::Verifier,
) -> Result<Option<crate::documents::Documents>, config::ConfigError> {
    if !verifier.scheme().fetches() {
        return Ok(None);
    }
    let client = forward::client(&sc.fetch_tls()).map_err(|e| {
        let why = match e {
            idemgate_tls::TlsError::NoRoots => "this machine trusts no certificate authority for the source's fetches: set fetch_ca_file".to_owned(),
            e => e.to_string(),
        };
        sc.invalid("fetch_ca_file", why)
    })?;
    Ok(Some(crate::documents::Documents::new(client)))
}
