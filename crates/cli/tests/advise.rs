//! `idemgate advise` on a generated history with known gaps.

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use idemgate_core::time::ManualClock;
use idemgate_core::{ClaimMode, ClaimOutcome, ClaimRequest, ClaimStore, Clock, Key, SystemClock};
use idemgate_sqlite::{SqliteOptions, SqliteStore};
use serde_json::Value;

const MIN: u64 = 60;
const DAY: u64 = 86_400;

fn idemgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env_remove("IDEMGATE_DATA_DIR")
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .expect("run idemgate")
}

const CONFIG: &str = r#"
[[source]]
name = "stripe-live"
provider = "stripe"
secrets = ["whsec_x"]

[[source]]
name = "shop"
provider = "shopify"
secrets = ["x"]

[[source]]
name = "bus"
provider = "none"
retry_window = "1h"
event_id_header = "x-id"
ttl_override = "60d"
ttl_override_reason = "kept long on purpose, to show the advisor"

[[source]]
name = "quiet"
provider = "github"
secrets = ["x"]
"#;

fn claim(key: &Key, ttl: Duration) -> ClaimRequest {
    ClaimRequest::new(key.clone(), Duration::from_secs(60), ttl)
}

/// Writes a history ten days old with known gaps, on a manual clock.
async fn generate(dir: &std::path::Path) {
    let clock = ManualClock::new(SystemClock.now().minus(Duration::from_secs(10 * DAY)));
    let store = SqliteStore::open_with(
        dir,
        SqliteOptions {
            clock: Arc::new(clock.clone()),
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    let week = Duration::from_secs(7 * DAY);
    // stripe-live: 100 events, event i repeated once, i minutes after its first receipt.
    let keys: Vec<Key> = (1..=100)
        .map(|i| Key::parse("stripe-live", &format!("evt_{i}")).unwrap())
        .collect();
    for key in &keys {
        let ClaimOutcome::Claimed { token, .. } = store.claim(claim(key, week)).await.unwrap()
        else {
            panic!()
        };
        store.complete(&token).await.unwrap();
    }
    for minute in 1..=100u64 {
        clock.advance(Duration::from_secs(MIN));
        let outcome = store
            .claim(claim(&keys[minute as usize - 1], week))
            .await
            .unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Duplicate { .. }),
            "{outcome:?}"
        );
    }
    // shop: a delivery after its (1 s) record expired: a late duplicate.
    let late = Key::parse("shop", "order-1").unwrap();
    let ClaimOutcome::Claimed { token, .. } = store
        .claim(claim(&late, Duration::from_secs(1)))
        .await
        .unwrap()
    else {
        panic!()
    };
    store.complete(&token).await.unwrap();
    clock.advance(Duration::from_secs(5 * MIN));
    let again = store
        .claim(claim(&late, Duration::from_secs(DAY)))
        .await
        .unwrap();
    assert!(
        matches!(
            again,
            ClaimOutcome::Claimed {
                late_duplicate: Some(_),
                ..
            }
        ),
        "{again:?}"
    );
    // bus: a few plain deliveries.
    for i in 0..3 {
        let key = Key::parse("bus", &format!("m-{i}")).unwrap();
        store
            .claim(claim(&key, week).mode(ClaimMode::OnReceipt))
            .await
            .unwrap();
    }
}

fn source<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == name)
        .unwrap_or_else(|| panic!("{name} in {v}"))
}

/// Tags open and close in order (a small well-formedness check, enough for generated SVG).
fn well_formed(xml: &str) -> bool {
    let mut stack = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        let Some(end) = rest[start..].find('>') else {
            return false;
        };
        let tag = &rest[start + 1..start + end];
        rest = &rest[start + end + 1..];
        if tag.starts_with('?') || tag.starts_with('!') {
            continue;
        }
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_alphanumeric())
            .collect();
        if tag.starts_with('/') {
            if stack.pop() != Some(name) {
                return false;
            }
        } else if !tag.ends_with('/') {
            stack.push(name);
        }
    }
    stack.is_empty()
}

#[tokio::test]
async fn advise_reports_the_known_gaps_verdicts_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path()).await;
    let config = dir.path().join("idemgate.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let plot = dir.path().join("gaps.svg");
    let (d, c, p) = (
        dir.path().to_str().unwrap(),
        config.to_str().unwrap(),
        plot.to_str().unwrap(),
    );
    let out = idemgate(&[
        "advise",
        "--data-dir",
        d,
        "--config",
        c,
        "--json",
        "--plot",
        p,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();

    let s = source(&v, "stripe-live");
    assert_eq!(s["deliveries"], 200);
    assert_eq!(s["duplicates"], 100);
    assert_eq!(s["gap_p50_ms"], 50 * MIN * 1000);
    assert_eq!(s["gap_p90_ms"], 90 * MIN * 1000);
    assert_eq!(s["gap_p99_ms"], 99 * MIN * 1000);
    assert_eq!(s["gap_max_ms"], 100 * MIN * 1000);
    assert_eq!(s["late_duplicates"], 0);
    assert_eq!(s["retry_window_s"], 3 * DAY);
    assert_eq!(
        s["recommended_ttl_s"], s["ttl_s"],
        "max(window, 100 min) + margins = the preset"
    );
    assert_eq!(s["verdict"], "ok");
    assert_eq!(
        s["live_rows"], 0,
        "week-long records written ten days ago have expired"
    );
    // 100 first receipts in 30 days, times a TTL of 7 days 10 minutes.
    assert_eq!(
        s["projected_rows"],
        (100.0_f64 * (7.0 * 86_400.0 + 600.0) / (30.0 * 86_400.0)).round() as u64
    );

    let shop = source(&v, "shop");
    assert_eq!(shop["late_duplicates"], 1);
    assert_eq!(shop["verdict"], "too short");
    assert_eq!(shop["gap_max_ms"], 5 * MIN * 1000);

    assert_eq!(source(&v, "bus")["verdict"], "too long");
    assert_eq!(source(&v, "quiet")["verdict"], "no data");

    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(well_formed(&svg), "{svg}");
    for id in [
        "stripe-live-ttl",
        "stripe-live-retry-window",
        "shop-ttl",
        "shop-retry-window",
    ] {
        assert!(svg.contains(&format!("id=\"{id}\"")), "line {id} missing");
    }
    assert!(svg.contains("class=\"bar\""));
    assert!(
        svg.contains("gap since first receipt") && svg.contains("repeated deliveries"),
        "axes are labelled"
    );

    let text = idemgate(&["advise", "--data-dir", d, "--config", c, "--source", "shop"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("too short (1 late duplicates)") && !text.contains("stripe-live"),
        "{text}"
    );
}

#[tokio::test]
async fn advise_refuses_bad_input_and_says_no_data() {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::open(dir.path()).unwrap());
    let config = dir.path().join("idemgate.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let (d, c) = (dir.path().to_str().unwrap(), config.to_str().unwrap());
    let out = idemgate(&["advise", "--data-dir", d, "--config", c]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no data"));
    for (args, says) in [
        (
            vec!["advise", "--data-dir", d, "--config", c, "--since", "soon"],
            "--since",
        ),
        (
            vec!["advise", "--data-dir", d, "--config", c, "--since", "0s"],
            "above zero",
        ),
        (
            vec!["advise", "--data-dir", d, "--config", c, "--source", "nope"],
            "unknown source \"nope\"",
        ),
    ] {
        let out = idemgate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
