//! `idemgate history export`: history days into the archive (`[history.archive]` or `--to`),
//! each day's files and rows printed as they are written, each day confirmed against the
//! store's count once its manifest is in.

use std::io::IsTerminal;

use clap::{Args, Subcommand};
use futures_util::StreamExt;
use idemgate_archive::{Archive, Day};
use idemgate_core::SourceName;

use crate::{StoreArgs, Usage, data, parse_source};

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    #[command(subcommand)]
    command: HistoryCommand,
}

#[derive(Debug, Subcommand)]
enum HistoryCommand {
    /// Export history into the archive: Parquet files per source and UTC day
    /// (`source=S/day=YYYY-MM-DD/part-...parquet` and a `_manifest.json`). Days the store's clock
    /// says are not over are left for later. A day exported again is overwritten whole, so an
    /// export that stopped half-way is simply run again.
    Export(ExportArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Only this source [default: every source].
    #[arg(long, value_parser = parse_source)]
    source: Option<SourceName>,
    /// The first day to export (YYYY-MM-DD, UTC).
    #[arg(long, value_parser = parse_day)]
    since: Day,
    /// The last day to export, included (YYYY-MM-DD, UTC).
    #[arg(long, value_parser = parse_day)]
    until: Day,
    /// The archive: file:///path or s3://bucket/prefix [default: the config's
    /// `[history.archive]` url; its other settings (endpoint, credentials) still apply].
    #[arg(long)]
    to: Option<String>,
    /// List the days and rows an export would write; write nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn parse_day(text: &str) -> Result<Day, String> {
    Day::parse(text)
}

pub(crate) async fn history(args: HistoryArgs) -> anyhow::Result<()> {
    match args.command {
        HistoryCommand::Export(args) => export(args).await,
    }
}

async fn export(args: ExportArgs) -> anyhow::Result<()> {
    if args.since > args.until {
        return Err(Usage(format!(
            "--since {} is after --until {}",
            args.since, args.until
        ))
        .into());
    }
    let config = data::config(&args.store, None)?;
    let settings = data::archive_config(&config, args.to.as_deref(), "--to")?;
    let archive = Archive::open(&settings).map_err(|e| Usage(e.to_string()))?;
    let (store, name) = data::open(&args.store, None).await?;
    let plan = idemgate_archive::plan(&store, args.source.as_ref(), args.since, args.until).await?;
    for d in &plan.open {
        eprintln!(
            "{} {}: {} rows left for later: the day is not over by the store's clock",
            d.source,
            Day::of(d.start),
            d.rows
        );
    }
    if plan.days.is_empty() {
        outln!(
            "nothing to export: {name} holds no history of {} from {} through {} in days that are over",
            args.source
                .as_ref()
                .map_or("any source".to_owned(), |s| format!("source {s}")),
            args.since,
            args.until
        );
        return Ok(());
    }
    if args.dry_run {
        for d in &plan.days {
            outln!(
                "{}/source={}/day={}: {} rows (dry run: nothing written)",
                archive.url(),
                d.source,
                Day::of(d.start),
                d.rows
            );
        }
        outln!(
            "would export {} rows in {} days from {name}",
            plan.rows(),
            plan.days.len()
        );
        return Ok(());
    }
    archive.probe().await?;
    let bar = progress(plan.rows());
    let started = std::time::Instant::now();
    let mut done = 0u64;
    // Two days at a time: one is read from the store while the other is encoded, so the
    // store's work and the encoding overlap (each day's files are its own).
    let progressed = std::sync::atomic::AtomicU64::new(0);
    let mut days = futures_util::stream::iter(plan.days.iter())
        .map(|d| {
            let (store, archive, bar, progressed) = (&store, &archive, &bar, &progressed);
            async move {
                let mut last = 0;
                let manifest = idemgate_archive::export_day(store, archive, d, |n| {
                    let total =
                        progressed.fetch_add(n - last, std::sync::atomic::Ordering::Relaxed);
                    bar.set_position(total + n - last);
                    last = n;
                })
                .await?;
                archive.confirm(&d.source, Day::of(d.start), d.rows).await?;
                Ok::<_, idemgate_archive::ArchiveError>((d, manifest))
            }
        })
        .buffer_unordered(2);
    while let Some(result) = days.next().await {
        let (d, manifest) = result?;
        let day = Day::of(d.start);
        done += manifest.rows;
        for f in &manifest.files {
            bar.suspend(|| {
                outln!(
                    "{}/source={}/day={day}/{}: {} rows, {} bytes",
                    archive.url().trim_end_matches('/'),
                    d.source,
                    f.name,
                    f.rows,
                    f.bytes
                );
            });
        }
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    outln!(
        "exported {done} rows in {} days from {name} to {} in {secs:.1} s ({:.0} rows/s)",
        plan.days.len(),
        archive.url(),
        done as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// A progress bar on a terminal; hidden otherwise.
fn progress(len: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} rows ({per_sec}, {eta})")
    {
        bar.set_style(style);
    }
    bar
}
