//! `idemgate advise`: is each source's TTL right, judging by its history?

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use idemgate_core::Human;
use idemgate_core::advise::{self, Advice, Observation};
use idemgate_core::store::{HistoryQuery, Stats};
use idemgate_gateway::Config;
use serde_json::json;

use crate::{StoreArgs, Usage, parse_duration};

#[derive(Debug, Args)]
pub(crate) struct AdviseArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Only this source.
    #[arg(long)]
    source: Option<String>,
    /// How far back to look.
    #[arg(long, default_value = "30d", value_parser = parse_positive_duration)]
    since: Duration,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Also draw each source's gap histogram, with its TTL and retry window, to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err("must be above zero".into()),
        d => Ok(d),
    }
}

pub(crate) async fn advise(args: AdviseArgs) -> anyhow::Result<()> {
    // The sources' contracts come from the config (or, without one, the demo config `serve`
    // runs); the history from the store.
    let config = Config::load(args.store.config_file().as_deref(), crate::serve::DEMO)
        .map_err(|e| Usage(e.to_string()))?;
    if let Some(only) = &args.source
        && !config.sources.iter().any(|s| &s.name == only)
    {
        let known: Vec<_> = config.sources.iter().map(|s| s.name.as_str()).collect();
        return Err(Usage(format!(
            "unknown source {only:?}: not in the config (configured: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ))
        .into());
    }
    let (store, _) = crate::data::open(&args.store, None).await?;
    let observed = store.observe(args.since).await?;
    let stats = store.stats().await?;
    let mut rows: Vec<(Advice, Vec<Duration>)> = Vec::new();
    for (i, sc) in config.sources.iter().enumerate() {
        if args.source.as_ref().is_some_and(|only| only != &sc.name) {
            continue;
        }
        let policy = sc.policy(i).map_err(|e| Usage(e.to_string()))?;
        let mut obs = observed
            .iter()
            .find(|o| o.source == policy.name)
            .cloned()
            .unwrap_or_else(|| Observation::empty(policy.name.clone(), args.since));
        obs.live_rows = stats
            .per_source
            .iter()
            .find(|s| s.source == policy.name)
            .map_or(0, |s| s.live);
        let advice = advise::advise(&obs, &policy.ttl.contract, policy.ttl.ttl);
        rows.push((advice, obs.gaps));
    }
    let unconfigured: Vec<_> = observed
        .iter()
        .filter(|o| !config.sources.iter().any(|s| s.name == o.source.as_str()))
        .map(|o| o.source.as_str().to_owned())
        .collect();
    if let Some(path) = &args.plot {
        std::fs::write(path, crate::plot::svg(&rows, args.since))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    if args.json {
        let list: Vec<_> = rows.iter().map(|(a, _)| advice_json(a)).collect();
        outln!(
            "{}",
            json!({ "since_s": args.since.as_secs(), "sources": list, "unconfigured_sources": unconfigured })
        );
        return Ok(());
    }
    if rows.iter().all(|(a, _)| a.deliveries == 0) {
        outln!("no data: no deliveries in the last {}", Human(args.since));
    } else {
        print_table(&rows, args.since);
    }
    if !unconfigured.is_empty() {
        outln!(
            "history also holds sources not in the config: {}",
            unconfigured.join(", ")
        );
    }
    if let Some(path) = &args.plot {
        outln!("plot written to {}", path.display());
    }
    Ok(())
}

fn ms(d: Option<Duration>) -> Option<u64> {
    d.map(|d| d.as_millis() as u64)
}

fn advice_json(a: &Advice) -> serde_json::Value {
    json!({
        "source": a.source.as_str(),
        "deliveries": a.deliveries,
        "duplicates": a.duplicates,
        "gap_p50_ms": ms(a.p50),
        "gap_p90_ms": ms(a.p90),
        "gap_p99_ms": ms(a.p99),
        "gap_max_ms": ms(a.max),
        "late_duplicates": a.late_duplicates,
        "live_rows": a.live_rows,
        "projected_rows": a.projected_rows,
        "projection_basis_s": a.projection_basis.as_secs(),
        "ttl_s": a.ttl.as_secs(),
        "retry_window_s": a.retry_window.as_secs(),
        "recommended_ttl_s": a.recommended_ttl.as_secs(),
        "queue_lag_p50_ms": ms(a.queue_lag.map(|l| l.p50)),
        "queue_lag_p99_ms": ms(a.queue_lag.map(|l| l.p99)),
        "queue_lag_max_ms": ms(a.queue_lag.map(|l| l.max)),
        "queue_lag_margin_s": a.queue_lag_margin.as_secs(),
        "verdict": a.verdict.as_str(),
        "why": match &a.verdict {
            advise::Verdict::TooShort { why } => Some(why.as_str()),
            _ => None,
        },
    })
}

fn print_table(rows: &[(Advice, Vec<Duration>)], since: Duration) {
    let h = |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), |d| Human(d).to_string());
    const HEADER: [&str; 13] = [
        "SOURCE",
        "DELIVERED",
        "REPEATS",
        "GAP P50",
        "P90",
        "P99",
        "MAX",
        "LATE",
        "LIVE",
        "PROJECTED",
        "TTL",
        "RECOMMENDED",
        "VERDICT",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(a, _)| {
            vec![
                a.source.to_string(),
                a.deliveries.to_string(),
                a.duplicates.to_string(),
                h(a.p50),
                h(a.p90),
                h(a.p99),
                h(a.max),
                a.late_duplicates.to_string(),
                a.live_rows.to_string(),
                a.projected_rows.to_string(),
                Human(a.ttl).to_string(),
                Human(a.recommended_ttl).to_string(),
                a.verdict.to_string(),
            ]
        })
        .collect();
    outln!("over the last {}:", Human(since));
    // Names and verdicts read from the left; counts and durations line up on the right.
    for line in columns(&HEADER, &cells, |col| col == 0 || col == HEADER.len() - 1) {
        outln!("{line}");
    }
    // Inbox sources: the queue lag observed beside the margin the TTL allows for it.
    let lagged: Vec<Vec<String>> = rows
        .iter()
        .filter_map(|(a, _)| {
            let lag = a.queue_lag?;
            Some(vec![
                a.source.to_string(),
                Human(lag.p50).to_string(),
                Human(lag.p99).to_string(),
                Human(lag.max).to_string(),
                Human(a.queue_lag_margin).to_string(),
            ])
        })
        .collect();
    if !lagged.is_empty() {
        outln!();
        outln!("inbox queue lag (receipt to delivery):");
        let header = ["SOURCE", "LAG P50", "P99", "MAX", "QUEUE_LAG MARGIN"];
        for line in columns(&header, &lagged, |col| col == 0) {
            outln!("{line}");
        }
    }
}

/// Lines of a table: each column as wide as its widest cell, two spaces between columns,
/// cells of `left` columns aligned left, others right; no trailing spaces.
fn columns(header: &[&str], rows: &[Vec<String>], left: impl Fn(usize) -> bool) -> Vec<String> {
    let width = |col: usize| {
        rows.iter()
            .map(|r| r[col].chars().count())
            .chain([header[col].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..header.len()).map(width).collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(col, cell)| {
                if left(col) {
                    format!("{cell:<w$}", w = widths[col])
                } else {
                    format!("{cell:>w$}", w = widths[col])
                }
            })
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    std::iter::once(line(header.to_vec()))
        .chain(
            rows.iter()
                .map(|r| line(r.iter().map(String::as_str).collect())),
        )
        .collect()
}
