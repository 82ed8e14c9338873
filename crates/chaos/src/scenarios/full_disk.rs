//! `full-disk`: the SQLite store lives on a small tmpfs the harness mounts itself (12 MiB at the
//! default sizes; more for more events, so the store alone never fills it). At
//! 30% of the load a filler file takes its last byte; once a delivery has been refused for it
//! (or after 10 s), the disk stays full for `--disk-full-for` (2 s) more, then the filler is
//! removed.
//!
//! Beside the webhook load, the gateway runs an `Idempotency-Key` sidecar (an `[[api]]`) on the
//! same store, in front of an upstream that counts the payments it creates per key, and clients
//! send new keys through it from the start to a second after the disk has room again (see
//! `keyed`): claims taken before the disk filled complete, with their kept responses, while it
//! is full.
//!
//! Expected: deliveries are answered 503 while the disk is full; `/healthz` answers 503, its
//! store component saying "its writes fail", as long as they do, and 200 once writes succeed
//! again; no event is lost or processed twice. What `/healthz` said while full is the
//! verdict's headline: a `200 ok` while the store's writes failed fails the scenario. Every key
//! is created once by the upstream, its client ends holding that first answer, and the key sent
//! again is answered with it, replayed.

use std::time::Duration;

use super::{MS, SECS, quick, short_lease};
use crate::Ctx;
use crate::clock::ms;
use crate::disk::Tmpfs;
use crate::fault::{self, Window};
use crate::health::{self, Probe, Prober};
use crate::keyed::Sidecar;
use crate::load::Outcome;
use crate::run::{Run, sqlite_store};
use crate::verdict::Verdict;

/// The tmpfs's size at the default sizes: the store's files take about 4 MiB at 30% of the load
/// (most of it SQLite's write-ahead log).
const DISK_MIB: u32 = 8;
/// What the keyed requests through the sidecar add to the store, at most.
const KEYED_MIB: u32 = 4;
/// What each event adds to the store, at most, once its history is written: 2 KiB.
const EVENTS_PER_MIB: u32 = 512;
/// How long the scenario waits for the full disk to refuse a write.
const WAIT_FOR_FAILURE: Duration = Duration::from_secs(10);
/// What the store component says while its writes fail.
const WRITES_FAIL: &str = "its writes fail";

pub async fn full_disk(ctx: &Ctx) -> anyhow::Result<Verdict> {
    let mut run = Run::new(ctx, "full-disk", short_lease(), quick()).await?;
    let mib = DISK_MIB.max(6 + ctx.sizes.events / EVENTS_PER_MIB) + KEYED_MIB;
    let disk = Tmpfs::mount(&run.dir.join("disk"), mib, ctx.registry.clone()).await?;
    let result = play(ctx, &mut run, &disk, mib).await;
    // The gateway is stopped (by `finish`, or by the cleanup on an error) before the unmount.
    for g in &mut run.gateways {
        g.stop().await;
    }
    disk.unmount().await;
    result
}

async fn play(ctx: &Ctx, run: &mut Run<'_>, disk: &Tmpfs, mib: u32) -> anyhow::Result<Verdict> {
    run.add_gateways(1, &sqlite_store(&disk.dir, SECS(60)))?;
    let sidecar = Sidecar::add(run, 1).await?;
    run.start_gateways().await?;
    let spec = run.spec();
    run.load(spec);
    let clients = sidecar.clients(run);
    run.reach(0.3).await?;
    let prober = Prober::start(
        ctx.client.clone(),
        ctx.clock,
        run.gateway(1)?.addr(),
        MS(200),
    );
    let start = run.clock().now();
    let used = disk.used();
    let filler = disk.fill().await?;
    run.note(format!(
        "disk full: the store's files took {} KiB of the {mib} MiB tmpfs, a filler of {} KiB took the rest",
        used / 1024,
        filler / 1024
    ));
    // Until a write is refused: SQLite may first reuse pages its files already have.
    let until = run.clock().after(WAIT_FOR_FAILURE);
    let failing = loop {
        if run.heard(Outcome::StoreUnavailable, start) > 0 {
            break Some(run.clock().now());
        }
        if run.clock().now() >= until {
            break None;
        }
        tokio::time::sleep(MS(20)).await;
    };
    match failing {
        Some(at) => run.note(format!(
            "a delivery answered 503 store_unavailable, {} after the disk filled",
            ms(at - start)
        )),
        None => run.note(format!(
            "no delivery refused within {} of the disk filling",
            humantime::format_duration(WAIT_FOR_FAILURE)
        )),
    }
    tokio::time::sleep(ctx.disk_full_for).await;
    disk.free()?;
    let end = run.clock().now();
    run.note("filler removed: the disk has room again");
    let ends = sidecar.finish(run, clients).await;
    run.settle(SECS(15)).await?;
    let probes = prober.stop().await;
    let mut v = run.finish().await?;
    sidecar.judge(&mut v, &ends, "503");

    let refused = run
        .answers
        .iter()
        .filter(|a| a.sent >= start && a.sent <= end && a.outcome == Outcome::StoreUnavailable)
        .count();
    if refused == 0 {
        v.failures.push(
            "no delivery was answered 503 store_unavailable while the disk was full: the fault did not hit"
                .into(),
        );
    }
    // While writes were known to fail: asked after the first refusal, answered before the
    // filler's removal.
    let from = failing.unwrap_or(end);
    let while_failing: Vec<&Probe> = probes
        .iter()
        .filter(|p| p.at >= from && p.answered <= end)
        .collect();
    let said_ok = while_failing.iter().filter(|p| p.status == 200).count();
    let said_down = while_failing
        .iter()
        .filter(|p| p.status == 503 && p.store.contains(WRITES_FAIL))
        .count();
    let back = probes
        .iter()
        .find(|p| p.at >= end && p.status == 200)
        .map(|p| p.at - end);
    v.notes.push(format!(
        "{refused} attempts sent while the disk was full were answered 503 store_unavailable"
    ));
    v.notes.push(format!(
        "/healthz while the writes failed: {}; after the filler went: {} (200 again {} after)",
        health::summary(&probes, from, end),
        health::summary(&probes, end, u64::MAX),
        back.map_or("never".to_owned(), ms)
    ));
    if said_ok > 0 {
        v.failures.push(format!(
            "/healthz answered 200 {said_ok} times while the store's writes failed"
        ));
    }
    if failing.is_some() && said_down == 0 {
        v.failures.push(format!(
            "/healthz never answered 503 with a store that says \"{WRITES_FAIL}\" while the disk was full"
        ));
    }
    if back.is_none() {
        v.failures
            .push("/healthz never answered 200 again after the filler was removed".into());
    }
    let said_503 = while_failing.iter().filter(|p| p.status == 503).count();
    let healthz = match (said_503, said_ok) {
        (0, 0) if while_failing.is_empty() => "not asked".to_owned(),
        (0, 0) => "no answer".to_owned(),
        (_, 0) => "503".to_owned(),
        (0, _) => "200".to_owned(),
        _ => "503 and 200".to_owned(),
    };
    v.headline = Some(format!("/healthz {healthz} while full"));
    v.fault = Some(fault::figures(
        format!("disk full ({mib} MiB tmpfs)"),
        Window { start, end },
        &run.answers,
    ));
    Ok(v)
}
