//! `idemgate-bench`: load generation and side-by-side comparisons.
//!
//! Each scenario prints a markdown table, writes an SVG chart to `bench/results/` and cleans up
//! what it creates. Databases come from flags or `IDEMGATE_TEST_POSTGRES`. Progress goes to stderr:
//! bars on a terminal, plain lines otherwise.
//!
//! # Layout
//!
//! - `claims`, `growth`, `cleanup`, `gateway`, `inbox`, `peers`, `sidecar`: one module per
//!   scenario, each with its `Args`. `tutorial/` (beside `src/`) is the Node receiver the
//!   `gateway` scenario runs; `sidecar` runs `tests/sidecar/express_proxy.mjs`.
//!   `destinations` is `gateway --destination`: the gateway publishing into JetStream and
//!   RabbitMQ beside HTTP to nginx.
//! - `pg`: the PostgreSQL helpers the scenarios share; `nats`: JetStream through async-nats
//!   (streams, publishes with `Nats-Msg-Id`, messages counted per id); `progress`: bars or lines
//!   on stderr.
//! - `report`: latency summaries, histograms, per-second ticks, markdown tables. Charts are
//!   drawn by `idemgate-chart`.

mod archive;
mod claims;
mod cleanup;
mod destinations;
mod gateway;
mod growth;
mod inbox;
mod nats;
mod peers;
mod pg;
mod progress;
mod report;
mod sidecar;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "idemgate-bench", about)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Durable claims/s and p50/p99/p999 at 1, 16 and 64 callers (or --callers): idemgate-sqlite,
    /// idemgate-postgres (batched and partitioned), the plain statement and a ceiling of 256-row
    /// inserts of a claim's rows, same run.
    Claims(claims::Args),
    /// The same PostgreSQL claim load while arrivals go from 0 to N, TTL-bounded (swept) against
    /// never deleted: claims/s and p99 per step, dedup table and index size.
    Growth(growth::Args),
    /// A table holding N expired rows under a steady claim load, cleared by one unbounded DELETE,
    /// by idemgate's batched sweeper and by partition drop: p99 and throughput against idle,
    /// longest lock wait, WAL written, dead tuples left.
    Cleanup(cleanup::Args),
    /// Signed Stripe deliveries (new and duplicate) against a running `idemgate serve` and the
    /// tutorial receiver (Express + stripe-node + node-postgres, `tutorial/`), same run, beside
    /// the raw claim+complete rate of the same store; checks each forwarded every event once.
    Gateway(gateway::Args),
    /// Inbox mode against forward mode with a slow downstream: what a sender waits for, then a
    /// burst acknowledged beside the raw claim rate and drained at the downstream's pace.
    Inbox(inbox::Args),
    /// idemgate beside NATS JetStream's publish dedup (Nats-Msg-Id into a stream with a duplicate
    /// window on file storage): idemgate-postgres (also with synchronous_commit off) and the
    /// idemgate Redis store marking on receipt, claims/s and p50/p99/p999 at 16 and 64 callers,
    /// same run.
    Peers(peers::Args),
    /// The history archive at size: N history rows in a past month's PostgreSQL partition,
    /// exported with `idemgate history export` (rows/s), the archive's bytes against the
    /// database's, and lookups of archived events through the archive (p50/p99).
    Archive(archive::Args),
    /// The Idempotency-Key sidecar (`[[api]]` of `idemgate serve`, SQLite) beside a direct call of
    /// the same upstream and beside express-idempotency in front of it, same run, 64 connections:
    /// req/s, p50/p99/p999 and the overhead over the direct call; concurrent copies of one key
    /// through each proxy, and the keys the upstream created more than once.
    Sidecar(sidecar::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        match cli.scenario {
            Scenario::Gateway(args) if !args.destination.is_empty() => {
                destinations::run(&args, &gateway::binary(&args)?).await
            }
            Scenario::Gateway(args) => gateway::run(args).await,
            Scenario::Inbox(args) => inbox::run(args).await,
            Scenario::Claims(args) => claims::run(args).await,
            Scenario::Growth(args) => growth::run(args).await,
            Scenario::Cleanup(args) => cleanup::run(args).await,
            Scenario::Peers(args) => peers::run(args).await,
            Scenario::Archive(args) => archive::run(args).await,
            Scenario::Sidecar(args) => sidecar::run(args).await,
        }
    })
}
