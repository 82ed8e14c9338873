//! `idemgate-bench`: load generation and side-by-side comparisons.
//!
//! Each scenario prints a markdown table and cleans up what it creates. Databases come from flags
//! or `IDEMGATE_TEST_POSTGRES`.

mod chart;
mod claims;
mod gateway;
mod report;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "idemgate-bench", about)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Durable claims/s and p50/p99/p999 at 1, 16 and 64 callers: idemgate-sqlite,
    /// idemgate-postgres (batched and partitioned) and the plain statement, same run.
    Claims(claims::Args),
    /// Signed Stripe deliveries (new and duplicate) against a running `idemgate serve`, beside the
    /// raw claim throughput of the same store.
    Gateway(gateway::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        match cli.scenario {
            Scenario::Gateway(args) => gateway::run(args).await,
            Scenario::Claims(args) => claims::run(args).await,
        }
    })
}
