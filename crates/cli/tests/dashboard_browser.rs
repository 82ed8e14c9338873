//! The dashboard in a real browser: headless Chromium, driven over WebDriver, against a real
//! `idemgate serve` with generated traffic, on SQLite and on PostgreSQL.
//!
//! Each run checks that the pages load with no console errors, that every chart is there with
//! its title and axis labels, that the figures on the page are those of `/metrics` and
//! `idemgate advise --json`, that the event page shows a late duplicate and the search box leads
//! to it, and that a phone-wide screen gets the narrow charts and no sideways scrolling. A
//! screenshot of each page, at 1280 px and at 390 px, is saved under
//! `{target}/dashboard-screenshots/` and its path printed.
//!
//! Needs `chromium` and `chromedriver` on PATH (Debian: `apt-get install chromium
//! chromium-driver`; `.ci/browser` installs them). Without them the tests skip with that
//! message, and fail when `CI` is set.

mod webdriver;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use webdriver::{Browser, Running, browser_tools, free_port, http};

const TOKEN: &str = "browser-test-token-0123456789";
const DASHBOARD_TOKEN: &str = "dashboard-token-for-the-browser-0123";

/// A running `idemgate serve` on `store` (the `[store]` table's lines), and its address.
struct Gateway {
    addr: String,
    config: PathBuf,
    _dir: tempfile::TempDir,
    _child: Running,
}

impl Gateway {
    fn start(store: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("idemgate.toml");
        std::fs::write(
            &config,
            format!(
                "api_tokens = [\"{TOKEN}\"]\ndashboard_token = \"{DASHBOARD_TOKEN}\"\n\
                 [store]\nsweep_interval = \"1s\"\n{store}\n\
                 [[source]]\nname = \"shop\"\nprovider = \"none\"\nretry_window = \"1h\"\n\
                 event_id_header = \"x-event-id\"\nmode = \"on_receipt\"\n\
                 [[source]]\nname = \"late\"\nprovider = \"none\"\nretry_window = \"1s\"\n\
                 queue_lag = \"0s\"\nclock_skew = \"0s\"\nreplay_margin = \"0s\"\n\
                 event_id_header = \"x-event-id\"\nmode = \"on_receipt\"\n"
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args([
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--listen",
                &addr,
            ])
            .env_remove("IDEMGATE_DATA_DIR")
            .env("IDEMGATE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let child = Running(child);
        let started = Instant::now();
        while !(TcpStream::connect(&addr).is_ok()
            && http(&addr, "GET", "/healthz", &[], "").0 == 200)
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "idemgate serve did not answer /healthz on {addr}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Self {
            addr,
            config,
            _dir: dir,
            _child: child,
        }
    }

    fn deliver(&self, source: &str, event_id: &str) -> u16 {
        let bearer = format!("Bearer {TOKEN}");
        http(
            &self.addr,
            "POST",
            &format!("/hooks/{source}"),
            &[
                ("authorization", &bearer),
                ("x-event-id", event_id),
                ("content-type", "application/json"),
            ],
            "{\"ok\":true}",
        )
        .0
    }

    /// `idemgate_deliveries_total{source, outcome}` and the other samples of `/metrics`.
    fn metric(&self, line_start: &str) -> Option<u64> {
        let (_, _, text) = http(&self.addr, "GET", "/metrics", &[], "");
        text.lines()
            .find_map(|l| l.strip_prefix(line_start))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
    }
}

/// Traffic: 12 events to `shop`, event `i` delivered `1 + i % 3` times; one event to `late`,
/// delivered again after its 1 s TTL: a late duplicate.
fn traffic(gw: &Gateway) {
    for i in 0..12 {
        for _ in 0..=(i % 3) {
            assert_eq!(gw.deliver("shop", &format!("evt_{i}")), 200);
        }
    }
    assert_eq!(gw.deliver("late", "evt_late"), 200);
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(gw.deliver("late", "evt_late"), 200);
}

/// What the overview shows, read from the page by script.
const READ_OVERVIEW: &str = r#"
const titles = [...document.querySelectorAll('svg[role=img]')].map(s => s.querySelector(':scope > title').textContent);
const texts = [...document.querySelectorAll('svg text')].map(t => t.textContent);
const field = (box, name) => { const d = document.querySelector(`dl[data-${box}] dd[data-field=${name}]`); return d ? (d.dataset.value || d.textContent) : null; };
const advice = {};
for (const dl of document.querySelectorAll('dl[data-advice]')) {
  const o = {};
  for (const dd of dl.querySelectorAll('dd[data-field]')) o[dd.dataset.field] = dd.dataset.value || dd.textContent;
  advice[dl.dataset.advice] = o;
}
const rows = {};
for (const dl of document.querySelectorAll('dl[data-rows]')) {
  const o = {};
  for (const dd of dl.querySelectorAll('dd[data-field]')) o[dd.dataset.field] = dd.textContent;
  rows[dl.dataset.rows] = o;
}
const counters = {};
for (const t of document.querySelectorAll('table[data-counters]')) {
  const o = {};
  for (const td of t.querySelectorAll('td[data-outcome]')) o[td.dataset.outcome] = td.textContent;
  counters[t.dataset.counters] = o;
}
const health = {};
for (const li of document.querySelectorAll('ul.health li')) health[li.dataset.component] = li.textContent;
const visible = (sel) => [...document.querySelectorAll(sel)].filter(e => e.getBoundingClientRect().width > 0).length;
return { titles, texts, advice, rows, counters, health,
  total: document.getElementById('rows-total') ? document.getElementById('rows-total').textContent : '',
  wide: visible('.wide svg'), narrow: visible('.narrow svg'),
  overflow: document.documentElement.scrollWidth - window.innerWidth };
"#;

fn dashboard_in_a_browser(store: &str, name: &str) {
    let Some((chromium, chromedriver)) = browser_tools() else {
        return;
    };
    let gw = Gateway::start(store);
    traffic(&gw);
    let base = format!("http://{}", gw.addr);
    // Without the token, even from loopback (dashboard_token is set): refused, saying why.
    let (status, _, body) = http(&gw.addr, "GET", "/dashboard", &[], "");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("dashboard_token is set"), "{body}");

    let advise = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["advise", "--json", "--config", gw.config.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(advise.status.success(), "{advise:?}");
    let advise: Value = serde_json::from_slice(&advise.stdout).unwrap();

    // A first view sends what reads a long history (the advisor's month, each source's first
    // counts, the record counts) behind the page, which says they are coming until they are in: wait for them, as
    // a person would reload.
    let bearer = format!("Bearer {DASHBOARD_TOKEN}");
    let mut counted = false;
    for _ in 0..100 {
        let (status, _, body) = http(
            &gw.addr,
            "GET",
            "/dashboard?refresh=off",
            &[("authorization", bearer.as_str())],
            "",
        );
        assert_eq!(status, 200, "{body}");
        if ![
            "data-advice-pending",
            "data-deliveries-pending",
            "data-stats-pending",
        ]
        .iter()
        .any(|pending| body.contains(pending))
        {
            counted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        counted,
        "the dashboard's first counts were not in after 10 s"
    );

    for width in [1280u32, 390] {
        let browser = Browser::start(&chromedriver, &chromium, width);
        // ?token= once: the cookie keeps it, and the address loses it.
        browser.open(&format!(
            "{base}/dashboard?refresh=off&token={DASHBOARD_TOKEN}"
        ));
        assert_eq!(
            browser.url(),
            format!("{base}/dashboard"),
            "token out of the address"
        );
        let page = browser.run(READ_OVERVIEW);
        let errors = browser.console_errors();
        assert!(errors.is_empty(), "console at {width}px: {errors:?}");
        let titles: Vec<&str> = page["titles"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for source in ["late", "shop"] {
            for title in [
                format!("{source}: Deliveries by outcome, last hour"),
                format!("{source}: Deliveries by outcome, last day"),
                format!("{source}: dedup records"),
            ] {
                assert_eq!(
                    titles.iter().filter(|t| **t == title).count(),
                    2,
                    "{title} (wide and narrow) in {titles:?}"
                );
            }
        }
        assert_eq!(
            titles
                .iter()
                .filter(|t| t.starts_with("Gap between first receipt and each repeated delivery"))
                .count(),
            4
        );
        let texts: Vec<&str> = page["texts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for label in [
            "bucket start (UTC, by the store's clock)",
            "deliveries per 1m",
            "deliveries per 30m",
            "gap since first receipt (log scale)",
            "repeated deliveries",
            "claimed",
            "duplicate",
            "late duplicate",
        ] {
            assert!(texts.contains(&label), "axis or legend text {label:?}");
        }
        // The figures of `idemgate advise --json`.
        for source in ["late", "shop"] {
            let a = advise["sources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["source"] == source)
                .unwrap();
            let shown = &page["advice"][source];
            assert_eq!(
                shown["verdict"],
                a["verdict"]
                    .as_str()
                    .map(|v| match a["why"].as_str() {
                        Some(why) => format!("{v} ({why})"),
                        None => v.to_owned(),
                    })
                    .unwrap(),
                "{source} verdict"
            );
            for field in [
                "recommended_ttl_s",
                "ttl_s",
                "deliveries",
                "duplicates",
                "late_duplicates",
            ] {
                assert_eq!(
                    shown[field].as_str().unwrap_or_default(),
                    a[field].to_string(),
                    "{source} {field}"
                );
            }
            // The late source's one record lives a second: its live count moves on its own.
            let fields: &[&str] = if source == "shop" {
                &["live_rows", "projected_rows"]
            } else {
                &["projected_rows"]
            };
            for field in fields {
                assert_eq!(
                    page["rows"][source][field].as_str().unwrap_or_default(),
                    a[field].to_string(),
                    "{source} {field}"
                );
            }
        }
        assert_eq!(page["advice"]["late"]["late_duplicates"], "1");
        assert_eq!(page["advice"]["shop"]["duplicates"], "12");
        // The figures of /metrics.
        for (source, outcome) in [
            ("shop", "accepted"),
            ("shop", "duplicate"),
            ("late", "accepted"),
        ] {
            let metric = gw
                .metric(&format!(
                    "idemgate_deliveries_total{{source=\"{source}\",outcome=\"{outcome}\"}} "
                ))
                .unwrap_or_else(|| panic!("{source} {outcome} in /metrics"));
            assert_eq!(
                page["counters"][source][outcome]
                    .as_str()
                    .unwrap_or_default(),
                metric.to_string(),
                "{source} {outcome}"
            );
        }
        assert_eq!(page["counters"]["shop"]["duplicate"], "12");
        let live = gw.metric("idemgate_live_rows ").unwrap();
        // The late source's record expires a second after its claim: between the page's count
        // and the scrape's, it may have gone.
        let total = page["total"].as_str().unwrap();
        let shown: u64 = total
            .split("live records ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no live count in {total:?}"));
        assert!(shown == live || shown == live + 1, "{total} vs {live}");
        for component in ["store", "Redis tier", "sweeper"] {
            assert!(
                page["health"][component].is_string(),
                "{component} in {}",
                page["health"]
            );
        }
        // OK, or WARNING when a loaded machine made the lookup slow; never FAILING.
        assert!(
            !page["health"]["store"]
                .as_str()
                .unwrap()
                .contains("FAILING")
        );
        // The width decides which charts show, and nothing scrolls sideways.
        if width < 600 {
            assert!(
                page["narrow"].as_u64() > Some(0) && page["wide"] == 0,
                "{page}"
            );
        } else {
            assert!(
                page["wide"].as_u64() > Some(0) && page["narrow"] == 0,
                "{page}"
            );
        }
        assert!(
            page["overflow"].as_i64() <= Some(0),
            "sideways scroll: {}",
            page["overflow"]
        );
        browser.screenshot(&format!("{name}-overview-{width}"));

        // The search box leads to the event's page, which shows the late duplicate.
        let option = browser.element("select[name=source] option:first-child");
        browser.call("POST", &format!("/element/{option}/click"), json!({}));
        let input = browser.element("input[name=event_id]");
        browser.call(
            "POST",
            &format!("/element/{input}/value"),
            json!({"text": "evt_late"}),
        );
        let button = browser.element("form.search button");
        browser.call("POST", &format!("/element/{button}/click"), json!({}));
        let want = format!("{base}/dashboard/events/late/evt_late");
        let clicked = Instant::now();
        while browser.url() != want && clicked.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(browser.url(), want, "the search box leads to the event");
        let event = browser.run(
            "return { outcomes: [...document.querySelectorAll('li[data-outcome]')].map(l => l.dataset.outcome), alert: (document.querySelector('[role=alert]') || {}).textContent || '', id: document.getElementById('event-id').textContent };",
        );
        assert_eq!(event["id"], "evt_late");
        assert_eq!(event["outcomes"], json!(["claimed", "late_duplicate"]));
        assert!(
            event["alert"]
                .as_str()
                .unwrap()
                .contains("1 late duplicate"),
            "{event}"
        );
        let errors = browser.console_errors();
        assert!(errors.is_empty(), "console on the event page: {errors:?}");
        browser.screenshot(&format!("{name}-event-{width}"));
    }
}

#[test]
fn dashboard_in_a_browser_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    dashboard_in_a_browser(
        &format!("path = {:?}", dir.path().join("data").display().to_string()),
        "sqlite",
    );
}

#[test]
fn dashboard_in_a_browser_on_postgres() {
    let url = std::env::var("IDEMGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@localhost/test".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connected = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio_postgres::connect(&url, tokio_postgres::NoTls),
        )
        .await
        .map_err(|_| "timed out".to_owned())
        .and_then(|r| r.map_err(|e| e.to_string()))
    });
    let Some((client, conn)) = idemgate_core::testkit::require_service(
        connected,
        "start PostgreSQL on 127.0.0.1:5432 (trust auth) or set IDEMGATE_TEST_POSTGRES",
    ) else {
        return;
    };
    rt.spawn(conn);
    let schema = format!("dashboard_browser_{}", std::process::id());
    // Dropped however the test ends.
    struct DropSchema<'a>(
        &'a tokio::runtime::Runtime,
        &'a tokio_postgres::Client,
        &'a str,
    );
    impl Drop for DropSchema<'_> {
        fn drop(&mut self) {
            let _ = self.0.block_on(
                self.1
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.2)),
            );
        }
    }
    let _drop = DropSchema(&rt, &client, &schema);
    dashboard_in_a_browser(
        &format!("kind = \"postgres\"\nurl = {url:?}\n[store.postgres]\nschema = {schema:?}"),
        "postgres",
    );
}
