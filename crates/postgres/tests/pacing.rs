//! The adaptive sweep on a real server: the batcher records each claim batch's round trip, a
//! run backs off while claims run slower than the baseline learned from them, and it still
//! deletes every expired row. Each test runs on its own schema, dropped when it ends.

mod common;

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idemgate_core::sweep::{Pacing, SweepOptions, SweepReport};
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key, Stats, Sweep};
use idemgate_postgres::{Expiry, PgStore};

const BATCH: u32 = 200;
const PAUSE: Duration = Duration::from_millis(2);
const EXPIRED: i64 = 3_000;
/// Claims that learn the baseline: enough of them, over more than one baseline period.
const BASELINE_CLAIMS: usize = 40;

fn key() -> Key {
    Key::parse(
        "src",
        &format!("evt_{:016x}", idemgate_core::machine::nonce()),
    )
    .unwrap()
}

/// A store holding `EXPIRED` expired `done` records (loaded in SQL, expired a day ago by the
/// server's clock) and `BASELINE_CLAIMS` live claims, taken one at a time, from which it learned
/// its claims' baseline latency.
async fn store_with_expired_rows() -> Option<(PgStore, common::SchemaGuard)> {
    let (cfg, guard) = common::config(Expiry::Batched {
        batch: NonZeroU32::new(BATCH).unwrap(),
        pause: PAUSE,
    });
    let store = common::connect(cfg).await?;
    let client = common::raw(&guard.schema).await;
    let loaded = client
        .execute(
            "INSERT INTO dedup (source, event_id, state, attempt, nonce, first_seen, expires_at)
             SELECT 'src', 'old_' || g, 'done', 1, g, now() - interval '2 days',
                    now() - interval '1 day'
               FROM generate_series(1, $1::bigint) g",
            &[&EXPIRED],
        )
        .await
        .unwrap();
    assert_eq!(loaded, EXPIRED as u64);
    for _ in 0..BASELINE_CLAIMS {
        let req = ClaimRequest::new(key(), Duration::from_secs(60), Duration::from_secs(3_600));
        let outcome = store.claim(req).await.unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Claimed { .. }),
            "{outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Some((store, guard))
}

/// One sweep run of `store` with `pacing`; during each of the first `slow` pauses, claims are
/// reported to the store's latency at three times its baseline (as claims slowed by the sweep
/// would be). Returns the report and every pause the run asked for.
async fn sweep(store: &PgStore, pacing: Pacing, slow: usize) -> (SweepReport, Vec<Duration>) {
    let latency = store.claim_latency().expect("the store records its claims");
    let baseline = latency
        .baseline()
        .expect("a baseline, learned from the claims");
    assert!(baseline > Duration::ZERO);
    let pauses = Arc::new(Mutex::new(Vec::new()));
    let pause = {
        let pauses = pauses.clone();
        move |d: Duration| {
            let mut seen = pauses.lock().unwrap();
            if seen.len() < slow {
                latency.record(baseline * 3, 10);
            }
            seen.push(d);
            async move {
                tokio::time::sleep(d).await;
                true
            }
        }
    };
    let opts = SweepOptions {
        batch: NonZeroU32::new(BATCH).unwrap(),
        pause: PAUSE,
        pacing,
    };
    let report = store.sweep_run(opts, pause, |_| {}).await.unwrap();
    let pauses = pauses.lock().unwrap().clone();
    (report, pauses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_adaptive_sweep_backs_off_while_claims_are_slow_and_deletes_every_expired_row() {
    let Some((store, _guard)) = store_with_expired_rows().await else {
        return;
    };
    let (report, pauses) = sweep(&store, Pacing::Adaptive, 4).await;

    // Each slow reading doubled the slowdown (pause + 10 ms per step), then it came back a
    // step a batch to the configured pause.
    assert_eq!(report.backoffs, 4);
    let ms: Vec<u128> = pauses.iter().map(Duration::as_millis).collect();
    assert_eq!(ms[..7], [2, 12, 32, 72, 152, 142, 132], "{ms:?}");
    assert_eq!(*pauses.last().unwrap(), PAUSE, "{ms:?}");
    assert_eq!(report.paused_for, pauses.iter().sum::<Duration>());
    // Smaller batches meanwhile, down to a quarter: more of them than 3000 / 200.
    assert!(report.batches > 16, "{report:?}");

    // Every expired row is gone; the live claims stay.
    assert_eq!(report.rows, EXPIRED as u64);
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.expired, stats.live), (0, BASELINE_CLAIMS as u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_sweep_keeps_its_pace_whatever_the_claims_do() {
    let Some((store, _guard)) = store_with_expired_rows().await else {
        return;
    };
    let (report, pauses) = sweep(&store, Pacing::Fixed, 4).await;
    assert_eq!(report.backoffs, 0);
    assert_eq!(report.batches, 16);
    assert_eq!(pauses, [PAUSE; 15]);
    assert_eq!(report.rows, EXPIRED as u64);
    assert_eq!(store.stats().await.unwrap().expired, 0);
}
