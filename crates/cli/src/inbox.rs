//! `idemgate inbox`, `idemgate dead-letters` and `idemgate replay --dead-letters`: inbox mode's
//! queue as the store holds it.

use std::num::NonZeroU32;
use std::time::Duration;

use clap::Args;
use idemgate_core::inbox::{DeadLetter, Inbox, InboxStats, ReplayFilter};
use idemgate_core::{Human, SourceName};
use serde_json::json;

use crate::data::open;
use crate::{StoreArgs, Usage, parse_duration};

/// Which source, and how to print.
#[derive(Debug, Args)]
pub(crate) struct InboxArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this source.
    #[arg(long, value_parser = crate::parse_source)]
    pub source: Option<SourceName>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `idemgate replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Move dead letters back to the queue, each with a fresh attempt budget.
    #[arg(long)]
    pub dead_letters: bool,
    /// Only this source's.
    #[arg(long, value_parser = crate::parse_source)]
    pub source: Option<SourceName>,
    /// Only those that died within this long (`2h`, `1d`).
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<Duration>,
    /// Why: recorded in each event's history as the replay's reason.
    #[arg(long)]
    pub reason: Option<String>,
    /// Show what would be replayed; move nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Dead letters listed or counted at most.
const LIST: NonZeroU32 = NonZeroU32::new(10_000).expect("non-zero");

pub(crate) async fn inbox(args: &InboxArgs) -> anyhow::Result<()> {
    let (store, name) = open(&args.store, None).await?;
    let stats: Vec<InboxStats> = store
        .inbox_stats()
        .await?
        .into_iter()
        .filter(|s| args.source.as_ref().is_none_or(|want| &s.source == want))
        .collect();
    if args.json {
        let rows: Vec<_> = stats
            .iter()
            .map(|s| {
                json!({
                    "source": s.source.as_str(),
                    "pending": s.pending,
                    "in_flight": s.in_flight,
                    "dead": s.dead,
                    "oldest_pending_s": s.oldest_pending.map(|d| d.as_secs_f64()),
                })
            })
            .collect();
        outln!("{}", json!({ "store": name, "sources": rows }));
        return Ok(());
    }
    outln!("store  {name}");
    if stats.is_empty() {
        outln!("the inbox is empty");
        return Ok(());
    }
    outln!(
        "{:<32} {:>10} {:>10} {:>10}  OLDEST PENDING",
        "SOURCE",
        "PENDING",
        "IN FLIGHT",
        "DEAD"
    );
    for s in &stats {
        outln!(
            "{:<32} {:>10} {:>10} {:>10}  {}",
            s.source.as_str(),
            s.pending,
            s.in_flight,
            s.dead,
            s.oldest_pending
                .map_or_else(|| "-".to_owned(), |d| Human(d).to_string())
        );
    }
    Ok(())
}

pub(crate) async fn dead_letters(args: &InboxArgs) -> anyhow::Result<()> {
    let (store, name) = open(&args.store, None).await?;
    let dead = store.dead_letters(args.source.as_ref(), LIST).await?;
    if args.json {
        let rows: Vec<_> = dead.iter().map(dead_json).collect();
        outln!("{}", json!({ "store": name, "dead_letters": rows }));
        return Ok(());
    }
    outln!("store  {name}");
    if dead.is_empty() {
        outln!("no dead letters");
        return Ok(());
    }
    outln!(
        "{:>8}  {:<24} {:<32} {:>8}  {:<20}  LAST ERROR",
        "ID",
        "SOURCE",
        "EVENT ID",
        "ATTEMPTS",
        "DIED"
    );
    for d in &dead {
        outln!(
            "{:>8}  {:<24} {:<32} {:>8}  {:<20}  {}",
            d.id,
            d.key.source.as_str(),
            d.key.event_id.as_str(),
            d.attempts.len(),
            d.dead_at.to_string(),
            d.attempts.last().map_or("-", |a| a.error.as_str())
        );
    }
    Ok(())
}

fn dead_json(d: &DeadLetter) -> serde_json::Value {
    json!({
        "id": d.id,
        "source": d.key.source.as_str(),
        "event_id": d.key.event_id.as_str(),
        "received_at": d.received_at.to_string(),
        "dead_at": d.dead_at.to_string(),
        "content_type": d.queued.content_type,
        "body_bytes": d.queued.body.len(),
        "attempts": d.attempts.iter().map(|a| json!({
            "attempt": a.attempt,
            "at": a.at.to_string(),
            "status": a.status,
            "error": a.error,
        })).collect::<Vec<_>>(),
    })
}

pub(crate) async fn replay(args: &ReplayArgs) -> anyhow::Result<()> {
    if !args.dead_letters {
        return Err(Usage(
            "say what to replay: --dead-letters (move dead letters back to the queue)".into(),
        )
        .into());
    }
    let reason = match (&args.reason, args.dry_run) {
        (Some(r), _) if !r.trim().is_empty() => r.trim().to_owned(),
        (_, true) => String::new(),
        _ => {
            return Err(Usage(
                "--reason is required: it is recorded in each replayed event's history".into(),
            )
            .into());
        }
    };
    let (store, name) = open(&args.store, None).await?;
    let filter = ReplayFilter {
        source: args.source.clone(),
        since: args.since,
    };
    if args.dry_run {
        // What the replay would select, by the same rules (died within `since`, by the store's
        // clock: each letter's age is read against the newest letter's death at the latest).
        let dead = store.dead_letters(args.source.as_ref(), LIST).await?;
        outln!(
            "{name}: {} dead letter{} of {}; --since is applied by the store at replay",
            dead.len(),
            if dead.len() == 1 { "" } else { "s" },
            args.source.as_ref().map_or("every source", |s| s.as_str())
        );
        return Ok(());
    }
    let moved = store.replay_dead_letters(&filter, &reason).await?;
    outln!(
        "{name}: {moved} dead letter{} moved back to the queue (reason: {reason})",
        if moved == 1 { "" } else { "s" }
    );
    Ok(())
}
