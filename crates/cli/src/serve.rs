//! `idemgate serve`.

use std::net::SocketAddr;
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
    /// Listen here instead of the config's `listen`.
    #[arg(long)]
    listen: Option<SocketAddr>,
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
        config.listen = listen;
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    let store = match config.store.kind {
        idemgate_gateway::config::StoreKind::Sqlite => format!(
            "the embedded SQLite store in {}",
            config.store.path.display()
        ),
        idemgate_gateway::config::StoreKind::Postgres => "PostgreSQL".to_owned(),
        idemgate_gateway::config::StoreKind::Redis => "Redis".to_owned(),
    };
    if args.config.is_none() {
        println!("idemgate on http://{addr} with {store} and one demo source (no --config given).");
        println!("Send it a webhook:");
        println!(
            "  curl -i http://{addr}/hooks/demo -H 'Authorization: Bearer demo-token-change-me' \\\n       -H 'Content-Type: application/json' -d '{{\"id\":\"evt_1\",\"amount\":42}}'"
        );
        println!("Send the same again: the answer says Idemgate-Outcome: duplicate.");
        println!("Look it up: idemgate lookup demo evt_1");
    } else {
        tracing::info!(%addr, sources = config.sources.len(), "idemgate listening with {store}");
    }
    idemgate_gateway::run(config, listener, shutdown_signal()).await?;
    Ok(())
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
