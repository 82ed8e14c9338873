//! The commands that read or change a store: `migrate`, `sweep`, `stats`, `lookup`.

use std::io::IsTerminal;
use std::num::NonZeroU32;
use std::time::Duration;

use anyhow::Context;
use idemgate_core::store::{ClaimStore, Stats};
use idemgate_core::sweep::SweepOptions;
use idemgate_core::{EventId, Human, Key, SourceName, StoreStats, Timestamp};
use idemgate_gateway::config::{ExpiryMode, StoreKind};
use idemgate_gateway::{AnyStore, Config};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{StoreArgs, Usage};

/// A PostgreSQL schema's expiry mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExpiryArg {
    Batched,
    Partitioned,
}

/// The store settings the flags describe, as a gateway config.
fn config(args: &StoreArgs, sweep: Option<(u32, Duration)>) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(Some(path), "").map_err(|e| Usage(e.to_string()))?,
        None => Config::from_toml("").map_err(|e| Usage(e.to_string()))?,
    };
    match (&args.postgres, &args.data_dir) {
        // A config file's store, unless a flag names another.
        (None, None) if args.config.is_some() => {}
        (Some(url), _) => {
            config.store.kind = StoreKind::Postgres;
            config.store.url = Some(url.clone());
            let pg = &mut config.store.postgres;
            pg.schema = args.schema.clone();
            pg.pool_size = 2;
            pg.expiry = match args.expiry {
                ExpiryArg::Batched => ExpiryMode::Batched,
                ExpiryArg::Partitioned => ExpiryMode::Partitioned,
            };
            pg.partition_width = args.partition_width;
            if let Some((batch, pause)) = sweep {
                pg.sweep_batch = batch;
                pg.sweep_pause = pause;
            }
        }
        (None, dir) => {
            config.store.kind = StoreKind::Sqlite;
            config.store.path = dir.clone().unwrap_or_else(|| "./idemgate-data".into());
        }
    }
    Ok(config)
}

/// Opens the store the flags name. An SQLite directory without a store is refused (a typo in
/// --data-dir should not produce an empty store that answers "nothing here").
pub(crate) async fn open(
    args: &StoreArgs,
    sweep: Option<(u32, Duration)>,
) -> anyhow::Result<(AnyStore, String)> {
    let config = config(args, sweep)?;
    let name = describe(&config);
    if config.store.kind == StoreKind::Sqlite {
        let db = config.store.path.join(idemgate_sqlite::DB_FILE);
        if !db.exists() {
            return Err(Usage(format!(
                "no idemgate store in {} (expected {}); pass --data-dir, --postgres or --config",
                config.store.path.display(),
                db.display()
            ))
            .into());
        }
    }
    let store = AnyStore::open(&config)
        .await
        .with_context(|| format!("cannot open {name}"))?;
    Ok((store, name))
}

fn describe(config: &Config) -> String {
    match config.store.kind {
        StoreKind::Sqlite => format!("the SQLite store in {}", config.store.path.display()),
        StoreKind::Postgres => format!("PostgreSQL schema {:?}", config.store.postgres.schema),
        StoreKind::Redis => "the Redis store".to_owned(),
    }
}

pub(crate) async fn migrate(args: &StoreArgs) -> anyhow::Result<()> {
    let config = config(args, None)?;
    let name = describe(&config);
    match config.store.kind {
        StoreKind::Sqlite => {
            let store = idemgate_sqlite::SqliteStore::open(&config.store.path)
                .with_context(|| format!("cannot migrate {name}"))?;
            outln!(
                "{name} is at the current schema ({})",
                store.path().display()
            );
        }
        StoreKind::Postgres => {
            let report = idemgate_postgres::migrate(&idemgate_gateway::store::pg_config(&config))
                .await
                .with_context(|| format!("cannot migrate {name}"))?;
            if report.applied.is_empty() {
                outln!("{name} is already at schema version {}", report.version);
            } else {
                outln!(
                    "{name}: applied migrations {:?}; now at schema version {}",
                    report.applied,
                    report.version
                );
            }
        }
        StoreKind::Redis => outln!("{name} has no schema to migrate"),
    }
    Ok(())
}

pub(crate) async fn sweep(
    args: &StoreArgs,
    batch: u32,
    pause: Duration,
    dry_run: bool,
) -> anyhow::Result<()> {
    let (store, name) = open(args, Some((batch, pause))).await?;
    let before = store.stats().await?;
    if dry_run {
        outln!(
            "would delete {} expired records from {name}; {} live records stay",
            before.expired,
            before.live
        );
        return Ok(());
    }
    let batch = NonZeroU32::new(batch).context("--batch must be at least 1")?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(before.expired);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "sweeping {bar:40} {pos}/{len} expired records, {per_sec}, eta {eta}",
            )
            .expect("valid template"),
        );
        bar
    });
    let cancel = CancellationToken::new();
    tokio::spawn({
        let cancel = cancel.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
            }
        }
    });
    let mut done = 0u64;
    let report = store
        .sweep_run(SweepOptions { batch, pause }, &cancel, |rows| {
            done += rows;
            match &bar {
                Some(bar) => bar.set_position(done),
                None if rows > 0 => tracing::info!(rows, total = done, "swept a batch"),
                None => {}
            }
        })
        .await?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    outln!(
        "deleted {} expired records in {} batches in {:.1?}{}",
        report.rows,
        report.batches,
        report.elapsed,
        if report.cancelled {
            " (interrupted)"
        } else {
            ""
        }
    );
    Ok(())
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn stats_json(s: &StoreStats) -> serde_json::Value {
    json!({
        "live": s.live,
        "expired_unswept": s.expired,
        "oldest_first_seen": s.oldest.map(|t| t.to_string()),
        "history_rows": s.history_rows,
        "size_bytes": s.size_bytes,
        "sources": s.per_source.iter().map(|p| json!({
            "source": p.source.as_str(),
            "live": p.live,
            "expired_unswept": p.expired,
            "oldest_first_seen": p.oldest.map(|t| t.to_string()),
        })).collect::<Vec<_>>(),
    })
}

pub(crate) async fn stats(args: &StoreArgs, json: bool) -> anyhow::Result<()> {
    let (store, name) = open(args, None).await?;
    let s = store.stats().await?;
    if json {
        outln!("{}", stats_json(&s));
        return Ok(());
    }
    let when = |t: Option<Timestamp>| t.map_or_else(|| "-".to_owned(), |t| t.to_string());
    outln!("store           {name}");
    outln!(
        "size            {}",
        s.size_bytes.map_or_else(|| "-".into(), bytes)
    );
    outln!("live records    {}", s.live);
    outln!("expired records {} (not yet swept)", s.expired);
    outln!("oldest record   {}", when(s.oldest));
    outln!("history rows    {}", s.history_rows);
    if !s.per_source.is_empty() {
        outln!();
        outln!("{:<32} {:>12} {:>12}  OLDEST", "SOURCE", "LIVE", "EXPIRED");
        for p in &s.per_source {
            outln!(
                "{:<32} {:>12} {:>12}  {}",
                p.source,
                p.live,
                p.expired,
                when(p.oldest)
            );
        }
    }
    Ok(())
}

pub(crate) async fn lookup(
    args: &StoreArgs,
    source: SourceName,
    event_id: EventId,
    json: bool,
) -> anyhow::Result<()> {
    let (store, _) = open(args, None).await?;
    let view = store.lookup(&Key::new(source, event_id)).await?;
    if json {
        outln!("{}", idemgate_gateway::api::view_json(&view));
        return Ok(());
    }
    outln!("event {}", view.key);
    match &view.record {
        Some(r) => {
            outln!("  record     {} (attempt {})", r.state, r.attempt);
            outln!("  first seen {}", r.first_seen);
            if let Some(lease) = r.lease_until {
                outln!("  lease until {lease}");
            }
            outln!("  expires at {}", r.expires_at);
        }
        None => outln!("  record     none live (never claimed, released, or expired)"),
    }
    if view.history.is_empty() {
        outln!("  history    none: idemgate never received this event");
    } else {
        outln!("  history");
        for h in &view.history {
            let attempt = h
                .attempt
                .map(|a| format!(" attempt {a}"))
                .unwrap_or_default();
            let gap = h
                .gap
                .map(|g| format!(", {} after first receipt", Human(g)))
                .unwrap_or_default();
            outln!("    {}  {}{attempt}{gap}", h.at, h.outcome);
        }
    }
    Ok(())
}
