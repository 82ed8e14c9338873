//! `idemgate inbox`, `idemgate dead-letters` and `idemgate replay --dead-letters`: inbox mode's
//! queue as the store holds it.

use std::num::NonZeroU32;
use std::time::Duration;

use clap::Args;
use idemgate_core::inbox::{AttemptLog, DeadLetter, Inbox, InboxStats, ReplayFilter};
use idemgate_core::{EventId, Human, SourceName};
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

/// `idemgate dead-letters`.
#[derive(Debug, Args)]
pub(crate) struct DeadLettersArgs {
    #[command(flatten)]
    pub inbox: InboxArgs,
    /// Only this event's (an event id is one source's: needs --source).
    #[arg(long, value_parser = crate::parse_event_id, requires = "source")]
    pub event_id: Option<EventId>,
    /// Show every attempt of each dead letter: when, the downstream's status, the error.
    #[arg(long)]
    pub attempts: bool,
}

/// `idemgate replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Captured events to re-drive through an inbox source's dedup (JSON Lines: `event_id`,
    /// `body`, optional `headers`); needs --source and a --config that defines it.
    #[arg(conflicts_with = "dead_letters")]
    pub file: Option<std::path::PathBuf>,
    /// Move dead letters back to the queue, each with a fresh attempt budget.
    #[arg(long)]
    pub dead_letters: bool,
    /// Only this source's.
    #[arg(long, value_parser = crate::parse_source)]
    pub source: Option<SourceName>,
    /// Only those that died within this long (`2h`, `1d`).
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<Duration>,
    /// Only this event's dead letter (an event id is one source's: needs --source).
    #[arg(long, value_parser = crate::parse_event_id, requires_all = ["dead_letters", "source"])]
    pub event_id: Option<EventId>,
    /// Why: recorded in each event's history as the replay's reason.
    #[arg(long)]
    pub reason: Option<String>,
    /// List what would be replayed (each dead letter's source, event id and last error); move
    /// nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With a file: queue every event, even one done within its TTL (each such replay is
    /// recorded in history with --reason).
    #[arg(long, requires = "file")]
    pub force: bool,
}

/// Dead letters listed or counted at most.
const LIST: NonZeroU32 = NonZeroU32::new(10_000).expect("non-zero");

/// The window the dispatch rate is read over.
const RATE_WINDOW: Duration = Duration::from_secs(600);

pub(crate) async fn inbox(args: &InboxArgs) -> anyhow::Result<()> {
    use idemgate_core::store::HistoryQuery;
    let (store, name) = open(&args.store, None).await?;
    let stats: Vec<InboxStats> = store
        .inbox_stats()
        .await?
        .into_iter()
        .filter(|s| args.source.as_ref().is_none_or(|want| &s.source == want))
        .collect();
    // Deliveries from the queue over the last ten minutes (each completion carries its lag).
    let observed = store.observe(RATE_WINDOW).await?;
    let per_minute = |source: &SourceName| {
        let n = observed
            .iter()
            .find(|o| &o.source == source)
            .map_or(0, |o| o.queue_lags.len());
        n as f64 * 60.0 / RATE_WINDOW.as_secs_f64()
    };
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
                    "delivered_per_min": per_minute(&s.source),
                    "failing": s.failing,
                    "last_failure": s.last_failure.as_ref().map(|f| json!({
                        "event_id": f.event_id.as_str(),
                        "attempt": f.attempt.attempt,
                        "at": f.attempt.at.to_string(),
                        "status": f.attempt.status,
                        "error": f.attempt.error,
                    })),
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
        "{:<32} {:>10} {:>10} {:>10} {:>10} {:>16}  OLDEST PENDING",
        "SOURCE",
        "PENDING",
        "IN FLIGHT",
        "FAILING",
        "DEAD",
        "DELIVERED/MIN"
    );
    for s in &stats {
        outln!(
            "{:<32} {:>10} {:>10} {:>10} {:>10} {:>16.1}  {}",
            s.source.as_str(),
            s.pending,
            s.in_flight,
            s.failing,
            s.dead,
            per_minute(&s.source),
            s.oldest_pending
                .map_or_else(|| "-".to_owned(), |d| Human(d).to_string())
        );
    }
    outln!(
        "(failing: waiting items that failed at least once; delivered/min over the last {})",
        Human(RATE_WINDOW)
    );
    let failures: Vec<_> = stats
        .iter()
        .filter_map(|s| Some((&s.source, s.last_failure.as_ref()?)))
        .collect();
    if !failures.is_empty() {
        outln!();
        outln!("last error per source:");
        for (source, f) in failures {
            outln!(
                "  {}: {} (event {}, attempt {} at {})",
                source.as_str(),
                f.attempt.error,
                f.event_id.as_str(),
                f.attempt.attempt,
                f.attempt.at
            );
        }
    }
    Ok(())
}

pub(crate) async fn dead_letters(args: &DeadLettersArgs) -> anyhow::Result<()> {
    let (store, name) = open(&args.inbox.store, None).await?;
    let filter = ReplayFilter {
        source: args.inbox.source.clone(),
        event_id: args.event_id.clone(),
        since: None,
    };
    let dead = store.dead_letters(&filter, LIST).await?;
    if args.inbox.json {
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
        if args.attempts {
            for a in &d.attempts {
                outln!("{:>8}  {}", "", attempt_line(a));
            }
        }
    }
    Ok(())
}

/// One attempt, as `dead-letters --attempts` and `lookup` print it.
pub(crate) fn attempt_line(a: &AttemptLog) -> String {
    format!(
        "attempt {} at {}: {}{}",
        a.attempt,
        a.at,
        a.status.map(|s| format!("HTTP {s}, ")).unwrap_or_default(),
        a.error
    )
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
    if let Some(file) = &args.file {
        return replay_file(args, file).await;
    }
    if !args.dead_letters {
        return Err(Usage(
            "say what to replay: --dead-letters (move dead letters back to the queue) or a JSON Lines file of captured events".into(),
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
        event_id: args.event_id.clone(),
    };
    if args.dry_run {
        // What the replay would select, by the same filter and the store's clock.
        let dead = store.dead_letters(&filter, LIST).await?;
        outln!(
            "{name}: would move {} dead letter{} back to the queue (nothing moved: --dry-run)",
            dead.len(),
            if dead.len() == 1 { "" } else { "s" },
        );
        for d in &dead {
            outln!(
                "  {} {}  died {}, {} attempt{}, last error: {}",
                d.key.source.as_str(),
                d.key.event_id.as_str(),
                d.dead_at,
                d.attempts.len(),
                if d.attempts.len() == 1 { "" } else { "s" },
                d.attempts.last().map_or("-", |a| a.error.as_str())
            );
        }
        if dead.len() as u64 == u64::from(LIST.get()) {
            outln!("  (the first {}; there may be more)", LIST.get());
        }
        return Ok(());
    }
    if let Some(event_id) = &filter.event_id
        && store
            .dead_letters(&filter, NonZeroU32::MIN)
            .await?
            .is_empty()
    {
        return Err(Usage(format!(
            "no dead letter of event {:?}{} in {name}: see `idemgate dead-letters`",
            event_id.as_str(),
            args.source
                .as_ref()
                .map(|s| format!(" of source {:?}", s.as_str()))
                .unwrap_or_default(),
        ))
        .into());
    }
    let moved = store.replay_dead_letters(&filter, &reason).await?;
    outln!(
        "{name}: {moved} dead letter{} moved back to the queue (reason: {reason})",
        if moved == 1 { "" } else { "s" }
    );
    Ok(())
}

/// One captured event of a JSON Lines file.
struct Captured {
    line: usize,
    event_id: idemgate_core::EventId,
    queued: idemgate_core::inbox::QueuedItem,
}

/// Reads every line first (a bad line is an error naming it, and nothing is queued), then
/// claims and queues each event as a delivery would be: one done within its TTL is a duplicate,
/// skipped and counted.
async fn replay_file(args: &ReplayArgs, file: &std::path::Path) -> anyhow::Result<()> {
    use idemgate_core::ClaimOutcome;
    let Some(source) = &args.source else {
        return Err(Usage(
            "replaying a file needs --source: the inbox source the events are for".into(),
        )
        .into());
    };
    let config = crate::data::config(&args.store, None)?;
    let sources = idemgate_gateway::Sources::build(&config).map_err(|e| Usage(e.to_string()))?;
    let Some(src) = sources.get(source.as_str()) else {
        return Err(Usage(format!(
            "no source {source} in the configuration; replay needs --config with the source's [[source]]"
        ))
        .into());
    };
    if src.mode != idemgate_gateway::config::Mode::Inbox {
        return Err(Usage(format!(
            "source {source} is in mode {}; replay re-drives events through an inbox source's queue (mode = \"inbox\")",
            src.mode.as_str()
        ))
        .into());
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| Usage(format!("cannot read {}: {e}", file.display())))?;
    let events = parse_captured(&text).map_err(|e| Usage(format!("{}: {e}", file.display())))?;
    let reason = args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    if args.force && reason.is_none() {
        return Err(Usage(
            "--force needs --reason: a forced replay is recorded in each event's history with it"
                .into(),
        )
        .into());
    }
    if args.dry_run {
        outln!(
            "{}: {} events to replay into {source}",
            file.display(),
            events.len()
        );
        return Ok(());
    }
    let store = idemgate::AnyStore::open_existing(&config.store).await?;
    let bar = progress(events.len() as u64);
    let (mut queued, mut duplicates, mut late, mut conflicts, mut forced) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for event in events {
        let claim = src.claim_request(idemgate_core::Key::new(src.name.clone(), event.event_id));
        let answer = match (args.force, reason) {
            (true, Some(reason)) => store.requeue(claim, event.queued, reason).await,
            _ => store.enqueue(claim, event.queued).await,
        };
        match answer {
            Ok(ClaimOutcome::Claimed { .. }) => queued += 1,
            Ok(_) if args.force => forced += 1,
            Ok(ClaimOutcome::Duplicate { .. } | ClaimOutcome::InFlight { .. }) => duplicates += 1,
            Ok(ClaimOutcome::LateDuplicate { .. }) => late += 1,
            Ok(ClaimOutcome::Conflict { .. }) => conflicts += 1,
            Err(e) => {
                bar.abandon();
                return Err(anyhow::Error::new(e).context(format!(
                    "line {}: cannot queue it ({} queued before it)",
                    event.line,
                    queued + forced
                )));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if args.force {
        outln!(
            "{source}: {queued} queued, {forced} processed before and queued again (reason: {})",
            reason.unwrap_or_default()
        );
    } else {
        outln!(
            "{source}: {queued} queued, {duplicates} skipped as duplicates, {late} late duplicates refused, {conflicts} conflicts"
        );
    }
    Ok(())
}

fn parse_captured(text: &str) -> Result<Vec<Captured>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {n}: not JSON: {e}"))?;
        let id = v
            .get("event_id")
            .and_then(|x| x.as_str())
            .ok_or_else(|| format!("line {n}: no \"event_id\" string"))?;
        let event_id = idemgate_core::EventId::new(id).map_err(|e| format!("line {n}: {e}"))?;
        let body = match v.get("body") {
            Some(serde_json::Value::String(s)) => s.clone().into_bytes(),
            Some(other) => other.to_string().into_bytes(),
            None => return Err(format!("line {n}: no \"body\"")),
        };
        let mut headers = Vec::new();
        let mut content_type = None;
        if let Some(h) = v.get("headers") {
            let h = h
                .as_object()
                .ok_or_else(|| format!("line {n}: \"headers\" is not an object"))?;
            for (name, value) in h {
                let value = value
                    .as_str()
                    .ok_or_else(|| format!("line {n}: header {name} is not a string"))?;
                if name.eq_ignore_ascii_case("content-type") {
                    content_type = Some(value.to_owned());
                } else {
                    headers.push((name.clone(), value.to_owned()));
                }
            }
        }
        out.push(Captured {
            line: n,
            event_id,
            queued: idemgate_core::inbox::QueuedItem {
                body,
                content_type: content_type.or_else(|| Some("application/json".to_owned())),
                headers,
            },
        });
    }
    Ok(out)
}

/// A progress bar on a terminal; hidden otherwise.
fn progress(len: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} events ({per_sec}, {eta})")
    {
        bar.set_style(style);
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_lines_are_read_or_refused_by_number() {
        let ok = parse_captured(
            "{\"event_id\": \"e1\", \"body\": {\"a\": 1}}\n\n{\"event_id\": \"e2\", \"body\": \"raw\", \"headers\": {\"Content-Type\": \"text/plain\", \"x-k\": \"v\"}}\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].queued.body, br#"{"a":1}"#);
        assert_eq!(ok[1].line, 3);
        assert_eq!(ok[1].queued.content_type.as_deref(), Some("text/plain"));
        assert_eq!(ok[1].queued.headers, [("x-k".to_owned(), "v".to_owned())]);
        for (text, says) in [
            (
                "{\"event_id\": \"e1\", \"body\": 1}\nnope",
                "line 2: not JSON",
            ),
            ("{\"body\": 1}", "line 1: no \"event_id\""),
            ("{\"event_id\": \"\", \"body\": 1}", "line 1:"),
            ("{\"event_id\": \"e\"}", "line 1: no \"body\""),
            (
                "{\"event_id\": \"e\", \"body\": 1, \"headers\": []}",
                "not an object",
            ),
        ] {
            let e = parse_captured(text).err().unwrap();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
