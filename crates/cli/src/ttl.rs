//! `idemgate ttl` and `idemgate providers`.

use std::time::Duration;

use clap::Args;
use idemgate_core::Human;
use idemgate_core::policy::{ContractTerms, DeliveryContract, TtlPolicy};
use idemgate_core::presets::{self, Preset};
use serde_json::json;

use crate::{Usage, parse_duration};

#[derive(Debug, Args)]
pub(crate) struct TtlArgs {
    /// Start from a provider preset (see `idemgate providers`); the flags below override its terms.
    #[arg(long)]
    provider: Option<String>,
    /// The longest the sender retries or redelivers.
    #[arg(long, value_parser = parse_duration)]
    retry_window: Option<Duration>,
    /// How long deliveries may wait in queues before they are claimed [default: 1d].
    #[arg(long, value_parser = parse_duration)]
    queue_lag: Option<Duration>,
    /// Allowed disagreement between the sender's clocks and the store's [default: 10m].
    #[arg(long, value_parser = parse_duration)]
    clock_skew: Option<Duration>,
    /// Extra room for manual replays and incident redeliveries [default: 2d].
    #[arg(long = "replay", alias = "replay-margin", value_parser = parse_duration)]
    replay_margin: Option<Duration>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn find_preset(name: &str) -> Result<&'static Preset, Usage> {
    presets::preset(name).ok_or_else(|| {
        let names: Vec<_> = presets::presets().iter().map(|p| p.name).collect();
        Usage(format!(
            "unknown provider {name:?}; known: {}",
            names.join(", ")
        ))
    })
}

/// The contract the flags describe, on top of the preset if one is named.
fn contract(args: &TtlArgs) -> Result<DeliveryContract, Usage> {
    let preset = args.provider.as_deref().map(find_preset).transpose()?;
    let terms = ContractTerms {
        retry_window: args.retry_window,
        queue_lag: args.queue_lag,
        clock_skew: args.clock_skew,
        replay_margin: args.replay_margin,
    };
    let name = preset.map_or("custom", |p| p.name);
    terms
        .resolve(name, name, preset.and_then(|p| p.contract))
        .map_err(|_| match preset {
            Some(p) => Usage(format!(
                "provider {:?} has no default retry window: pass --retry-window",
                p.name
            )),
            None => Usage("pass --provider NAME or --retry-window DURATION".into()),
        })
}

fn human(d: Duration) -> String {
    Human(d).to_string()
}

pub(crate) fn ttl(args: &TtlArgs) -> anyhow::Result<()> {
    let contract = contract(args)?;
    let name = args.provider.as_deref().unwrap_or("custom");
    let policy = TtlPolicy::new(name, contract, None).map_err(|e| Usage(e.to_string()))?;
    if args.json {
        let mut out = serde_json::Map::new();
        for (key, d) in contract.terms() {
            out.insert(format!("{key}_s"), json!(d.as_secs()));
        }
        out.insert("ttl_s".into(), json!(policy.ttl.as_secs()));
        outln!("{}", serde_json::Value::Object(out));
        return Ok(());
    }
    if let Some(p) = args.provider.as_deref().map(find_preset).transpose()? {
        outln!("provider {}: {}", p.name, p.note);
        if !p.source_url.is_empty() {
            outln!("  figure from {} (checked {})", p.source_url, p.checked);
        }
    }
    for (key, d) in contract.terms() {
        outln!("{key:<15}{:>16}{:>12} s", human(d), d.as_secs());
    }
    outln!(
        "{:<15}{:>16}{:>12} s",
        "ttl",
        human(policy.ttl),
        policy.ttl.as_secs()
    );
    Ok(())
}

/// What `provider =` a source of this preset's sender names: the preset itself when idemgate
/// checks its signature, `generic-hmac` or `none` for `custom` (a sender of your own).
fn as_source(preset: &str) -> Option<&'static str> {
    match preset {
        "custom" => Some("generic-hmac or none"),
        name => idemgate_providers::Scheme::from_name(name)
            .ok()
            .map(|s| s.name()),
    }
}

pub(crate) fn providers(json: bool) {
    let all = presets::presets();
    if json {
        let list: Vec<_> = all
            .iter()
            .map(|p| {
                json!({
                    "name": p.name,
                    "retry_window_s": p.contract.map(|c| c.retry_window.as_secs()),
                    "queue_lag_s": p.contract.map(|c| c.queue_lag.as_secs()),
                    "clock_skew_s": p.contract.map(|c| c.clock_skew.as_secs()),
                    "replay_margin_s": p.contract.map(|c| c.replay_margin.as_secs()),
                    "ttl_s": p.contract.map(|c| c.ttl().as_secs()),
                    "dedup_key": p.dedup_key,
                    "signature": p.signature,
                    "source_url": p.source_url,
                    "checked": p.checked,
                    "note": p.note,
                    "usable_as_source": as_source(p.name).is_some(),
                    "source_provider": as_source(p.name),
                })
            })
            .collect();
        outln!("{}", serde_json::Value::Array(list));
        return;
    }
    outln!(
        "{:<18} {:<14} {:<18} DEDUP KEY",
        "PROVIDER",
        "RETRY WINDOW",
        "RECOMMENDED TTL"
    );
    for p in all {
        let (window, ttl) = match p.contract {
            Some(c) => (human(c.retry_window), human(c.ttl())),
            None => ("(set it)".into(), "(computed)".into()),
        };
        outln!("{:<18} {:<14} {:<18} {}", p.name, window, ttl, p.dedup_key);
        outln!("{:<18} signature: {}", "", p.signature);
        match as_source(p.name) {
            Some(provider) if provider != p.name => {
                outln!("{:<18} as a source: provider = {provider}", "");
            }
            Some(_) => {}
            None => outln!("{:<18} not usable as a source yet", ""),
        }
        if !p.source_url.is_empty() {
            outln!(
                "{:<18} source: {} (checked {})",
                "",
                p.source_url,
                p.checked
            );
        }
        outln!("{:<18} {}", "", p.note);
    }
}
