//! `archive`: the history archive at size. A PostgreSQL schema of the run's own gets `--rows`
//! history rows (two per event, claimed and completed, each with a 32-byte fingerprint, as the
//! gateway writes them) in a partition of a past month, over `--days` days; then:
//!
//! - export: `idemgate history export` (the CLI, release build, as users run it) of every day,
//!   timed: rows/s;
//! - size: the archive's bytes (every Parquet file and manifest) against the partition's
//!   (`pg_total_relation_size`: table, TOAST and indexes) for the same rows, per million rows;
//! - lookup: `--lookups` archived events (and as many absent ids) found through the archive's
//!   own reader (`Archive::lookup`: manifest, footer, one bloom filter, one row group per file),
//!   p50/p99.
//!
//! Targets: export >= 200 k rows/s; archive <= 1/5 of the database's bytes; a lookup under 1 s
//! p99.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// Export rows/s the target asks for.
const EXPORT_TARGET: f64 = 200_000.0;
/// The archive's bytes at most this share of the database's.
const SIZE_TARGET: f64 = 0.2;
/// A lookup's p99 under this.
const LOOKUP_TARGET: Duration = Duration::from_secs(1);

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    postgres: crate::pg::Postgres,
    /// History rows (two per event).
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    /// Days the rows spread over (in one month's partition: at most 28).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=28))]
    days: u64,
    /// Archived events looked up (and as many ids that are not there).
    #[arg(long, default_value_t = 200)]
    lookups: usize,
    /// The `idemgate` binary [default: the one beside this benchmark].
    #[arg(long)]
    idemgate: Option<PathBuf>,
    /// Keep the archive directory (its path is printed).
    #[arg(long)]
    keep: bool,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let bin = crate::gateway::idemgate_binary(args.idemgate.as_deref())?;
    let url = &args.postgres.url;
    let admin = crate::pg::admin(url).await?;
    let schema = format!("bench_archive_{}", std::process::id());
    let migrated = std::process::Command::new(&bin)
        .args(["migrate", "--postgres", url, "--schema", &schema])
        .output()?;
    if !migrated.status.success() {
        bail!(
            "idemgate migrate: {}",
            String::from_utf8_lossy(&migrated.stderr)
        );
    }
    let result = measure(&args, &bin, &admin, &schema).await;
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .ok();
    result
}

async fn measure(
    args: &Args,
    bin: &std::path::Path,
    admin: &tokio_postgres::Client,
    schema: &str,
) -> anyhow::Result<()> {
    let events = args.rows / 2;
    // Two months back: a closed month of its own.
    let row = admin
        .query_one(
            "SELECT 'history_' || to_char(m, '\"y\"YYYY\"m\"MM') AS name, \
                    floor(extract(epoch FROM m) * 1000)::bigint AS start_ms \
               FROM (SELECT date_trunc('month', now() AT TIME ZONE 'UTC' - interval '2 months') \
                            AT TIME ZONE 'UTC' AS m) x",
            &[],
        )
        .await?;
    let (partition, start): (String, i64) = (row.get("name"), row.get("start_ms"));
    admin
        .batch_execute(&format!(
            "CREATE TABLE {schema}.{partition} PARTITION OF {schema}.history
                 FOR VALUES FROM ('epoch'::timestamptz + {start} * interval '1 ms')
                            TO (('epoch'::timestamptz + {start} * interval '1 ms') + interval '1 month')"
        ))
        .await?;
    eprintln!(
        "filling {partition} with {} rows ({events} events over {} days)",
        events * 2,
        args.days
    );
    let filled = Instant::now();
    let span_ms = args.days * 86_400_000;
    const CHUNK: u64 = 500_000;
    let mut from = 0;
    while from < events {
        let to = (from + CHUNK).min(events);
        // Stripe-like ids (evt_ and 24 characters), one claimed and one completed row each,
        // 1% also a duplicate answered later; a fingerprint on each.
        admin
            .batch_execute(&format!(
                "INSERT INTO {schema}.history (source, event_id, outcome, processed, attempt, received_at, gap_ms, fingerprint)
                 SELECT 'stripe', 'evt_' || substr(md5(g::text), 1, 24), o, o = 'completed', 1,
                        'epoch'::timestamptz + ({start} + (g::bigint * 7919) % {span_ms}) * interval '1 ms'
                          + CASE o WHEN 'completed' THEN interval '180 ms' ELSE interval '0' END,
                        NULL,
                        decode(md5(g::text) || md5((g + 1)::text), 'hex')
                   FROM generate_series({from}, {} ) g, (VALUES ('claimed'), ('completed')) v(o)",
                to - 1
            ))
            .await
            .context("filling history")?;
        from = to;
        eprintln!("  {from} events");
    }
    admin
        .batch_execute(&format!("VACUUM ANALYZE {schema}.{partition}"))
        .await?;
    let db_bytes: i64 = admin
        .query_one(
            &format!("SELECT pg_total_relation_size('{schema}.{partition}') AS b"),
            &[],
        )
        .await?
        .get("b");
    eprintln!("filled in {:.0} s", filled.elapsed().as_secs_f64());

    let dir = tempfile::tempdir()?;
    let archive_dir = dir.path().join("archive");
    let to = format!("file://{}", archive_dir.display());
    let first = day_text(start);
    let last = day_text(start + span_ms as i64 - 1);
    let exported = Instant::now();
    let out = std::process::Command::new(bin)
        .args([
            "history",
            "export",
            "--postgres",
            &args.postgres.url,
            "--schema",
            schema,
            "--since",
            &first,
            "--until",
            &last,
            "--to",
            &to,
        ])
        .output()?;
    let export_secs = exported.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "idemgate history export: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rows = events * 2;
    let export_rate = rows as f64 / export_secs;
    let archive_bytes = dir_bytes(&archive_dir)?;

    let archive = idemgate_archive::Archive::open(&idemgate_archive::ArchiveConfig::at(&to))?;
    let source = idemgate_core::SourceName::new("stripe")?;
    // Events picked at random by PostgreSQL, among those exported.
    let ids: Vec<String> = admin
        .query(
            &format!(
                "SELECT event_id FROM {schema}.{partition} TABLESAMPLE SYSTEM (1) \
                 WHERE outcome = 'claimed' ORDER BY random() LIMIT $1"
            ),
            &[&(args.lookups as i64)],
        )
        .await?
        .iter()
        .map(|r| r.get("event_id"))
        .collect();
    let mut present = Vec::with_capacity(args.lookups);
    let mut absent = Vec::with_capacity(args.lookups);
    let mut files = 0;
    for (i, id) in ids.iter().enumerate() {
        let t = Instant::now();
        let found = archive.lookup(&source, id, None).await?;
        present.push(t.elapsed());
        if found.rows.len() != 2 {
            bail!("{id}: {} rows in the archive, 2 expected", found.rows.len());
        }
        files = found.files;
        let t = Instant::now();
        let none = archive
            .lookup(&source, &format!("evt_absent_{i:019}"), None)
            .await?;
        absent.push(t.elapsed());
        if !none.rows.is_empty() {
            bail!("an absent id was found");
        }
    }
    let (p50, p99) = percentiles(&mut present);
    let (a50, a99) = percentiles(&mut absent);
    let per_m = |b: f64| b / (rows as f64 / 1e6) / 1e6;
    println!(
        "\nHistory archive, {rows} rows ({events} events over {} days) in PostgreSQL partition {partition}:\n",
        args.days
    );
    println!("| measure | figure |\n|---|---|");
    println!(
        "| export (`idemgate history export`, release) | {rows} rows in {export_secs:.1} s: {export_rate:.0} rows/s |"
    );
    println!(
        "| database (table + indexes) | {:.1} MB, {:.1} MB per million rows |",
        db_bytes as f64 / 1e6,
        per_m(db_bytes as f64)
    );
    println!(
        "| archive (Parquet + manifests) | {:.1} MB, {:.1} MB per million rows ({:.3}x the database) |",
        archive_bytes as f64 / 1e6,
        per_m(archive_bytes as f64),
        archive_bytes as f64 / db_bytes as f64
    );
    println!(
        "| lookup of an archived event ({} days, {files} files read) | p50 {:.1} ms, p99 {:.1} ms |",
        args.days,
        ms(p50),
        ms(p99)
    );
    println!(
        "| lookup of an id not there | p50 {:.1} ms, p99 {:.1} ms |",
        ms(a50),
        ms(a99)
    );
    let mark = |ok: bool| if ok { "met" } else { "missed" };
    println!();
    println!(
        "export >= {EXPORT_TARGET:.0} rows/s: {export_rate:.0}: {}",
        mark(export_rate >= EXPORT_TARGET)
    );
    println!(
        "archive <= {SIZE_TARGET}x the database's bytes: {:.3}x: {}",
        archive_bytes as f64 / db_bytes as f64,
        mark((archive_bytes as f64) <= SIZE_TARGET * db_bytes as f64)
    );
    println!(
        "archived lookup p99 < {} ms: {:.1} ms: {}",
        LOOKUP_TARGET.as_millis(),
        ms(p99),
        mark(p99 < LOOKUP_TARGET)
    );
    if args.keep {
        let kept = dir.keep();
        println!("archive kept in {}", kept.display());
    }
    Ok(())
}

fn day_text(ms: i64) -> String {
    let t = std::time::SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64);
    humantime::format_rfc3339(t).to_string()[..10].to_owned()
}

fn dir_bytes(dir: &std::path::Path) -> anyhow::Result<u64> {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let m = e.metadata()?;
            if m.is_dir() {
                stack.push(e.path());
            } else {
                total += m.len();
            }
        }
    }
    Ok(total)
}

fn percentiles(v: &mut [Duration]) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
