//! The commands that read or change the embedded store: `sweep`, `stats`, `lookup`.

use std::io::IsTerminal;
use std::num::NonZeroU32;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use idemgate_core::store::{ClaimStore, Stats};
use idemgate_core::sweep::{self, SweepOptions};
use idemgate_core::{EventId, Human, Key, SourceName, StoreStats, Timestamp};
use idemgate_sqlite::SqliteStore;
use serde_json::json;

use crate::Usage;

/// Opens the store, refusing to create one where none exists (a typo in --data-dir should not
/// produce an empty store that answers "nothing here").
fn open(dir: &Path) -> anyhow::Result<SqliteStore> {
    if !dir.join(idemgate_sqlite::DB_FILE).exists() {
        return Err(Usage(format!(
            "no idemgate store in {} (expected {}); pass --data-dir",
            dir.display(),
            dir.join(idemgate_sqlite::DB_FILE).display()
        ))
        .into());
    }
    SqliteStore::open(dir).with_context(|| format!("cannot open the store in {}", dir.display()))
}

pub(crate) async fn sweep(
    dir: &Path,
    batch: u32,
    pause: Duration,
    dry_run: bool,
) -> anyhow::Result<()> {
    let store = open(dir)?;
    let before = store.stats().await?;
    if dry_run {
        outln!(
            "would delete {} expired records; {} live records stay",
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
    let mut done = 0u64;
    let report = sweep::run(
        &store,
        SweepOptions { batch, pause },
        |d| async move {
            tokio::select! {
                () = tokio::time::sleep(d) => true,
                _ = tokio::signal::ctrl_c() => false,
            }
        },
        |rows| {
            done += rows;
            match &bar {
                Some(bar) => bar.set_position(done),
                None if rows > 0 => tracing::info!(rows, total = done, "swept a batch"),
                None => {}
            }
        },
    )
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

pub(crate) async fn stats(dir: &Path, json: bool) -> anyhow::Result<()> {
    let store = open(dir)?;
    let s = store.stats().await?;
    if json {
        outln!("{}", stats_json(&s));
        return Ok(());
    }
    let when = |t: Option<Timestamp>| t.map_or_else(|| "-".to_owned(), |t| t.to_string());
    outln!("store           {}", store.path().display());
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
    dir: &Path,
    source: SourceName,
    event_id: EventId,
    json: bool,
) -> anyhow::Result<()> {
    let store = open(dir)?;
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
