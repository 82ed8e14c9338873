//! The `idemgate` binary: parses arguments and calls the libraries.
//!
//! Usage errors (bad flags, durations, names) print one line and exit with code 2; failures while
//! running print the error chain and exit with code 1.

/// `println!` that ends the program quietly when stdout is closed (`idemgate providers | head`).
macro_rules! outln {
    () => { $crate::emit(format_args!("")) };
    ($($arg:tt)*) => { $crate::emit(format_args!($($arg)*)) };
}

mod advise;
mod check;
mod data;
mod history;
mod inbox;
mod plot;
mod send;
mod serve;
mod ttl;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use idemgate_core::{EventId, SourceName};

/// Exactly-once webhook and event processing.
#[derive(Debug, Parser)]
#[command(name = "idemgate", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway. Without --config: the embedded SQLite store in ./idemgate-data and one
    /// demo source.
    Serve(serve::ServeArgs),
    /// Check a configuration without serving: each source's TTL, verifier, target and mode; the
    /// store and the Redis tier reached (nothing created); every problem listed (exit 2).
    Check(check::CheckArgs),
    /// Send a source a delivery signed as its sender signs (with its first secret), and show
    /// what the gateway answered and forwarded.
    Send(send::SendArgs),
    /// Print a shell completion script: `idemgate completions bash > /etc/bash_completion.d/idemgate`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Compute a source's dedup TTL: retry window + queue lag + clock skew + replay margin.
    Ttl(ttl::TtlArgs),
    /// List the provider presets: retry windows, recommended TTLs, keys, signatures, sources.
    Providers {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create or upgrade a store's schema (PostgreSQL: under an advisory lock, all or nothing).
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        new_schema: NewSchemaArgs,
    },
    /// Delete expired dedup records in bounded batches (PostgreSQL: and create and drop
    /// partitions).
    Sweep {
        #[command(flatten)]
        store: StoreArgs,
        /// Records per batch (one short transaction each).
        #[arg(long, default_value = "5000", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        batch: u32,
        /// Pause between batches.
        #[arg(long, default_value = "50ms", value_parser = parse_duration)]
        pause: Duration,
        /// Count what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Show what the store holds: live and expired records, oldest record, per source, size.
    Stats {
        #[command(flatten)]
        store: StoreArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Judge each source's TTL by its history: gaps between first receipt and each repeat, late
    /// duplicates, rows live and projected, and a recommended TTL with a verdict.
    Advise(advise::AdviseArgs),
    /// Inbox mode: each source's queue: pending, in flight, dead, and the oldest pending age.
    Inbox(inbox::InboxArgs),
    /// Inbox mode: list the dead letters (id, attempts, last error, age).
    DeadLetters(inbox::DeadLettersArgs),
    /// Inbox mode: move dead letters back to the queue with a fresh attempt budget, each
    /// recorded in history with its reason.
    Replay(inbox::ReplayArgs),
    /// History beyond the store: `history export` writes it into the archive.
    History(history::HistoryArgs),
    /// Show the dedup record and the history of one event; an event the store has nothing of
    /// is looked for in the history archive (`[history.archive]` or `--archive`).
    Lookup {
        #[command(flatten)]
        store: StoreArgs,
        /// The source name.
        #[arg(value_parser = parse_source)]
        source: SourceName,
        /// The event id.
        #[arg(value_parser = parse_event_id, required_unless_present = "idempotency_key")]
        event_id: Option<EventId>,
        /// Look up a request to an `[[api]]` (SOURCE is the api's name) by the Idempotency-Key
        /// its client sent, instead of an event id.
        #[arg(long, conflicts_with = "event_id")]
        idempotency_key: Option<String>,
        /// With --idempotency-key: the route it was sent to ("POST /payments") [default: each
        /// of the api's routes in --config].
        #[arg(long, requires = "idempotency_key")]
        route: Option<String>,
        /// With --idempotency-key: the value of the header that names the key's principal (the
        /// whole `Authorization` value for `principal = "bearer"`) [default: none].
        #[arg(long, requires = "idempotency_key")]
        principal: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The history archive to search when the store has nothing of the event:
        /// file:///path or s3://bucket/prefix [default: the config's `[history.archive]`].
        #[arg(long)]
        archive: Option<String>,
    },
}

/// Which store a command works on: the embedded SQLite store (default), PostgreSQL, or the store
/// of a config file.
///
/// An explicit flag that names another store than `--config` does is an error; the environment
/// (`IDEMGATE_CONFIG`, then `IDEMGATE_DATA_DIR`) only fills in when no flag names a store.
#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// The data directory of the embedded SQLite store [default: IDEMGATE_DATA_DIR, or
    /// ./idemgate-data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Work on PostgreSQL at this URL instead (postgres://user@host:port/db).
    #[arg(long, conflicts_with = "data_dir")]
    pub postgres: Option<String>,
    /// The PostgreSQL schema holding idemgate's tables [default: idemgate, or the config's].
    #[arg(long)]
    pub schema: Option<String>,
    /// Take the store from this config file (its `[store]` table) [default: IDEMGATE_CONFIG].
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// How `migrate` creates a new PostgreSQL schema (every other command reads it off the schema).
#[derive(Debug, Args)]
pub(crate) struct NewSchemaArgs {
    /// The expiry mode a new PostgreSQL schema is created with.
    #[arg(long, value_enum, default_value = "batched")]
    pub expiry: data::ExpiryArg,
    /// The partition width of a new partitioned PostgreSQL schema.
    #[arg(long, default_value = "1d", value_parser = parse_duration)]
    pub partition_width: Duration,
}

impl Default for NewSchemaArgs {
    fn default() -> Self {
        Self {
            expiry: data::ExpiryArg::Batched,
            partition_width: Duration::from_secs(86_400),
        }
    }
}

impl StoreArgs {
    /// The config file: `--config`, or `IDEMGATE_CONFIG` when no flag names a store.
    pub(crate) fn config_file(&self) -> Option<PathBuf> {
        self.config.clone().or_else(|| {
            (self.postgres.is_none() && self.data_dir.is_none())
                .then(|| std::env::var_os("IDEMGATE_CONFIG").map(PathBuf::from))
                .flatten()
        })
    }
}

/// Parses a human duration (`90s`, `10m`, `3d`, `1h 30m`).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}; expected a number and a unit, such as 90s, 10m, 4h or 3d"))
}

pub(crate) fn parse_source(text: &str) -> Result<SourceName, String> {
    SourceName::new(text).map_err(|e| e.to_string())
}

pub(crate) fn parse_event_id(text: &str) -> Result<EventId, String> {
    EventId::new(text).map_err(|e| e.to_string())
}

pub(crate) fn emit(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// A usage error found after parsing: one line, exit code 2.
#[derive(Debug)]
pub(crate) struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // The error and what it names, on one line ("... not provided: --source <SOURCE>"),
            // without clap's usage block.
            let text = e.render().to_string();
            let line = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ");
            let line = if line.is_empty() {
                "invalid arguments".to_owned()
            } else {
                line
            };
            eprintln!("{line} (see idemgate --help)");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(log_filter(std::env::var("IDEMGATE_LOG").ok()))
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<Usage>().is_some() => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// `IDEMGATE_LOG` (`info` when unset or unreadable), with the broker and object-store clients'
/// own chatter (every connect, drain, close and retry at info) at `warn` unless it names them:
/// the gateway says what matters about a broker or an archive itself.
fn log_filter(spec: Option<String>) -> tracing_subscriber::EnvFilter {
    let mut spec = spec.unwrap_or_else(|| "info".to_owned());
    for client in ["async_nats", "lapin", "object_store"] {
        if !spec.contains(client) {
            spec.push_str(&format!(",{client}=warn"));
        }
    }
    tracing_subscriber::EnvFilter::try_new(&spec).unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,async_nats=warn,lapin=warn,object_store=warn")
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Ttl(args) => ttl::ttl(&args),
        Command::Providers { json } => {
            ttl::providers(json);
            Ok(())
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "idemgate",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        command => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                match command {
                    Command::Serve(args) => serve::serve(args).await,
                    Command::Send(args) => send::send(args).await,
                    Command::Check(args) => check::check(args).await,
                    Command::Migrate { store, new_schema } => {
                        data::migrate(&store, &new_schema).await
                    }
                    Command::Advise(args) => advise::advise(args).await,
                    Command::Sweep {
                        store,
                        batch,
                        pause,
                        dry_run,
                    } => data::sweep(&store, batch, pause, dry_run).await,
                    Command::Stats { store, json } => data::stats(&store, json).await,
                    Command::Inbox(args) => inbox::inbox(&args).await,
                    Command::DeadLetters(args) => inbox::dead_letters(&args).await,
                    Command::Replay(args) => inbox::replay(&args).await,
                    Command::History(args) => history::history(args).await,
                    Command::Lookup {
                        store,
                        source,
                        event_id,
                        idempotency_key,
                        route,
                        principal,
                        json,
                        archive,
                    } => {
                        let event_id = match (event_id, idempotency_key) {
                            (Some(id), _) => id,
                            (None, Some(key)) => {
                                let keyed = data::Keyed {
                                    key: &key,
                                    route: route.as_deref(),
                                    principal: principal.as_deref(),
                                };
                                data::keyed_event_id(&store, &source, &keyed).await?
                            }
                            (None, None) => unreachable!("clap requires one"),
                        };
                        data::lookup(&store, source, event_id, json, archive.as_deref()).await
                    }
                    Command::Ttl(_) | Command::Providers { .. } | Command::Completions { .. } => {
                        unreachable!("handled above")
                    }
                }
            })
        }
    }
}
