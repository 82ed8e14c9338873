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

[[source]]
name = "fast"
provider = "none"
event_id_header = "x-id"
retry_window = "3d"
queue_lag = "0s"
clock_skew = "0s"
replay_margin = "0s"

[[source]]
name = "payments-provider-eu-west-1"
provider = "github"
secrets = ["x"]
"#;

/// The gaps of `fast`'s repeats, all but one under a second.
const FAST_GAPS_MS: [u64; 4] = [3, 40, 400, 2_000];

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
    // fast: each event repeated once, within milliseconds to seconds.
    for (i, gap) in FAST_GAPS_MS.iter().enumerate() {
        let key = Key::parse("fast", &format!("f-{i}")).unwrap();
        let on_receipt = || claim(&key, week).mode(ClaimMode::OnReceipt);
        store.claim(on_receipt()).await.unwrap();
        clock.advance(Duration::from_millis(*gap));
        let again = store.claim(on_receipt()).await.unwrap();
        assert!(matches!(again, ClaimOutcome::Duplicate { .. }), "{again:?}");
    }
}

/// A store with the generated history and the config, in a temporary directory.
async fn fixture() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path()).await;
    let config = dir.path().join("idemgate.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let d = dir.path().to_str().unwrap().to_owned();
    let c = config.to_str().unwrap().to_owned();
    (dir, d, c)
}

fn source<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == name)
        .unwrap_or_else(|| panic!("{name} in {v}"))
}

#[tokio::test]
async fn advise_reports_the_known_gaps_verdicts_and_plot() {
    let (dir, d, c) = fixture().await;
    let (d, c) = (d.as_str(), c.as_str());
    let plot = dir.path().join("gaps.svg");
    let p = plot.to_str().unwrap();
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
    // 100 first receipts in the ten days the source's history covers (not the 30 days looked
    // at), times a TTL of 7 days 10 minutes.
    assert_eq!(
        s["projected_rows"],
        (100.0_f64 * (7.0 * 86_400.0 + 600.0) / (10.0 * 86_400.0)).round() as u64
    );
    let basis = s["projection_basis_s"].as_u64().unwrap();
    assert!((10 * DAY..10 * DAY + 120).contains(&basis), "{basis}");

    let shop = source(&v, "shop");
    assert_eq!(shop["late_duplicates"], 1);
    assert_eq!(shop["verdict"], "too short");
    assert_eq!(shop["why"], "1 late duplicate");
    assert_eq!(shop["gap_max_ms"], 5 * MIN * 1000);

    assert_eq!(source(&v, "bus")["verdict"], "too long");
    assert_eq!(source(&v, "quiet")["verdict"], "no data");
    let fast = source(&v, "fast");
    assert_eq!(fast["duplicates"], 4);
    assert_eq!(fast["gap_max_ms"], 2_000);
    assert_eq!(fast["ttl_s"], 3 * DAY);
    assert_eq!(
        fast["retry_window_s"],
        3 * DAY,
        "the TTL is the retry window"
    );

    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    if let Err(e) = idemgate_chart::xml::check(&svg) {
        panic!("{e}: {svg}");
    }
    assert!(svg.contains("class=\"bar\""));
    assert!(
        svg.contains("gap since first receipt") && svg.contains("repeated deliveries"),
        "axes are labelled"
    );

    let text = idemgate(&["advise", "--data-dir", d, "--config", c, "--source", "shop"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("too short (1 late duplicate)") && !text.contains("stripe-live"),
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

/// The table's lines: the header and one per source.
fn table(text: &str) -> Vec<&str> {
    text.lines()
        .skip_while(|l| !l.starts_with("SOURCE"))
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("history") && !l.starts_with("plot"))
        .collect()
}

/// The cells of a table line: text separated by two spaces or more, with where each starts and
/// ends.
fn cells(line: &str) -> Vec<(usize, usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    let b = line.as_bytes();
    for i in 0..=b.len() {
        let gap = i == b.len() || (b[i] == b' ' && (i + 1 == b.len() || b[i + 1] == b' '));
        match (start, gap) {
            (None, false) if b[i] != b' ' => start = Some(i),
            (Some(s), true) => {
                out.push((s, i, &line[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn advise_table_columns_are_separated_and_aligned() {
    let (_dir, d, c) = fixture().await;
    let out = idemgate(&["advise", "--data-dir", &d, "--config", &c]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = table(&text);
    assert_eq!(lines.len(), 1 + 6, "a header and six sources:\n{text}");
    let header = cells(lines[0]);
    let names: Vec<&str> = header.iter().map(|c| c.2).collect();
    assert_eq!(
        names,
        [
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
            "VERDICT"
        ]
    );
    let rows: Vec<_> = lines[1..].iter().map(|l| cells(l)).collect();
    for (line, row) in lines[1..].iter().zip(&rows) {
        assert_eq!(
            row.len(),
            header.len(),
            "every cell apart from its neighbours: {line:?}\n{text}"
        );
    }
    // Each column lines up under its heading: text on the left, numbers and durations on the right.
    for (col, (start, end, name)) in header.iter().enumerate() {
        let left = rows.iter().all(|r| r[col].0 == *start);
        let right = rows.iter().all(|r| r[col].1 == *end);
        assert!(left || right, "column {name} is ragged:\n{text}");
        assert_eq!(
            left,
            matches!(*name, "SOURCE" | "VERDICT"),
            "column {name}:\n{text}"
        );
    }
    let row = |name: &str| {
        rows.iter()
            .find(|r| r[0].2 == name)
            .unwrap_or_else(|| panic!("{name}:\n{text}"))
    };
    assert_eq!(row("shop")[10].2, "3d 4h 10m");
    assert_eq!(row("shop")[12].2, "too short (1 late duplicate)");
    assert_eq!(row("payments-provider-eu-west-1")[12].2, "no data");
    assert_eq!(row("fast")[1].2, "8");
}

/// The SVG of each panel of the plot, in the order of the config's sources.
fn panels(svg: &str) -> Vec<&str> {
    svg.split("<g id=\"gaps-panel-").skip(1).collect()
}

/// The content and position of each `<text>` in `svg` (its `x` and baseline `y`).
fn texts(svg: &str) -> Vec<(String, f64, f64)> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let tag = &t[..t.find('>')?];
            let attr = |name: &str| -> Option<f64> {
                let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
                tag[at..at + tag[at..].find('"')?].parse().ok()
            };
            let content = &t[t.find('>')? + 1..t.find("</text>")?];
            Some((content.to_owned(), attr("x")?, attr("y")?))
        })
        .collect()
}

#[tokio::test]
async fn advise_plot_bins_short_gaps_and_labels_every_line_apart() {
    let (dir, d, c) = fixture().await;
    let plot = dir.path().join("gaps.svg");
    let out = idemgate(&[
        "advise",
        "--data-dir",
        &d,
        "--config",
        &c,
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    idemgate_chart::xml::check(&svg).unwrap();
    let panels = panels(&svg);
    assert_eq!(panels.len(), 6, "one panel per configured source");

    // Gaps under a second have bins of their own on an axis that starts at a millisecond.
    let fast = panels[4];
    assert!(
        fast.contains("fast: 8 deliveries, 4 repeats, 0 late duplicates"),
        "{fast}"
    );
    let ticks: Vec<String> = texts(fast).into_iter().map(|t| t.0).collect();
    for tick in ["1ms", "10ms", "100ms", "1s", "1m", "1h", "1d"] {
        assert!(ticks.contains(&tick.to_owned()), "tick {tick}: {ticks:?}");
    }
    let bars: Vec<&str> = fast
        .split("<title>")
        .skip(1)
        .map(|t| &t[..t.find("</title>").unwrap()])
        .collect();
    assert_eq!(bars.len(), FAST_GAPS_MS.len(), "one bar per gap: {bars:?}");
    assert!(bars.iter().all(|b| b.starts_with("1 ")), "{bars:?}");
    assert!(panels[1].contains("shop: 2 deliveries, 1 repeat, 1 late duplicate;"));

    // Lines at the same time share one label; no two labels overlap.
    let marks = |panel: &str| -> Vec<(String, f64, f64)> {
        texts(panel)
            .into_iter()
            .filter(|t| {
                ["TTL", "retry window", "recommended TTL"]
                    .iter()
                    .any(|m| t.0.starts_with(m))
            })
            .collect()
    };
    let labels = |panel: &str| -> Vec<String> {
        let mut l: Vec<String> = marks(panel).into_iter().map(|t| t.0).collect();
        l.sort();
        l
    };
    assert_eq!(labels(fast), ["TTL = retry window = recommended TTL 3d"]);
    assert_eq!(
        labels(panels[0]),
        ["TTL = recommended TTL 7d 10m", "retry window 3d"]
    );
    assert_eq!(
        labels(panels[2]),
        ["TTL 60d", "recommended TTL 3d 1h 10m", "retry window 1h"]
    );
    for panel in &panels {
        let m = marks(panel);
        for (i, a) in m.iter().enumerate() {
            for b in &m[i + 1..] {
                let width = |t: &(String, f64, f64)| {
                    idemgate_chart::text_width(&t.0, idemgate_chart::TEXT_SIZE)
                };
                let apart = a.1 + width(a) <= b.1 || b.1 + width(b) <= a.1;
                assert!(a.2 != b.2 || apart, "{a:?} overlaps {b:?}");
            }
        }
    }
}
