//! Serving: the accept loop (a connection cap, header timeouts, graceful drain) and [`run`] /
//! [`serve`], which start the background work and stop it in order.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config, Limits};
use crate::error::Problem;
use crate::outcome::Outcome;
use crate::state::{AppState, Sources};
use crate::store::{self, AnyStore};
use crate::{admin, app};
use idemgate::ErrorChain;
use idemgate_core::StoreError;
use idemgate_core::store::{Boot, BootRequest, Instances, LiveBoot};

mod problem_io;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Store(#[from] store::OpenError),
    #[error("cannot serve on the listener")]
    Serve(#[source] std::io::Error),
    #[error("cannot register this gateway's boot with the store")]
    Boot(#[source] idemgate_core::StoreError),
    /// Another process holds this gateway's instance name: it renewed its liveness lease while
    /// this one waited for it to lapse.
    #[error(
        "instance {} is held by a live process ({live}), which renewed its liveness lease while this one waited: give this process another instance name (`instance` in the config), or stop the other; nothing was changed",
        live.holder.instance
    )]
    InstanceLive { live: Box<LiveBoot> },
    /// Another process serves the same SQLite data directory.
    #[error(
        "the SQLite store in {dir} is in use by another process ({}): one gateway per data directory; stop the other, or give this one another store.path (several gateways share a PostgreSQL store, not an SQLite one)",
        holder.as_deref().unwrap_or("who, it did not say")
    )]
    DataDirInUse { dir: String, holder: Option<String> },
    /// While serving, this process's liveness lease lapsed (the store was out of reach) and
    /// another process registered under its instance name: it stopped serving.
    #[error("another process took this gateway's instance name; this one stopped serving")]
    Superseded(#[source] idemgate_core::StoreError),
}

/// Opens the store, serves `listener` until `shutdown` resolves, then drains: stops accepting,
/// lets in-flight requests finish within `limits.shutdown_grace`, lets the forwards in flight
/// settle, finishes what the store has not taken yet, stops the sweeper and ends this boot's
/// liveness lease.
///
/// # Errors
/// A [`StartError`] when the store cannot be opened or the listener fails.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let admin = bind_admin(&config).await?;
    let apis = bind_apis(&config).await?;
    let state = open(&config).await?;
    serve_on(
        state,
        &config,
        Listeners {
            public: listener,
            admin,
            apis,
        },
        shutdown,
    )
    .await
}

/// The listeners a gateway serves: `listen`, and `admin_listen` when the config sets it.
#[derive(Debug)]
pub struct Listeners {
    /// `listen`: every route, or without `admin_listen`'s routes when there is an admin
    /// listener ([`crate::Routes`]).
    pub public: TcpListener,
    /// `admin_listen`: the operator's routes only.
    pub admin: Option<TcpListener>,
    /// Each `[[api]]`'s `listen`, by the api's name ([`bind_apis`]). An api without one here is
    /// bound by [`serve_on`] itself.
    pub apis: Vec<(String, TcpListener)>,
}

/// Binds `admin_listen`, when the config sets it.
///
/// # Errors
/// [`StartError::Serve`] when the address cannot be bound.
pub async fn bind_admin(config: &Config) -> Result<Option<TcpListener>, StartError> {
    match &config.admin_listen {
        None => Ok(None),
        Some(addr) => TcpListener::bind(addr.as_str())
            .await
            .map(Some)
            .map_err(|e| {
                StartError::Serve(std::io::Error::new(
                    e.kind(),
                    format!("cannot listen on admin_listen {addr}: {e}"),
                ))
            }),
    }
}

/// Binds every `[[api]]`'s `listen`, in the config's order, each under its api's name.
///
/// # Errors
/// [`StartError::Serve`] naming the first api whose address cannot be bound.
pub async fn bind_apis(config: &Config) -> Result<Vec<(String, TcpListener)>, StartError> {
    let mut bound = Vec::with_capacity(config.apis.len());
    for api in &config.apis {
        bound.push((api.name.clone(), bind_api(&api.name, &api.listen).await?));
    }
    Ok(bound)
}

async fn bind_api(name: &str, listen: &str) -> Result<TcpListener, StartError> {
    TcpListener::bind(listen).await.map_err(|e| {
        StartError::Serve(std::io::Error::new(
            e.kind(),
            format!("cannot listen on api {name:?}'s listen {listen}: {e}"),
        ))
    })
}

/// Everything that can fail before serving: every source's verifier is built, the store is
/// opened (reached, and migrated if needed), and this process's boot is registered (refused
/// while another live process holds the instance name; only then are an earlier, dead boot's
/// claims freed). `idemgate serve` binds its listener first, so a second process on the same
/// address stops before touching the store, and calls this before saying "listening".
///
/// # Errors
/// [`StartError::Config`] for a source that cannot be built, [`StartError::Store`] when the
/// store cannot be opened.
pub async fn open(config: &Config) -> Result<AppState, StartError> {
    // The sources and their verifiers first: a configuration error is found without touching
    // the store.
    let sources = Sources::build(config)?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    // The broker destinations next, still before the store: a stream that does not capture the
    // subject, an exchange that does not exist, a dedup window shorter than the source needs
    // with `on_short_window = "refuse"`, each stops the start here.
    crate::audit::at_start(sources.values()).await?;
    // The embedded store serves one gateway: a second one on the same directory is refused
    // before it touches the store (its own steady clock and writer would race the first's).
    let data_lock = lock_data_dir(config)?;
    let store = AnyStore::open(&config.store).await?;
    // The tier is reached now, so a Redis that is down is said at start; the gateway still
    // serves, from the store alone, until it is back.
    if let Some(Err(e)) = store.ping_tier().await {
        tracing::warn!(error = %e, "the Redis tier does not answer; serving from the store alone until it does");
    }
    // A new boot of this instance: the claims an earlier boot held (it crashed mid-delivery) are
    // takeable at once, so their senders' retries are processed in seconds, not after a lease.
    // Only once that boot is provably dead: a live one refuses us, and we touch nothing.
    let instance = config.instance_name();
    let request = BootRequest {
        process: crate::process::identity(),
        ..BootRequest::new(instance.clone(), config.instance_lease, config::host_name())
    };
    let boot = register(&store, &request).await?;
    if boot.freed > 0 {
        tracing::warn!(
            instance = %instance,
            boot = boot.holder.boot,
            freed = boot.freed,
            "freed the claims an earlier boot of this instance held; their retries are processed at once"
        );
    } else {
        tracing::info!(instance = %instance, boot = boot.holder.boot, "registered this boot");
    }
    let state = AppState::with_sources(config, sources, store, Some(boot.holder));
    *state.data_lock.lock().unwrap_or_else(|p| p.into_inner()) = data_lock;
    Ok(state)
}

/// The file in an SQLite store's data directory that `serve` holds locked while it runs.
pub const SERVE_LOCK: &str = "serve.lock";

/// For the embedded SQLite store: takes the exclusive lock on its data directory's
/// [`SERVE_LOCK`] (creating the directory, as the store would), and writes who holds it. Held
/// until the process ends (the operating system releases it after a crash too). `None` for the
/// other stores.
///
/// # Errors
/// [`StartError::DataDirInUse`] when another process holds it, naming that process;
/// [`StartError::Serve`] when the lock file cannot be made.
fn lock_data_dir(config: &Config) -> Result<Option<std::fs::File>, StartError> {
    use std::io::{Read, Seek, Write};
    if config.store.kind != idemgate::StoreKind::Sqlite {
        return Ok(None);
    }
    let dir = &config.store.path;
    let path = dir.join(SERVE_LOCK);
    let cannot = |e: std::io::Error| {
        StartError::Serve(std::io::Error::new(
            e.kind(),
            format!("cannot lock {}: {e}", path.display()),
        ))
    };
    std::fs::create_dir_all(dir).map_err(cannot)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(cannot)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            return Err(StartError::DataDirInUse {
                dir: dir.display().to_string(),
                holder: Some(holder.trim().to_owned()).filter(|h| !h.is_empty()),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(cannot(e)),
    }
    let who = format!(
        "idemgate serve, pid {} on {}, listening on {}",
        std::process::id(),
        config::host_name(),
        config.listen
    );
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(who.as_bytes()))
        .map_err(cannot)?;
    Ok(Some(file))
}

/// Registers `req`'s boot. While the instance's latest boot is alive:
///
/// - if its process ran on this machine (this kernel, this pid namespace), it is looked up: gone
///   (a crash), the boot is registered over at once; running, this process is refused at once;
/// - otherwise, waits for its liveness lease to lapse (a process that crashed stops renewing
///   it): if it lapses, registers; if it is renewed meanwhile, or does not lapse within one lease
///   and a little, the name is held by a live process, and this one is refused, naming it.
async fn register(store: &AnyStore, req: &BootRequest) -> Result<Boot, StartError> {
    let deadline = Instant::now() + req.lease + Duration::from_secs(2);
    let mut seen: Option<idemgate_core::Timestamp> = None;
    let mut req = req.clone();
    loop {
        match store.register_boot(&req).await {
            Ok(boot) => return Ok(boot),
            Err(StoreError::InstanceLive { live }) => {
                match crate::process::alive(&live.process) {
                    Some(false) if req.supersede != Some(live.holder.boot) => {
                        tracing::warn!(
                            instance = %req.instance,
                            holder = %live,
                            "the instance's last boot ran on this machine and its process is gone: registering over it at once"
                        );
                        req.supersede = Some(live.holder.boot);
                        continue;
                    }
                    Some(true) => return Err(StartError::InstanceLive { live }),
                    _ => {}
                }
                let renewed = seen.is_some_and(|until| live.alive_until > until);
                if renewed || Instant::now() >= deadline {
                    return Err(StartError::InstanceLive { live });
                }
                if seen.is_none() {
                    tracing::warn!(
                        instance = %req.instance,
                        holder = %live,
                        remaining_ms = live.remaining.as_millis() as u64,
                        "the instance name is held by a boot whose liveness lease still runs; waiting for it to lapse (a crashed process) or be renewed (a live one)"
                    );
                }
                seen = Some(live.alive_until);
                tokio::time::sleep(
                    live.remaining.min(Duration::from_secs(1)) + Duration::from_millis(50),
                )
                .await;
            }
            Err(e) => return Err(StartError::Boot(e)),
        }
    }
}

/// Keeps this boot's liveness lease running: renewed every quarter of it until `stop`. When the
/// store is out of reach for longer than the lease, says so (another process may now start
/// under the name); when another did ([`StoreError::Superseded`]), cancels `superseded` and
/// ends, and the gateway stops serving.
fn spawn_heartbeat(
    state: &AppState,
    lease: Duration,
    stop: CancellationToken,
    superseded: CancellationToken,
) -> Option<tokio::task::JoinHandle<Option<Option<StoreError>>>> {
    let holder = state.holder.clone()?;
    let store = state.store.clone();
    let cancel = stop.clone();
    // Kept across restarts of a panicking heartbeat, so that a lease lapsing while it crash-loops
    // is still said.
    let renewal = Arc::new(std::sync::Mutex::new(Renewal {
        at: Instant::now(),
        lapsed: false,
    }));
    Some(state.tasks.supervise("heartbeat", cancel, move || {
        heartbeat(
            store.clone(),
            holder.clone(),
            lease,
            Arc::clone(&renewal),
            stop.clone(),
            superseded.clone(),
        )
    }))
}

/// The heartbeat's last renewal, and whether the lapse since was said.
struct Renewal {
    at: Instant,
    lapsed: bool,
}

/// [`spawn_heartbeat`]'s task: `None` when stopped, the error when superseded.
async fn heartbeat(
    store: AnyStore,
    holder: idemgate_core::Holder,
    lease: Duration,
    renewal: Arc<std::sync::Mutex<Renewal>>,
    stop: CancellationToken,
    superseded: CancellationToken,
) -> Option<StoreError> {
    let every = lease / 4;
    let renewal = &*renewal;
    let mut pause = every;
    let last = || {
        renewal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep(pause) => {}
        }
        match store.heartbeat(&holder, lease).await {
            Ok(_) => {
                let mut last = last();
                if last.lapsed {
                    tracing::info!(holder = %holder, "the liveness lease is renewed again");
                }
                *last = Renewal {
                    at: Instant::now(),
                    lapsed: false,
                };
                pause = every;
            }
            Err(e @ StoreError::Superseded { .. }) => {
                tracing::error!(error = %ErrorChain(&e), "another process started under this gateway's instance name while its liveness lease had lapsed; this one stops serving");
                superseded.cancel();
                return Some(e);
            }
            Err(e) => {
                let mut last = last();
                let since = last.at.elapsed();
                if since >= lease && !last.lapsed {
                    tracing::error!(
                        holder = %holder,
                        since_ms = since.as_millis() as u64,
                        error = %ErrorChain(&e),
                        "this boot's liveness lease lapsed (the store is out of reach): another process could now start under its instance name and free its claims"
                    );
                    last.lapsed = true;
                } else {
                    tracing::warn!(error = %ErrorChain(&e), "cannot renew this boot's liveness lease; trying again");
                }
                pause = every.min(Duration::from_secs(1));
            }
        }
    }
}

/// Serves `listener` with a state from [`open`] (or built over a store of the caller's), until
/// `shutdown`; as [`run`].
///
/// # Errors
/// As [`run`].
pub async fn serve(
    state: AppState,
    config: &Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let admin = bind_admin(config).await?;
    serve_on(
        state,
        config,
        Listeners {
            public: listener,
            admin,
            apis: Vec::new(),
        },
        shutdown,
    )
    .await
}

/// As [`serve`], on listeners bound by the caller (`idemgate serve` binds both before it opens
/// the store): with an admin listener, the public one serves [`crate::Routes::Public`] and the
/// admin one [`crate::Routes::Admin`]; without, the public one serves every route.
///
/// # Errors
/// As [`run`].
pub async fn serve_on(
    state: AppState,
    config: &Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    // The apis' listeners, bound by the caller before the store was opened; one the caller did
    // not bind is bound here, and one that cannot be stops the start before anything runs.
    let Listeners {
        public,
        admin,
        apis: mut bound,
    } = listeners;
    let mut api_listeners = Vec::new();
    for api in &state.apis {
        let name = api.rules.source().as_str();
        let listener = match bound.iter().position(|(n, _)| n == name) {
            Some(at) => bound.swap_remove(at).1,
            None => bind_api(name, &api.listen).await?,
        };
        tracing::info!(api = %api.rules.source(), listen = %api.listen, "the api's sidecar listens");
        api_listeners.push((listener, Arc::clone(api)));
    }
    let cancel = CancellationToken::new();
    let superseded = CancellationToken::new();
    let heartbeat = spawn_heartbeat(
        &state,
        config.instance_lease,
        cancel.clone(),
        superseded.clone(),
    );
    let shutdown = {
        let superseded = superseded.clone();
        async move {
            tokio::select! {
                () = shutdown => {}
                () = superseded.cancelled() => {}
            }
        }
    };
    let sweeper = admin::spawn_sweeper(
        &state,
        config.store.sweep_interval,
        config.store.sweep_options(),
        cancel.clone(),
    );
    let retention = admin::spawn_history_retention(
        &state,
        config.store.history_retention,
        config.store.history_interval,
        cancel.clone(),
    );
    let audits = crate::audit::spawn(&state, config.window_audit_interval, cancel.clone());
    let dispatching = CancellationToken::new();
    let dispatchers = crate::dispatch::spawn(&state, &dispatching);
    // One stop for every listener.
    let stop = CancellationToken::new();
    // Each `[[api]]` on its own listener, stopped with the others.
    let mut sidecars = Vec::new();
    for (listener, api) in api_listeners {
        let (state, stop) = (state.clone(), stop.clone());
        sidecars.push(tokio::spawn(async move {
            let cap = state.limits.connection_cap();
            accept_loop(
                listener,
                crate::sidecar::router(state.clone(), api),
                &state,
                cap,
                false,
                stop.cancelled_owned(),
            )
            .await
        }));
    }
    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown.await;
            stop.cancel();
        }
    });
    let result = match admin {
        None => {
            accept_loop(
                public,
                app(state.clone()),
                &state,
                state.limits.connection_cap(),
                true,
                stop.clone().cancelled_owned(),
            )
            .await
        }
        Some(admin) => {
            let (public, admin) = tokio::join!(
                accept_loop(
                    public,
                    crate::router(state.clone(), crate::Routes::Public),
                    &state,
                    state.limits.connection_cap(),
                    true,
                    stop.clone().cancelled_owned(),
                ),
                accept_loop(
                    admin,
                    crate::router(state.clone(), crate::Routes::Admin),
                    &state,
                    ADMIN_CONNECTIONS,
                    true,
                    stop.clone().cancelled_owned(),
                ),
            );
            public.and(admin)
        }
    };
    for sidecar in sidecars {
        if let Ok(Err(e)) = sidecar.await {
            tracing::error!(error = %ErrorChain(&e), "an api's sidecar stopped with an error");
        }
    }
    settle_forwards(&state).await;
    // The inbox: stop taking, let deliveries in flight finish within the grace; the rest stays
    // queued.
    dispatching.cancel();
    for d in dispatchers {
        let _ = d.await;
    }
    // Claims of requests dropped above, and completions the store did not take at once, are
    // finished by background retries: give them a bounded time.
    let pending = state.dedup.finisher().pending();
    if pending > 0 {
        tracing::info!(
            pending,
            "waiting for completions and releases the store has not taken yet"
        );
    }
    state.dedup.shutdown(Duration::from_secs(10)).await;
    cancel.cancel();
    if let Some(sweeper) = sweeper {
        let _ = sweeper.await;
    }
    let _ = retention.await;
    if let Some(audits) = audits {
        let _ = audits.await;
    }
    for src in state.sources.values() {
        if let Some(destination) = &src.destination {
            destination.close().await;
        }
    }
    let superseded_by = match heartbeat {
        Some(task) => task.await.ok().flatten().flatten(),
        None => None,
    };
    // Stopped with everything settled: the next boot of this name may start at once.
    if superseded_by.is_none()
        && let Some(holder) = &state.holder
        && let Err(e) = state.store.end_boot(holder).await
    {
        tracing::warn!(error = %ErrorChain(&e), "cannot end this boot's liveness lease; the next start under its name waits for it to lapse");
    }
    // What the dashboard started (a count of a large store) gets a moment to finish.
    if tokio::time::timeout(Duration::from_secs(2), state.tasks.close())
        .await
        .is_err()
    {
        tracing::debug!("background work the pages started is still running");
    }
    // The data directory is free for the next gateway at once (a task the page left running may
    // hold the state a moment longer).
    drop(
        state
            .data_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(),
    );
    tracing::info!("stopped");
    match superseded_by {
        Some(e) => Err(StartError::Superseded(e)),
        None => result,
    }
}

/// Waits for the forwards still in flight once no request is served any more: each settles
/// itself (its downstream's answer or its `forward_timeout`, then its completion or release),
/// whatever became of its request. Bounded by the longest `forward_timeout` and a margin for the
/// claim before it and the completion after.
async fn settle_forwards(state: &AppState) {
    state.forwards.close();
    if state.forwards.is_empty() {
        return;
    }
    let longest = state
        .sources
        .values()
        .map(|s| s.forward_timeout)
        .max()
        .unwrap_or_default();
    let bound = longest + FORWARD_SETTLE_MARGIN;
    tracing::info!(
        forwards = state.forwards.len(),
        bound_ms = bound.as_millis() as u64,
        "waiting for the forwards in flight to settle"
    );
    if tokio::time::timeout(bound, state.forwards.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            forwards = state.forwards.len(),
            "forwards still unsettled after their timeout and the margin; their claims are left to their leases"
        );
    }
}

/// How long past the longest `forward_timeout` shutdown waits for forwards to settle.
const FORWARD_SETTLE_MARGIN: Duration = Duration::from_secs(10);

/// Most connections the admin listener serves at once (scrapers, probes, an operator's browser).
const ADMIN_CONNECTIONS: usize = 64;

/// Serves HTTP/1.1 connections until `shutdown`, then drains: stops accepting, asks every
/// connection to finish its request in flight and close, and after `grace` drops the requests
/// still running. A forward in flight is not dropped with its request: it runs on a task of its
/// own and settles itself ([`settle_forwards`]).
///
/// At most `limits.max_connections` connections are served at once; one beyond that is answered
/// with a canned 503 and closed at once, so a flood of idle connections cannot take the file
/// descriptors and the memory that real requests need (about 15 KiB per idle connection; freed
/// memory is kept by the allocator for the next connections, so the cap also bounds the
/// process's size).
async fn accept_loop(
    listener: TcpListener,
    app: Router,
    state: &AppState,
    cap: usize,
    own_answers: bool,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::server::graceful::GracefulShutdown;
    use hyper_util::service::TowerToHyperService;

    let limits = state.limits.clone();
    let slots = Arc::new(Semaphore::new(cap));
    let refusal = refusal();
    let mut refused = Refusals::default();
    // Every connection is watched: at shutdown each finishes the request it is serving and
    // closes, and `graceful.shutdown()` resolves when the last one has.
    let graceful = GracefulShutdown::new();
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    refuse(&stream, &refusal);
                    state.metrics.connection_refused();
                    refused.note(cap);
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(WithPeer {
                    app: app.clone(),
                    peer,
                    proxies: state.trusted_proxies.clone(),
                });
                // Under pressure (more than half the slots taken), a new connection gets at most
                // two seconds for its headers: a flood of slow clients then clears itself.
                let header_timeout = if slots.available_permits() < cap / 2 {
                    limits.header_timeout.min(PRESSED_HEADER_TIMEOUT)
                } else {
                    limits.header_timeout
                };
                let open = state.metrics.connection_opened();
                let mut http1 = hyper::server::conn::http1::Builder::new();
                http1.timer(TokioTimer::new()).header_read_timeout(header_timeout);
                // The gateway's routes: hyper's own error answers are made into idemgate's. A
                // sidecar's answers are its upstream's, passed on as they are.
                if own_answers {
                    let conn = graceful.watch(http1.serve_connection(
                        TokioIo::new(problem_io::ProblemIo::new(stream)),
                        service,
                    ));
                    connections.spawn(async move {
                        let _slot = slot;
                        let _open = open;
                        let _ = conn.await;
                    });
                } else {
                    let conn = graceful.watch(http1.serve_connection(TokioIo::new(stream), service));
                    connections.spawn(async move {
                        let _slot = slot;
                        let _open = open;
                        let _ = conn.await;
                    });
                }
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tracing::info!(
        connections = connections.len(),
        "shutting down: no new connections; finishing in-flight requests"
    );
    let grace = limits.shutdown_grace;
    let drained = tokio::time::timeout(grace, async {
        graceful.shutdown().await;
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            dropped = connections.len(),
            "requests outlived the shutdown grace; dropping them (their forwards settle themselves)"
        );
        connections.abort_all();
        while connections.join_next().await.is_some() {}
    }
    Ok(())
}

/// The router, with the client's address in each request's extensions (as axum's
/// [`ConnectInfo`](axum::extract::ConnectInfo)): what a source's `allow_from` and the
/// dashboard's loopback rule are checked against, and what the request's log line names. The
/// connection's peer, or, for a peer among `trusted_proxies`, the client `X-Forwarded-For` names
/// ([`client_of`]).
#[derive(Debug, Clone)]
struct WithPeer {
    app: Router,
    peer: std::net::SocketAddr,
    proxies: Arc<[crate::allow::Cidr]>,
}

/// The client behind `peer`: `peer` itself, unless it is a trusted proxy; then the right-most
/// address of `X-Forwarded-For` (every such header, in order) that is not itself a trusted proxy
/// (each proxy appends the address it got the request from, so the entries left of the first
/// untrusted one are the client's own word, and never believed). An entry that does not parse
/// ends the walk at the last trusted hop.
fn client_of(
    peer: std::net::SocketAddr,
    headers: &axum::http::HeaderMap,
    proxies: &[crate::allow::Cidr],
) -> std::net::SocketAddr {
    let trusted = |ip: std::net::IpAddr| proxies.iter().any(|c| c.contains(ip));
    if !trusted(peer.ip()) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else {
            return client;
        };
        client = std::net::SocketAddr::new(ip, 0);
        if !trusted(ip) {
            return client;
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, with or without a port (`[v6]:port`, `v4:port`).
fn parse_hop(hop: &str) -> Option<std::net::IpAddr> {
    hop.parse()
        .ok()
        .or_else(|| hop.parse::<std::net::SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            hop.strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .and_then(|h| h.parse().ok())
        })
}

impl tower_service::Service<axum::http::Request<hyper::body::Incoming>> for WithPeer {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = axum::routing::future::RouteFuture<std::convert::Infallible>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tower_service::Service::<axum::http::Request<hyper::body::Incoming>>::poll_ready(
            &mut self.app,
            cx,
        )
    }

    fn call(&mut self, mut req: axum::http::Request<hyper::body::Incoming>) -> Self::Future {
        let client = if self.proxies.is_empty() {
            self.peer
        } else {
            client_of(self.peer, req.headers(), &self.proxies)
        };
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(client));
        self.app.call(req)
    }
}

/// The header timeout of connections accepted while more than half the slots are taken.
const PRESSED_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// The answer to a connection beyond the cap, written without waiting (a full socket buffer just
/// loses it: the close says the same).
fn refuse(stream: &TcpStream, refusal: &[u8]) {
    let _ = stream.try_write(refusal);
}

fn refusal() -> Vec<u8> {
    let outcome = Outcome::TooManyConnections;
    let problem = Problem::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        outcome,
        "the gateway is serving as many connections as limits.max_connections allows; retry shortly",
    );
    let body = serde_json::to_string(&problem).unwrap_or_default();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nidemgate-outcome: {outcome}\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Refused connections, logged at most every ten seconds.
#[derive(Debug, Default)]
struct Refusals {
    since_log: u64,
    logged: Option<Instant>,
}

impl Refusals {
    fn note(&mut self, cap: usize) {
        self.since_log += 1;
        if self
            .logged
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(10))
        {
            tracing::warn!(
                refused = self.since_log,
                max_connections = cap,
                "refusing connections beyond limits.max_connections"
            );
            self.since_log = 0;
            self.logged = Some(Instant::now());
        }
    }
}

impl Limits {
    /// The connection cap: `max_connections`, or by default half the file descriptors this
    /// process may open less a reserve (each served connection may forward over a connection of
    /// its own; the store's pool, the log and the data files need some too), and no more than
    /// one per 256 KiB of the memory the process may use (its cgroup's limit in a container).
    pub fn connection_cap(&self) -> usize {
        self.max_connections
            .map(std::num::NonZeroUsize::get)
            .unwrap_or_else(|| {
                let files = default_connection_cap(open_files_limit());
                crate::budget::memory_connection_cap(crate::budget::memory_limit())
                    .map_or(files, |memory| files.min(memory))
            })
    }
}

/// Half of `nofile` less a reserve of 64, and at least 16.
fn default_connection_cap(nofile: Option<u64>) -> usize {
    let nofile = nofile.unwrap_or(1024);
    let cap = nofile.saturating_sub(64) / 2;
    usize::try_from(cap).unwrap_or(usize::MAX).max(16)
}

/// The soft limit on open files, from `/proc/self/limits` (Linux); `None` elsewhere.
fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_leaves_room_for_forwards_and_the_store() {
        assert_eq!(default_connection_cap(Some(20_000)), 9_968);
        assert_eq!(default_connection_cap(Some(1_024)), 480);
        assert_eq!(default_connection_cap(Some(10)), 16);
        assert_eq!(default_connection_cap(None), 480);
        // The machine's own limit reads as a number.
        if cfg!(target_os = "linux") {
            assert!(open_files_limit().is_some_and(|n| n > 0));
        }
    }

    #[test]
    fn the_client_behind_trusted_proxies_is_the_rightmost_untrusted_hop() {
        use axum::http::{HeaderMap, HeaderValue};
        let proxies: Vec<crate::allow::Cidr> = ["10.0.0.0/8", "127.0.0.1"]
            .iter()
            .map(|c| c.parse().unwrap())
            .collect();
        let peer = |ip: &str| std::net::SocketAddr::new(ip.parse().unwrap(), 4000);
        let xff = |values: &[&str]| {
            let mut h = HeaderMap::new();
            for v in values {
                h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
            }
            h
        };
        let ip = |a: std::net::SocketAddr| a.ip().to_string();
        // A peer that is not a trusted proxy is the client, whatever it claims.
        let h = xff(&["203.0.113.9"]);
        assert_eq!(
            ip(client_of(peer("198.51.100.7"), &h, &proxies)),
            "198.51.100.7"
        );
        // Through two trusted hops: the right-most untrusted address; what the client wrote
        // itself, to the left, is not believed.
        let h = xff(&["1.2.3.4, 203.0.113.9, 10.1.1.1"]);
        assert_eq!(
            ip(client_of(peer("127.0.0.1"), &h, &proxies)),
            "203.0.113.9"
        );
        let h = xff(&["1.2.3.4", "203.0.113.9:5555, 10.1.1.1"]);
        assert_eq!(
            ip(client_of(peer("127.0.0.1"), &h, &proxies)),
            "203.0.113.9"
        );
        let h = xff(&["[2001:db8::1]:443"]);
        assert_eq!(ip(client_of(peer("10.0.0.2"), &h, &proxies)), "2001:db8::1");
        // No header, or garbage: the last trusted hop, never a client's word.
        assert_eq!(
            ip(client_of(peer("10.0.0.2"), &HeaderMap::new(), &proxies)),
            "10.0.0.2"
        );
        let h = xff(&["1.2.3.4, nonsense, 10.1.1.1"]);
        assert_eq!(ip(client_of(peer("127.0.0.1"), &h, &proxies)), "10.1.1.1");
    }

    #[test]
    fn the_refusal_is_a_complete_http_answer() {
        let text = String::from_utf8(refusal()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        serde_json::from_str::<serde_json::Value>(body).unwrap();
    }
}
