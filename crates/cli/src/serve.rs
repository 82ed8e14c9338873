//! `idemgate serve`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use idemgate_gateway::Config;

use crate::Usage;

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The configuration file (see idemgate.example.toml).
    #[arg(long, env = "IDEMGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Listen here instead of the config's `listen` (host:port; the host may be a name).
    #[arg(long)]
    listen: Option<String>,
}

/// What runs without a config file: SQLite in ./idemgate-data and one source that takes
/// unsigned JSON from holders of the demo token.
pub(crate) const DEMO: &str = r#"
api_tokens = ["demo-token-change-me"]

[[source]]
name = "demo"
provider = "none"
retry_window = "1d"
event_id_pointer = "/id"
"#;

pub(crate) async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config =
        Config::load(args.config.as_deref(), DEMO).map_err(|e| Usage(e.to_string()))?;
    if let Some(listen) = args.listen {
        idemgate_gateway::config::check_listen("--listen", &listen)
            .map_err(|e| Usage(e.to_string()))?;
        config.listen = listen;
    }
    // The listeners first (`listen`, `admin_listen`, each `[[api]]`'s): a second process on the
    // same address stops here, before it touches the store (no migration, no boot registered, no
    // claim freed). Then everything else that can fail before serving: verifiers, the store, the
    // tier, this boot (refused while another process holds the instance name). Connections wait
    // in the backlog meanwhile.
    let listener = tokio::net::TcpListener::bind(config.listen.as_str())
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let admin = idemgate_gateway::bind_admin(&config)
        .await
        .map_err(start_error)?;
    let apis = idemgate_gateway::bind_apis(&config)
        .await
        .map_err(start_error)?;
    // SIGTERM and ctrl-c are heard from here on: one during the start (a migration, a wait for
    // an earlier boot's lease) stops it, before it serves. As the container's PID 1, where the
    // kernel ignores an unhandled SIGTERM, nothing else would.
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            stop.cancel();
        }
    });
    let state = tokio::select! {
        opened = idemgate_gateway::open(&config) => opened.map_err(start_error)?,
        () = stop.cancelled() => {
            tracing::info!("stopped before serving");
            return Ok(());
        }
    };
    let addr = listener.local_addr()?;
    if let Some(admin) = &admin {
        tracing::info!(
            addr = %admin.local_addr()?,
            "admin listener: /metrics, /healthz, /livez, /readyz, /dashboard, /openapi.json and replay are served there only"
        );
    }
    let store = describe(&config, state.store.engine());
    if args.config.is_none() {
        println!("idemgate on http://{addr} with {store} and one demo source (no --config given).");
        println!("Send it a webhook: idemgate send demo --event-id evt_1 --url http://{addr}");
        println!("or with curl (the demo's API token is demo-token-change-me):");
        println!(
            "  curl -i http://{addr}/hooks/demo -H 'Authorization: Bearer demo-token-change-me' \\\n       -H 'Content-Type: application/json' -d '{{\"id\":\"evt_1\",\"amount\":42}}'"
        );
        println!("Send the same again: the answer says Idemgate-Outcome: duplicate.");
        println!("Look it up: idemgate lookup demo evt_1");
    } else {
        tracing::info!(%addr, sources = config.sources.len(), "idemgate listening with {store}");
    }
    idemgate_gateway::serve_on(
        state,
        &config,
        idemgate_gateway::Listeners {
            public: listener,
            admin,
            apis,
        },
        stop.cancelled_owned(),
    )
    .await?;
    Ok(())
}

/// A start-up failure: a configuration the gateway cannot use is a usage error (exit 2); a store
/// it cannot reach is a runtime failure (exit 1).
fn start_error(e: idemgate_gateway::StartError) -> anyhow::Error {
    use idemgate::OpenError;
    use idemgate_gateway::StartError;
    match e {
        StartError::Config(e) => Usage(e.to_string()).into(),
        StartError::Store(e @ (OpenError::Config { .. } | OpenError::NotBuilt { .. })) => {
            Usage(e.to_string()).into()
        }
        other => anyhow::Error::new(other),
    }
}

/// The store, as the start-up line names it (`the embedded SQLite store in ./idemgate-data`,
/// `PostgreSQL schema "idemgate" behind a Redis tier`).
fn describe(config: &Config, engine: &str) -> String {
    use idemgate::StoreKind;
    let base = match config.store.kind {
        StoreKind::Sqlite => format!(
            "the embedded SQLite store in {}",
            config.store.path.display()
        ),
        StoreKind::Postgres => format!("PostgreSQL schema {:?}", config.store.postgres.schema),
        StoreKind::Redis => "the Redis store".to_owned(),
    };
    if engine.ends_with("+redis") {
        format!("{base} behind a Redis tier")
    } else {
        base
    }
}

/// Resolves on ctrl-c or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
