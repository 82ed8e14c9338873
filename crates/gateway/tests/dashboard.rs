//! `/dashboard` without a browser, one request at a time through `app(state).oneshot(..)`: who
//! may open it, what the pages say (the same figures as `/metrics` and the store), that every
//! chart is well-formed SVG with its title, and that sender input (event ids) is escaped. The
//! pages in a real browser: `crates/cli/tests/dashboard_browser.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use idemgate_core::{ClaimOutcome, Key, ManualClock, MemoryStore};
use idemgate_gateway::{AnyStore, AppState, Config, app};
use serde_json::Value;
use tower::ServiceExt;

const TOKEN: &str = "worker-token-0123456789";
const DASHBOARD_TOKEN: &str = "dashboard-token-0123456789";

fn config(extra: &str) -> Config {
    Config::from_toml(&format!(
        "api_tokens = [\"{TOKEN}\"]\n{extra}\n\
         [[source]]\nname = \"jobs\"\nprovider = \"none\"\nretry_window = \"1h\"\n\
         event_id_header = \"x-event-id\"\n\
         [[source]]\nname = \"queue\"\nprovider = \"stripe\"\nsecrets = [\"whsec_q\"]\n\
         mode = \"inbox\"\nforward_url = \"http://127.0.0.1:9/hook\"\n"
    ))
    .unwrap()
}

struct Page {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    text: String,
}

impl Page {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }
}

/// A GET of `path` from `peer` (none: the address is unknown), with extra headers.
async fn get(
    router: &axum::Router,
    path: &str,
    peer: Option<&str>,
    headers: &[(header::HeaderName, &str)],
) -> Page {
    let mut req = Request::builder().uri(path);
    for (name, value) in headers {
        req = req.header(name, *value);
    }
    let mut req = req.body(Body::empty()).unwrap();
    if let Some(peer) = peer {
        let addr: SocketAddr = peer.parse().unwrap();
        req.extensions_mut().insert(ConnectInfo(addr));
    }
    let response = router.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Page {
        status,
        headers,
        text: String::from_utf8(body.to_vec()).unwrap(),
    }
}

const LOOPBACK: Option<&str> = Some("127.0.0.1:50000");
const REMOTE: Option<&str> = Some("203.0.113.9:50000");

fn assert_refused(p: &Page, says: &str) {
    assert_eq!(p.status, StatusCode::FORBIDDEN, "{}", p.text);
    assert_eq!(p.header(header::CONTENT_TYPE), "application/problem+json");
    assert_eq!(
        p.json()["type"],
        "urn:idemgate:problem:dashboard_forbidden",
        "{}",
        p.text
    );
    assert_eq!(
        p.header("idemgate-outcome".parse().unwrap()),
        "dashboard_forbidden"
    );
    let detail = p.json()["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains(says), "{detail:?} should say {says:?}");
}

#[tokio::test]
async fn without_a_token_only_loopback_peers_may_look() {
    let router = app(AppState::new(&config(""), AnyStore::memory(), None).unwrap());
    let page = get(&router, "/dashboard", LOOPBACK, &[]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    assert_eq!(
        page.header(header::CONTENT_TYPE),
        "text/html; charset=utf-8"
    );
    assert!(
        page.header(header::CONTENT_SECURITY_POLICY)
            .contains("default-src 'none'")
    );
    assert_eq!(page.header(header::CACHE_CONTROL), "no-store");
    for ipv6 in ["[::1]:4000", "[::ffff:127.0.0.1]:4000"] {
        let page = get(&router, "/dashboard", Some(ipv6), &[]).await;
        assert_eq!(page.status, StatusCode::OK, "{ipv6}");
    }
    assert_refused(
        &get(&router, "/dashboard", REMOTE, &[]).await,
        "loopback peers only, not 203.0.113.9",
    );
    assert_refused(
        &get(&router, "/dashboard", None, &[]).await,
        "address is not known",
    );
    // An API token opens it from anywhere; a wrong one is refused, from loopback too.
    let bearer = format!("Bearer {TOKEN}");
    let page = get(
        &router,
        "/dashboard",
        REMOTE,
        &[(header::AUTHORIZATION, &bearer)],
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    let wrong = [(header::AUTHORIZATION, "Bearer not-the-token-at-all")];
    assert_refused(
        &get(&router, "/dashboard", LOOPBACK, &wrong).await,
        "neither dashboard_token nor one of api_tokens",
    );
    // Every dashboard route is behind the same door.
    for path in [
        "/dashboard/events/jobs/evt_1",
        "/dashboard/events?source=jobs&event_id=evt_1",
    ] {
        assert_refused(
            &get(&router, path, REMOTE, &[]).await,
            "loopback peers only",
        );
    }
}

#[tokio::test]
async fn a_dashboard_token_is_needed_from_everyone_and_kept_in_a_cookie() {
    let config = config(&format!("dashboard_token = \"{DASHBOARD_TOKEN}\""));
    let router = app(AppState::new(&config, AnyStore::memory(), None).unwrap());
    assert_refused(
        &get(&router, "/dashboard", LOOPBACK, &[]).await,
        "dashboard_token is set",
    );
    let bearer = format!("Bearer {DASHBOARD_TOKEN}");
    let page = get(
        &router,
        "/dashboard",
        REMOTE,
        &[(header::AUTHORIZATION, &bearer)],
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    // ?token= sets the cookie and leads to the same page without the token in its address.
    let page = get(
        &router,
        &format!("/dashboard/events/jobs/evt_1?token={DASHBOARD_TOKEN}"),
        REMOTE,
        &[],
    )
    .await;
    assert_eq!(page.status, StatusCode::SEE_OTHER);
    assert_eq!(
        page.header(header::LOCATION),
        "/dashboard/events/jobs/evt_1"
    );
    let cookie = page.header(header::SET_COOKIE).to_owned();
    assert_eq!(
        cookie,
        format!("idemgate_dashboard={DASHBOARD_TOKEN}; Path=/dashboard; HttpOnly; SameSite=Strict")
    );
    let jar = format!("theme=dark; idemgate_dashboard={DASHBOARD_TOKEN}");
    let page = get(&router, "/dashboard", REMOTE, &[(header::COOKIE, &jar)]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let bad = get(
        &router,
        "/dashboard?token=guess-guess-guess-guess",
        REMOTE,
        &[],
    )
    .await;
    assert_refused(&bad, "the token in ?token=");
    assert!(bad.headers.get(header::SET_COOKIE).is_none());
    let stale = [(
        header::COOKIE,
        "idemgate_dashboard=an-old-token-long-enough",
    )];
    assert_refused(&get(&router, "/dashboard", REMOTE, &stale).await, "cookie");
    // Behind a proxy that terminated TLS, the cookie is kept off plain HTTP.
    for proxy in [
        (
            header::HeaderName::from_static("x-forwarded-proto"),
            "https",
        ),
        (
            header::FORWARDED,
            "for=192.0.2.60;proto=https;by=203.0.113.43",
        ),
    ] {
        let page = get(
            &router,
            &format!("/dashboard?token={DASHBOARD_TOKEN}"),
            REMOTE,
            &[proxy],
        )
        .await;
        assert!(
            page.header(header::SET_COOKIE)
                .ends_with("; SameSite=Strict; Secure"),
            "{}",
            page.header(header::SET_COOKIE)
        );
    }
}

/// Tokens carry scopes: a token for the claim API opens neither the dashboard nor the replay of
/// dead letters, and a sender's token is not a worker's.
#[tokio::test]
async fn a_token_opens_only_what_its_scopes_allow() {
    let config = Config::from_toml(
        "api_tokens = [{ token = \"workers-token-0123456789\", scopes = [\"claims\"] }, { token = \"sender-token-0123456789\", scopes = [\"send\"] }, { token = \"ops-token-0123456789abc\", scopes = [\"dashboard\", \"replay\"] }]\n\
         [[source]]\nname = \"jobs\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_header = \"x-event-id\"\n",
    )
    .unwrap();
    let router = app(AppState::new(&config, AnyStore::memory(), None).unwrap());
    let call = |method: &str, path: &str, token: &str, body: &str| {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-event-id", "e-1")
            .body(Body::from(body.to_owned()))
            .unwrap();
        let router = router.clone();
        async move {
            let mut req = req;
            req.extensions_mut().insert(ConnectInfo(
                "203.0.113.9:50000".parse::<SocketAddr>().unwrap(),
            ));
            let r = router.oneshot(req).await.unwrap();
            let outcome = r
                .headers()
                .get("idemgate-outcome")
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default();
            (r.status().as_u16(), outcome)
        }
    };
    let claim = r#"{"source":"jobs","event_id":"e-9"}"#;
    let workers = "workers-token-0123456789";
    let sender = "sender-token-0123456789";
    let ops = "ops-token-0123456789abc";
    assert_eq!(call("POST", "/v1/claims", workers, claim).await.0, 201);
    assert_eq!(
        call("POST", "/v1/claims", sender, claim).await,
        (403, "insufficient_scope".to_owned())
    );
    assert_eq!(
        call(
            "POST",
            "/v1/sources/jobs/replay",
            workers,
            r#"{"reason":"x"}"#
        )
        .await,
        (403, "insufficient_scope".to_owned())
    );
    assert_eq!(call("POST", "/hooks/jobs", sender, "{}").await.0, 200);
    assert_eq!(
        call("POST", "/hooks/jobs", workers, "{}").await,
        (403, "insufficient_scope".to_owned())
    );
    assert_eq!(call("GET", "/dashboard", ops, "").await.0, 200);
    assert_eq!(call("GET", "/dashboard", workers, "").await.0, 403);
    assert_eq!(
        call("GET", "/v1/events/jobs/e-1", ops, "").await,
        (403, "insufficient_scope".to_owned())
    );
    assert_eq!(
        call("GET", "/v1/events/jobs/e-1", "nobodys-token-0123456789", "").await,
        (401, "unauthorized".to_owned())
    );
}

#[test]
fn a_dashboard_token_must_be_long_and_fit_in_a_cookie() {
    for (token, says) in [
        ("short", "at least 16"),
        ("change-me-to-a-long-random-token", "placeholder"),
        ("a token with spaces in it", "printable ASCII"),
        ("semicolons;are;not;allowed;here", "';'"),
    ] {
        let e = Config::from_toml(&format!("dashboard_token = \"{token}\"")).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("dashboard_token") && text.contains(says),
            "{token}: {text}"
        );
    }
}

/// Every `<svg>...</svg>` in `html`.
fn charts(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<svg ") {
        let end = rest[start..].find("</svg>").expect("closed") + start + "</svg>".len();
        out.push(&rest[start..end]);
        rest = &rest[end..];
    }
    out
}

async fn claim(state: &AppState, source: &str, event_id: &str) -> ClaimOutcome {
    let src = state.source(source).unwrap();
    let req = src.claim_request(Key::parse(source, event_id).unwrap());
    state.claim(req).await.unwrap()
}

#[tokio::test]
async fn the_overview_shows_every_chart_with_the_store_and_metrics_figures() {
    let dir = tempfile::tempdir().unwrap();
    let store = AnyStore::new(idemgate_sqlite::SqliteStore::open(dir.path()).unwrap());
    let state = AppState::new(&config(""), store, None).unwrap();
    let router = app(state.clone());
    // Deliveries through the claim API, so that /metrics counts them too.
    let bearer = format!("Bearer {TOKEN}");
    for (id, times) in [("evt_a", 3), ("evt_b", 1), ("evt_c", 2)] {
        for _ in 0..times {
            let req = Request::post("/v1/claims")
                .header(header::AUTHORIZATION, &bearer)
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(format!(
                    "{{\"source\":\"jobs\",\"event_id\":\"{id}\"}}"
                )))
                .unwrap();
            router.clone().oneshot(req).await.unwrap();
        }
    }
    let page = get(&router, "/dashboard?refresh=off", LOOPBACK, &[]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let html = &page.text;
    assert!(!html.contains("http-equiv=\"refresh\""), "refresh=off");
    assert!(!html.contains("<script"), "no script at all");
    let svgs = charts(html);
    for svg in &svgs {
        idemgate_chart::xml::check(svg).unwrap_or_else(|e| panic!("{e}: {svg}"));
        assert!(
            svg.contains("role=\"img\"") && svg.contains("<title id="),
            "{svg}"
        );
    }
    // Per source: the hour and the day (wide and narrow), the gap histogram, the rows gauge;
    // the inbox source also its queue lag.
    for title in [
        "jobs: Deliveries by outcome, last hour",
        "jobs: Deliveries by outcome, last day",
        "Gap between first receipt and each repeated delivery, last 30d",
        "jobs: dedup records",
        "queue: Deliveries by outcome, last hour",
        "queue: inbox queue lag",
    ] {
        let n = svgs
            .iter()
            .filter(|s| s.contains(&format!(">{title}</title>")))
            .count();
        assert!(n >= 2, "{title}: {n} charts (wide and narrow)");
    }
    assert!(html.contains(">bucket start (UTC, by the store&apos;s clock)</text>"));
    assert!(html.contains(">deliveries per 1m</text>"));
    // The hour's bars: 3 claims (first receipts) and 3 in-flight answers of jobs.
    assert!(
        html.contains("jobs: Deliveries by outcome, last hour: 6 deliveries in all; claimed 3, reclaimed 0, duplicate 0, in flight 3"),
        "{html}"
    );
    // The same counters /metrics shows.
    let metrics = get(&router, "/metrics", LOOPBACK, &[]).await.text;
    for (outcome, n) in [("claimed", 3), ("in_flight", 3)] {
        assert!(
            metrics.contains(&format!(
                "idemgate_deliveries_total{{source=\"jobs\",outcome=\"{outcome}\"}} {n}"
            )),
            "{metrics}"
        );
        assert!(
            html.contains(&format!("data-outcome=\"{outcome}\">{n}</td>")),
            "{outcome}"
        );
    }
    let live = metrics
        .lines()
        .find_map(|l| l.strip_prefix("idemgate_live_rows "))
        .unwrap();
    assert!(
        html.contains(&format!("live records <strong>{live}</strong>")),
        "{live}"
    );
    assert!(html.contains("data-field=\"live_rows\">3</dd>"));
    assert!(html.contains("data-field=\"verdict\">ok</dd>"));
    // The health row: each component with its light in words, not colour alone.
    for (component, word) in [("store", "OK"), ("Redis tier", "n/a"), ("inbox", "OK")] {
        let at = html
            .find(&format!("data-component=\"{component}\""))
            .unwrap_or_else(|| panic!("{component}"));
        assert!(html[at..at + 300].contains(word), "{component}");
    }
    // No sweeper runs in this state (nothing started it): said so, amber.
    assert!(html.contains("No run yet."));
    // A later view counts only the last buckets again, and adds what came since.
    claim(&state, "jobs", "evt_d").await;
    let again = get(&router, "/dashboard?refresh=off", LOOPBACK, &[])
        .await
        .text;
    assert!(
        again.contains("jobs: Deliveries by outcome, last hour: 7 deliveries in all; claimed 4,"),
        "{again}"
    );
    assert!(
        again.contains("jobs: Deliveries by outcome, last day: 7 deliveries in all; claimed 4,")
    );
}

#[tokio::test]
async fn the_event_page_escapes_sender_input_and_shows_a_late_duplicate() {
    let clock = ManualClock::starting_now();
    let store = AnyStore::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let state = AppState::new(&config(""), store, None).unwrap();
    let router = app(state.clone());
    let evil = "<script>alert(\"x\")</script>&'";
    let ClaimOutcome::Claimed { token, .. } = claim(&state, "jobs", evil).await else {
        panic!("claimed");
    };
    idemgate_core::ClaimStore::complete(&state.store, &token)
        .await
        .unwrap();
    claim(&state, "jobs", evil).await; // duplicate
    // Past the TTL (an hour and its margins), within the late-duplicate horizon (30 days).
    clock.advance(Duration::from_secs(20 * 86_400));
    let late = claim(&state, "jobs", evil).await;
    assert!(
        matches!(
            late,
            ClaimOutcome::Claimed {
                late_duplicate: Some(_),
                ..
            }
        ),
        "{late:?}"
    );
    // The search box leads to the event's page, its id encoded in the path.
    let found = get(
        &router,
        "/dashboard/events?source=jobs&event_id=%3Cscript%3Ealert(%22x%22)%3C%2Fscript%3E%26%27",
        LOOPBACK,
        &[],
    )
    .await;
    assert_eq!(found.status, StatusCode::SEE_OTHER, "{}", found.text);
    let location = found.header(header::LOCATION).to_owned();
    assert_eq!(
        location,
        "/dashboard/events/jobs/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E%26%27"
    );
    let page = get(&router, &location, LOOPBACK, &[]).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.text);
    let html = &page.text;
    assert!(!html.contains("<script"), "{html}");
    assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&apos;"));
    assert!(html.contains("1 late duplicate: this event came again after its record expired"));
    let outcomes: Vec<&str> = html
        .match_indices("data-outcome=\"")
        .map(|(i, m)| {
            let rest = &html[i + m.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect();
    assert_eq!(
        outcomes,
        ["claimed", "completed", "duplicate", "late_duplicate"],
        "the history, oldest first"
    );
    // The event's figures are the lookup API's.
    let api = get(
        &router,
        "/v1/events/jobs/%3Cscript%3Ealert(%22x%22)%3C%2Fscript%3E%26'",
        LOOPBACK,
        &[(header::AUTHORIZATION, &format!("Bearer {TOKEN}"))],
    )
    .await
    .json();
    let history = api["history"].as_array().unwrap();
    assert_eq!(history.len(), 4);
    for h in history {
        assert!(html.contains(&format!(
            "<time datetime=\"{}\">",
            h["at"].as_str().unwrap()
        )));
    }
    // Bad input: an unknown source is 404, an id that is not valid 400, both problems.
    let unknown = get(&router, "/dashboard/events/nope/evt_1", LOOPBACK, &[]).await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(
        unknown.json()["type"],
        "urn:idemgate:problem:unknown_source"
    );
    let empty = get(
        &router,
        "/dashboard/events?source=jobs&event_id=+",
        LOOPBACK,
        &[],
    )
    .await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        empty.json()["type"],
        "urn:idemgate:problem:invalid_event_id"
    );
}
