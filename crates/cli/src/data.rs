//! The commands that read or change a store: `migrate`, `sweep`, `stats`, `lookup`.

use std::io::IsTerminal;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use anyhow::Context;
use idemgate::AnyStore;
use idemgate::config::{ExpiryMode, StoreKind};
use idemgate_core::store::{ClaimStore, HistoryQuery, Stats, Sweep};
use idemgate_core::sweep::SweepOptions;
use idemgate_core::{EventId, Human, Key, SourceName, StoreStats, Timestamp};
use idemgate_gateway::Config;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{NewSchemaArgs, StoreArgs, Usage};

/// A PostgreSQL schema's expiry mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExpiryArg {
    Batched,
    Partitioned,
}

/// The store settings the flags describe, as a gateway config.
pub(crate) fn config(args: &StoreArgs, sweep: Option<(u32, Duration)>) -> anyhow::Result<Config> {
    config_with(args, sweep, &NewSchemaArgs::default())
}

/// As [`config`], with how `migrate` creates a new PostgreSQL schema.
pub(crate) fn config_with(
    args: &StoreArgs,
    sweep: Option<(u32, Duration)>,
    new_schema: &NewSchemaArgs,
) -> anyhow::Result<Config> {
    let file = args.config_file();
    let mut config = match &file {
        Some(path) => Config::load(Some(path), "").map_err(|e| Usage(e.to_string()))?,
        None => Config::from_toml("").map_err(|e| Usage(e.to_string()))?,
    };
    if let Some(path) = args.config.as_ref().filter(|p| Config::names_store(p)) {
        // A flag beside a --config that names its store must name the same one, or it is a
        // mistake.
        let disagree = |flag: String| {
            Usage(format!(
                "{flag} and --config {} name different stores ({} holds {}); pass one of them",
                path.display(),
                path.display(),
                describe(&config)
            ))
        };
        if let Some(url) = &args.postgres
            && (config.store.kind != StoreKind::Postgres
                || config.store.url.as_deref() != Some(url.as_str()))
        {
            return Err(disagree(format!("--postgres {url}")).into());
        }
        if let Some(dir) = &args.data_dir
            && (config.store.kind != StoreKind::Sqlite || config.store.path != *dir)
        {
            return Err(disagree(format!("--data-dir {}", dir.display())).into());
        }
        if let Some(schema) = &args.schema
            && (config.store.kind != StoreKind::Postgres || config.store.postgres.schema != *schema)
        {
            return Err(disagree(format!("--schema {schema}")).into());
        }
    } else if let Some(url) = &args.postgres {
        // Only the flags name a store (a --config here is for its sources).
        config.store.kind = StoreKind::Postgres;
        config.store.url = Some(url.clone());
        config.store.postgres.schema = args.schema.clone().unwrap_or_else(|| "idemgate".into());
    } else if args.data_dir.is_some() || file.is_none() {
        if args.schema.is_some() {
            return Err(Usage(
                "--schema needs --postgres (or --config with a PostgreSQL store)".into(),
            )
            .into());
        }
        config.store.kind = StoreKind::Sqlite;
        config.store.path = args
            .data_dir
            .clone()
            .or_else(|| std::env::var_os("IDEMGATE_DATA_DIR").map(Into::into))
            .unwrap_or_else(|| "./idemgate-data".into());
    }
    if config.store.kind == StoreKind::Postgres {
        let pg = &mut config.store.postgres;
        pg.pool_size = NonZeroUsize::new(2).expect("non-zero");
        // A config file says how its schema is created; the flags say it for --postgres.
        if file.is_none() {
            pg.expiry = match new_schema.expiry {
                ExpiryArg::Batched => ExpiryMode::Batched,
                ExpiryArg::Partitioned => ExpiryMode::Partitioned,
            };
            pg.partition_width = new_schema.partition_width;
        }
        if let Some((batch, pause)) = sweep {
            pg.sweep_batch = NonZeroU32::new(batch).unwrap_or(NonZeroU32::MIN);
            pg.sweep_pause = pause;
        }
    }
    Ok(config)
}

/// Opens the store the flags name, as it is: nothing is created or migrated (a typo in
/// --data-dir or --schema must not produce an empty store that answers "nothing here"). Only
/// `migrate` and `serve` create or upgrade a schema.
pub(crate) async fn open(
    args: &StoreArgs,
    sweep: Option<(u32, Duration)>,
) -> anyhow::Result<(AnyStore, String)> {
    let config = config(args, sweep)?;
    let name = describe(&config);
    let store = AnyStore::open_existing(&config.store)
        .await
        .map_err(|e| missing_is_usage(e, &name))?;
    Ok((store, name))
}

/// A store that is not there (or needs `idemgate migrate`) is a usage error: exit 2, one line.
fn missing_is_usage(e: idemgate::OpenError, name: &str) -> anyhow::Error {
    match missing(&e) {
        Some(why) => Usage(why).into(),
        None => anyhow::Error::new(e).context(format!("cannot open {name}")),
    }
}

/// What is missing, when `e` says the store or its schema is not there or too old.
pub(crate) fn missing(e: &idemgate::OpenError) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(pg) = s.downcast_ref::<idemgate_postgres::PgError>()
            && matches!(
                pg,
                idemgate_postgres::PgError::NoSchema { .. }
                    | idemgate_postgres::PgError::OlderSchema { .. }
            )
        {
            return Some(pg.to_string());
        }
        if let Some(store) = s.downcast_ref::<idemgate_core::StoreError>()
            && matches!(
                store,
                idemgate_core::StoreError::NoStore { .. }
                    | idemgate_core::StoreError::OlderSchema { .. }
            )
        {
            return Some(store.to_string());
        }
        source = s.source();
    }
    None
}

pub(crate) fn describe(config: &Config) -> String {
    match config.store.kind {
        StoreKind::Sqlite => format!("the SQLite store in {}", config.store.path.display()),
        StoreKind::Postgres => format!("PostgreSQL schema {:?}", config.store.postgres.schema),
        StoreKind::Redis => "the Redis store".to_owned(),
    }
}

pub(crate) async fn migrate(args: &StoreArgs, new_schema: &NewSchemaArgs) -> anyhow::Result<()> {
    let config = config_with(args, None, new_schema)?;
    let name = describe(&config);
    let migrated = idemgate::migrate(&config.store)
        .await
        .with_context(|| format!("cannot migrate {name}"))?;
    match migrated {
        idemgate::Migrated::Sqlite { path } => {
            outln!("{name} is at the current schema ({})", path.display());
        }
        idemgate::Migrated::Postgres { applied, version } if applied.is_empty() => {
            outln!("{name} is already at schema version {version}");
        }
        idemgate::Migrated::Postgres { applied, version } => {
            outln!("{name}: applied migrations {applied:?}; now at schema version {version}")
        }
        idemgate::Migrated::Redis => outln!("{name} has no schema to migrate"),
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
    if idemgate_core::Capabilities::sweep(&store).is_none() {
        outln!("{name} expires its records by itself: nothing to sweep");
        return Ok(());
    }
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
        .sweep_run(
            // Adaptive pacing has no claims to give way to in this process: full speed.
            SweepOptions {
                batch,
                pause,
                ..SweepOptions::default()
            },
            idemgate_core::sweep::pause_or_cancel(&cancel),
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
        "deleted {} in {} in {:.1?}{}",
        idemgate_chart::count(report.rows, "expired record", "expired records"),
        idemgate_chart::count(report.batches, "batch", "batches"),
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

/// A request to an `[[api]]`, as `lookup --idempotency-key` names it.
pub(crate) struct Keyed<'a> {
    pub(crate) key: &'a str,
    pub(crate) route: Option<&'a str>,
    pub(crate) principal: Option<&'a str>,
}

/// The event id a keyed request was claimed under: its key within its scope (principal, route),
/// for the route given or, found in the store, for one of the api's routes.
pub(crate) async fn keyed_event_id(
    args: &StoreArgs,
    api: &SourceName,
    keyed: &Keyed<'_>,
) -> anyhow::Result<EventId> {
    use idemgate::idempotency_key::{IdempotencyKey, Principal, Route, request::event_id};
    let key: IdempotencyKey =
        keyed
            .key
            .parse()
            .map_err(|e: idemgate::idempotency_key::KeyProblem| {
                Usage(format!("--idempotency-key: {e}"))
            })?;
    let principal = keyed
        .principal
        .map_or_else(String::new, |p| Principal::digest(p.as_bytes()));
    let routes: Vec<String> = match keyed.route {
        Some(route) => vec![route.to_owned()],
        None => {
            let config = config(args, None)?;
            let found = config.apis.iter().find(|a| a.name == api.as_str()).ok_or_else(|| {
                Usage(format!(
                    "no [[api]] named {api:?} in the config: give --config FILE, or the route with --route \"POST /payments\""
                ))
            })?;
            found.routes.clone()
        }
    };
    let mut ids = Vec::new();
    for route in &routes {
        let route: Route = route
            .parse()
            .map_err(|e: idemgate::idempotency_key::RouteProblem| Usage(format!("--route: {e}")))?;
        ids.push(EventId::new(event_id(&principal, &route, &key))?);
    }
    if ids.len() > 1 {
        let (store, _) = open(args, None).await?;
        for id in &ids {
            let view = store.lookup(&Key::new(api.clone(), id.clone())).await?;
            if view.record.is_some() || !view.history.is_empty() {
                return Ok(id.clone());
            }
        }
    }
    Ok(ids.swap_remove(0))
}

pub(crate) async fn lookup(
    args: &StoreArgs,
    source: SourceName,
    event_id: EventId,
    json: bool,
    archive: Option<&str>,
) -> anyhow::Result<()> {
    let (store, name) = open(args, None).await?;
    let key = Key::new(source.clone(), event_id);
    let mut view = store.lookup(&key).await?;
    let queued = store.queue_of(&key).await?;
    // Nothing in the store: its history may have been archived and dropped.
    let mut found_in = "store";
    let mut archived = None;
    if view.record.is_none() && view.history.is_empty() {
        let config = config(args, None)?;
        if archive.is_some() || config.history.archive.is_some() {
            let settings = archive_config(&config, archive, "--archive")?;
            let opened =
                idemgate_archive::Archive::open(&settings).map_err(|e| Usage(e.to_string()))?;
            let found = opened.lookup(&source, key.event_id.as_str(), None).await?;
            if !found.rows.is_empty() {
                view.history = found.rows.iter().filter_map(|r| r.entry()).collect();
                found_in = "archive";
            }
            archived = Some((opened.url().to_owned(), found));
        }
    }
    // An event nobody ever saw: is the source itself unknown here (a typo, another store)?
    let known = view.record.is_some()
        || !view.history.is_empty()
        || store.has_source(&source).await?
        || archived.as_ref().is_some_and(|(_, f)| f.days > 0);
    let report = idemgate::EventReport::new(&view, &queued);
    if json {
        let mut doc = json!(report);
        doc["source_known"] = json!(known);
        doc["found_in"] = json!(if view.history.is_empty() && view.record.is_none() {
            "nowhere"
        } else {
            found_in
        });
        if let Some((url, found)) = &archived {
            doc["archive"] = json!({
                "url": url,
                "rows": found.rows.len(),
                "days_read": found.days,
                "files_read": found.files,
                "row_groups_read": found.groups,
            });
        }
        outln!("{doc}");
        return Ok(());
    }
    if let Some((url, found)) = &archived {
        if found.rows.is_empty() {
            outln!(
                "not in {name}, nor in the archive {url} ({} days of source {source} searched)",
                found.days
            );
        } else {
            outln!(
                "from the archive {url}: {name} holds nothing of this event any more ({} rows found, {} days searched)",
                found.rows.len(),
                found.days
            );
        }
    }
    if !known {
        return Err(Usage(format!(
            "no source {:?} in {name}: nothing was ever received for it (check the name, or pass the store's --data-dir, --postgres or --config)",
            source.as_str()
        ))
        .into());
    }
    outln!("event {}", view.key);
    match &view.record {
        Some(r) => {
            let what = if report.inbox.is_some() {
                " (queued on receipt: every later delivery is a duplicate)"
            } else {
                ""
            };
            outln!("  record     {} (attempt {}){what}", r.state, r.attempt);
            outln!("  first seen {}", r.first_seen);
            if let Some(lease) = r.lease_until {
                outln!("  lease until {lease}");
            }
            outln!("  expires at {}", r.expires_at);
            match &r.result {
                idemgate::RecordResult::None => {}
                idemgate::RecordResult::Stored(kept) => outln!(
                    "  response   {} kept ({} bytes), given back to every retry",
                    kept.status,
                    kept.size()
                ),
                idemgate::RecordResult::Withheld { size } => outln!(
                    "  response   not kept: {size} bytes, over the limit (duplicates hear only its size)"
                ),
            }
        }
        None => outln!("  record     none live (never claimed, released, or expired)"),
    }
    match (&report.inbox, &report.processed_at) {
        (Some(_), Some(at)) => outln!("  processed  {at} (delivered from the inbox)"),
        (Some(_), None) => outln!("  processed  not yet: the downstream has not taken it"),
        (None, Some(at)) => outln!("  processed  {at}"),
        (None, None) => {}
    }
    if let Some(inbox) = &report.inbox {
        outln!("  inbox      {}", inbox.state);
        if let Some(at) = &inbox.queued_at {
            outln!("    queued        {at}");
        }
        for a in &inbox.attempts {
            outln!(
                "    attempt {:<5} {}: {}{}",
                a.attempt.map_or_else(|| "-".to_owned(), |n| n.to_string()),
                a.at,
                a.status.map(|s| format!("HTTP {s}, ")).unwrap_or_default(),
                a.error.as_deref().unwrap_or("failed")
            );
        }
        if let Some(at) = &inbox.dead_lettered_at {
            outln!("    dead-lettered {at}");
        }
        for r in &inbox.replays {
            outln!(
                "    replayed      {} (reason: {})",
                r.at,
                r.reason.as_deref().unwrap_or("-")
            );
        }
        if let Some(at) = &inbox.next_attempt_at {
            outln!("    next attempt  {at}");
        }
        if let Some(at) = &inbox.delivered_at {
            outln!("    delivered     {at}");
        }
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
            let note = h
                .note
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default();
            outln!("    {}  {}{attempt}{gap}{note}", h.at, h.outcome);
        }
    }
    Ok(())
}

/// The archive settings: the config's `[history.archive]`, its URL replaced by `to`.
pub(crate) fn archive_config(
    config: &idemgate_gateway::Config,
    to: Option<&str>,
    flag: &str,
) -> anyhow::Result<idemgate_archive::ArchiveConfig> {
    match (config.history.archive.clone(), to) {
        (Some(mut c), Some(url)) => {
            c.url = url.to_owned();
            Ok(c)
        }
        (Some(c), None) => Ok(c),
        (None, Some(url)) => Ok(idemgate_archive::ArchiveConfig::at(url)),
        (None, None) => Err(Usage(format!(
            "no archive: pass {flag} file:///path (or s3://bucket/prefix), or set [history.archive] url in the config"
        ))
        .into()),
    }
}
