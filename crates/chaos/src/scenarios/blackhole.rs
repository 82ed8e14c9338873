//! `postgres-blackhole`: the gateway reaches its private PostgreSQL through a
//! [`FaultyLink`], which stops carrying anything either way for `--blackhole` (5 s) under load:
//! a database that drops packets instead of refusing connections, so nothing fails fast.
//!
//! Expected: deliveries are answered 503 `store_unavailable` with `Retry-After`, the first ones
//! once a claim waited its 3 s, later ones within about 1 s once the store is known failing;
//! once the link carries again, the gateway recovers within seconds (the figure), and no event
//! is lost or processed twice. `/healthz` is asked meanwhile and what it said is shown.
//!
//! The gateway also runs an `Idempotency-Key` sidecar on the store (see `keyed`), whose clients
//! send new keys through it from the start to a second after the outage: claims caught by the
//! outage are answered 503, completions waiting for it are retried in the background (the key's
//! copies answered 409 meanwhile). Expected: the upstream creates every key once, each client
//! holds that first answer, and the key sent again is answered with it, replayed.

use std::net::SocketAddr;

use anyhow::Context;
use idemgate_postgres::testing::{FaultyLink, LinkMode};

use super::{MS, SECS, quick, schema, short_lease};
use crate::Ctx;
use crate::clock::ms;
use crate::fault::{self, Window, quantile};
use crate::gateway::SourceSpec;
use crate::health::{self, Prober};
use crate::keyed::Sidecar;
use crate::load::Outcome;
use crate::run::{Run, postgres_store};
use crate::verdict::Verdict;

/// Once the store is known failing, a claim waits 1 s: an answer later than this, sent then,
/// means the gateway waited as if it did not know.
const KNOWN_FAILING_P99: u64 = 2_000_000;
/// No answer sent during the outage may take longer than this (a claim waits 3 s at most).
const OUTAGE_MAX: u64 = 5_000_000;

pub async fn postgres_blackhole(ctx: &Ctx) -> anyhow::Result<Verdict> {
    // A lease longer than the outage (the gateway's default is at least 60 s): a claim sent
    // during it and landing after it must find the claims of events still being completed
    // live. With a lease shorter than the outage such a claim takes one over and, its caller
    // gone, releases it, deleting the record of an event already processed (see the README).
    let source = SourceSpec {
        lease: SECS(10),
        ..short_lease()
    };
    let mut run = Run::new(ctx, "postgres-blackhole", source, quick()).await?;
    let pg = ctx.postgres().await?;
    let link = FaultyLink::start(SocketAddr::from(([127, 0, 0, 1], pg.port)))
        .await
        .context("starting a TCP link in front of PostgreSQL")?;
    run.add_gateways(
        1,
        &postgres_store(&pg.url_via(link.addr()), &schema(&run), "batched", SECS(60)),
    )?;
    let sidecar = Sidecar::add(&mut run, 1).await?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    let clients = sidecar.clients(&run);
    run.reach(0.3).await?;
    let prober = Prober::start(
        ctx.client.clone(),
        ctx.clock,
        run.gateway(1)?.addr(),
        MS(250),
    );
    link.set(LinkMode::Blackhole);
    let start = run.clock().now();
    run.note(format!(
        "the link to PostgreSQL blackholed for {}: nothing goes through, either way",
        humantime::format_duration(ctx.blackhole)
    ));
    tokio::time::sleep(ctx.blackhole).await;
    link.set(LinkMode::Forward);
    let end = run.clock().now();
    run.note("the link carries again");
    let ends = sidecar.finish(&mut run, clients).await;
    run.settle(SECS(20)).await?;
    let probes = prober.stop().await;
    let mut v = run.finish().await?;
    drop(link);
    sidecar.judge(&mut v, &ends, "503");

    let during = |a: &&crate::load::Answer| a.sent >= start && a.sent <= end;
    let refused: Vec<&crate::load::Answer> = run
        .answers
        .iter()
        .filter(during)
        .filter(|a| a.outcome == Outcome::StoreUnavailable)
        .collect();
    let first_refusal = refused.iter().map(|a| a.at).min();
    let without_retry_after = refused.iter().filter(|a| !a.retry_after).count();
    // Sent once a 503 had been answered: the store was known failing.
    let mut known: Vec<u64> = run
        .answers
        .iter()
        .filter(during)
        .filter(|a| first_refusal.is_some_and(|f| a.sent >= f))
        .map(|a| a.at - a.sent)
        .collect();
    known.sort_unstable();
    let known_p99 = quantile(&known, 0.99);
    let max = run
        .answers
        .iter()
        .filter(during)
        .map(|a| a.at - a.sent)
        .max();
    // Sent before the outage and answered after it began: a forward whose completion waited
    // for the store, or a claim caught by it.
    let caught = run
        .answers
        .iter()
        .filter(|a| a.sent < start && a.at > start)
        .map(|a| (a.at - a.sent, a.outcome.name()))
        .max();
    v.notes.push(format!(
        "attempts sent before the outage and answered after it began: the longest waited {}",
        caught.map_or("-".to_owned(), |(w, o)| format!("{} (answered {o})", ms(w)))
    ));
    v.notes.push(format!(
        "during the outage: {} answers 503 store_unavailable ({without_retry_after} without Retry-After), the first {} after it began; attempts sent once one was answered: {} answered in p99 {}; the longest answer to an attempt sent during it {}",
        refused.len(),
        first_refusal.map_or("-".to_owned(), |f| ms(f - start)),
        known.len(),
        known_p99.map_or("-".to_owned(), ms),
        max.map_or("-".to_owned(), ms),
    ));
    v.notes.push(format!(
        "/healthz during the outage: {}; after it: {}",
        health::summary(&probes, start, end),
        health::summary(&probes, end, u64::MAX)
    ));
    if refused.is_empty() {
        v.failures.push(
            "no delivery was answered 503 store_unavailable during the outage: the fault did not hit"
                .into(),
        );
    }
    if without_retry_after > 0 {
        v.failures.push(format!(
            "{without_retry_after} store_unavailable answers had no Retry-After"
        ));
    }
    if let Some(p99) = known_p99.filter(|&p| p > KNOWN_FAILING_P99) {
        v.failures.push(format!(
            "once the store was known failing, attempts were still answered in p99 {} (above {}): claims waited as if it were not",
            ms(p99),
            ms(KNOWN_FAILING_P99)
        ));
    }
    if let Some(max) = max.filter(|&m| m > OUTAGE_MAX) {
        v.failures.push(format!(
            "an attempt sent during the outage waited {} for its answer (above {})",
            ms(max),
            ms(OUTAGE_MAX)
        ));
    }
    v.fault = Some(fault::figures(
        format!(
            "PostgreSQL blackholed {}",
            humantime::format_duration(ctx.blackhole)
        ),
        Window { start, end },
        &run.answers,
    ));
    Ok(v)
}
