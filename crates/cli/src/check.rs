//! `idemgate check --config FILE`: everything `serve` would check, without serving. Each source's
//! TTL terms, verifier, target and mode; each broker destination reached and its dedup window
//! judged (the window audit); the store and the Redis tier reached (nothing created); every
//! problem listed, not only the first.

use std::path::PathBuf;

use clap::Args;
use idemgate::AnyStore;
use idemgate_core::Human;
use idemgate_gateway::Config;

use crate::Usage;

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The configuration file to check.
    #[arg(long, env = "IDEMGATE_CONFIG")]
    config: PathBuf,
}

pub(crate) async fn check(args: CheckArgs) -> anyhow::Result<()> {
    let file = args.config.as_path();
    let (config, problems) = Config::parse_checked(file).map_err(|e| Usage(e.to_string()))?;
    let mut problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let mut warnings: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();

    outln!("{}", file.display());
    match &config.admin_listen {
        Some(admin) => outln!(
            "  listen    {} (deliveries and the claim API); admin {admin} (metrics, health, dashboard)",
            config.listen
        ),
        None => outln!("  listen    {} (every route)", config.listen),
    }
    for (i, sc) in config.sources.iter().enumerate() {
        let Ok(policy) = sc.policy(i) else {
            outln!("  source {:?}: not valid (below)", sc.name);
            continue;
        };
        let c = &policy.ttl.contract;
        outln!("  source {}", policy.name);
        outln!(
            "    ttl       {} = retry_window {} + queue_lag {} + clock_skew {} + replay_margin {}{}",
            Human(policy.ttl.ttl),
            Human(c.retry_window),
            Human(c.queue_lag),
            Human(c.clock_skew),
            Human(c.replay_margin),
            policy
                .ttl
                .override_reason
                .as_deref()
                .map(|r| format!(" (overridden: {r})"))
                .unwrap_or_default()
        );
        match idemgate_gateway::verifier(sc) {
            Ok(v) => outln!(
                "    verifier  {} ({}{})",
                v.scheme(),
                if v.scheme().is_signed() {
                    idemgate_chart::count(v.secret_count() as u64, "secret", "secrets")
                } else {
                    "bearer token".to_owned()
                },
                if v.scheme().signs_timestamp() {
                    format!(", tolerance {}", Human(v.tolerance()))
                } else {
                    String::new()
                }
            ),
            Err(e) => problems.push(config.locate(e, Some(file)).to_string()),
        }
        let late = match sc.late_duplicates {
            idemgate_core::LateDuplicates::Off => "off".to_owned(),
            policy_name => format!(
                "{} within {}",
                policy_name.as_str(),
                Human(
                    sc.late_duplicate_horizon
                        .unwrap_or_else(|| idemgate_core::default_late_horizon(policy.ttl.ttl))
                )
            ),
        };
        outln!(
            "    mode      {}, lease {}, late duplicates {late}",
            sc.mode.as_str(),
            Human(policy.lease),
        );
        match &policy.destination {
            Some(target) => outln!(
                "    forward   {target} (timeout {})",
                Human(sc.forward_timeout)
            ),
            None => outln!("    forward   none: a delivery is acknowledged once claimed"),
        }
        // A broker destination: reached, and its own dedup window judged (the window audit).
        if let Some(audit) = idemgate_gateway::audit::audit_source(sc, &policy).await {
            use idemgate_gateway::audit::Standing;
            outln!("    window    {audit}");
            let said = format!(
                "source {:?}: {}: {audit}{}",
                sc.name,
                if audit.standing() == Standing::Short {
                    "on_short_window"
                } else {
                    "forward_url"
                },
                audit.advice().map(|a| format!("; {a}")).unwrap_or_default()
            );
            match audit.standing() {
                Standing::Covered if audit.advice().is_some() => warnings.push(said),
                Standing::Covered => {}
                Standing::Short if !audit.holds() => warnings.push(said),
                Standing::Short | Standing::Unknown | Standing::Broken => problems.push(said),
            }
        }
    }
    for api in &config.apis {
        if let Ok(policy) = api.policy() {
            let routes: Vec<_> = api.routes.iter().map(String::as_str).collect();
            outln!(
                "  api       {}: {} -> {} (keys kept {}; keyed: {})",
                api.name,
                api.listen,
                policy.upstream,
                idemgate_core::Human(policy.rules.ttl()),
                routes.join(", ")
            );
        }
    }
    if config.sources.is_empty() && config.apis.is_empty() {
        outln!("  no sources: nothing can be received");
    }

    // The store and the tier, only when the configuration itself holds together.
    if problems.is_empty() {
        let name = crate::data::describe(&config);
        match AnyStore::open_existing(&config.store).await {
            Ok(store) => {
                match store.ping().await {
                    Ok(()) => outln!("  store     {name}: reachable"),
                    Err(e) => problems.push(format!(
                        "{name} does not answer: {}",
                        idemgate::ErrorChain(&e)
                    )),
                }
                match store.ping_tier().await {
                    Some(Ok(())) => outln!("  tier      Redis: reachable"),
                    Some(Err(e)) => problems.push(format!("the Redis tier does not answer: {e}")),
                    None => {}
                }
            }
            Err(e) => match crate::data::missing(&e) {
                // Not a problem: `serve` (or `migrate`) creates it.
                Some(why) => {
                    tracing::debug!(%why, "no store yet");
                    outln!("  store     {name}: not created yet (serve creates it at start)")
                }
                None => problems.push(format!("{name}: {}", idemgate::ErrorChain(&e))),
            },
        }
        // The history archive: written, read back and deleted (one small object), as the
        // retention job will. Unreachable is a warning: the gateway serves, and holds history
        // in the database until it is back.
        if let Some(settings) = &config.history.archive {
            match idemgate_archive::Archive::open(settings) {
                Ok(archive) => match archive.probe().await {
                    Ok(()) => outln!("  archive   {}: writable", archive.url()),
                    Err(e) => warnings.push(format!(
                        "{e}: history past history_retention stays in the database until the archive is reachable"
                    )),
                },
                Err(e) => problems.push(e.to_string()),
            }
        }
    }

    for w in &warnings {
        outln!("warning: {w}");
    }
    if problems.is_empty() {
        outln!("ok");
        return Ok(());
    }
    outln!();
    for p in &problems {
        outln!("problem: {p}");
    }
    Err(Usage(format!(
        "{} in {}",
        idemgate_chart::count(problems.len() as u64, "problem", "problems"),
        file.display()
    ))
    .into())
}
