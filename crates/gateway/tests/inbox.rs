//! Inbox mode end to end on the embedded SQLite store: acknowledged at once, delivered from the
//! queue, retried, dead-lettered, replayed, with concurrency held and shutdown leaving the queue
//! intact.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::http::{HeaderMap, StatusCode};
use idemgate_core::inbox::{Inbox, ReplayFilter};
use support::{Gateway, sign};

/// A downstream that answers from a script: the first `fail` deliveries of each event get
/// `status`, later ones 200 after `delay`. It records each event's attempts and the most
/// deliveries it ever had in flight at once.
/// Each event's deliveries: attempt and when.
type Seen = HashMap<String, Vec<(u32, Instant)>>;

#[derive(Clone)]
struct Downstream {
    url: String,
    seen: Arc<Mutex<Seen>>,
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    script: Arc<Mutex<Script>>,
}

#[derive(Clone, Copy)]
struct Script {
    fail: usize,
    status: u16,
    retry_after: Option<u64>,
    delay: Duration,
}

impl Downstream {
    async fn start(script: Script) -> Self {
        let d = Self {
            url: String::new(),
            seen: Arc::default(),
            in_flight: Arc::default(),
            most: Arc::default(),
            script: Arc::new(Mutex::new(script)),
        };
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let d = d.clone();
                move |headers: HeaderMap| {
                    let d = d.clone();
                    async move { d.answer(&headers).await }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url: format!("http://{addr}/hook"),
            ..d
        }
    }

    async fn answer(&self, headers: &HeaderMap) -> axum::response::Response {
        use axum::response::IntoResponse;
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let key = text(headers, "idempotency-key");
        let attempt = text(headers, "idemgate-attempt").parse().unwrap_or(0);
        let (nth, script) = {
            let mut seen = self.seen.lock().unwrap();
            let list = seen.entry(key).or_default();
            list.push((attempt, Instant::now()));
            (list.len(), *self.script.lock().unwrap())
        };
        tokio::time::sleep(script.delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if nth <= script.fail {
            let mut r = StatusCode::from_u16(script.status).unwrap().into_response();
            if let Some(s) = script.retry_after {
                r.headers_mut().insert("retry-after", s.into());
            }
            r
        } else {
            StatusCode::OK.into_response()
        }
    }

    fn attempts(&self, key: &str) -> Vec<u32> {
        let seen = self.seen.lock().unwrap();
        seen.get(key)
            .map(|l| l.iter().map(|(a, _)| *a).collect())
            .unwrap_or_default()
    }

    fn times(&self, key: &str) -> Vec<Instant> {
        let seen = self.seen.lock().unwrap();
        seen.get(key)
            .map(|l| l.iter().map(|(_, t)| *t).collect())
            .unwrap_or_default()
    }

    fn total(&self) -> usize {
        self.seen.lock().unwrap().values().map(Vec::len).sum()
    }

    fn set(&self, script: Script) {
        *self.script.lock().unwrap() = script;
    }
}

fn text(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn ok(delay: Duration) -> Script {
    Script {
        fail: 0,
        status: 200,
        retry_after: None,
        delay,
    }
}

fn config(url: &str, dispatch: &str) -> String {
    format!(
        "[[source]]\nname = \"shop\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n\
         mode = \"inbox\"\nforward_url = \"{url}\"\n[source.dispatch]\n{dispatch}\n"
    )
}

async fn deliver(gw: &Gateway, event_id: &str) -> support::Answer {
    let body = format!("{{\"id\": \"{event_id}\", \"object\": \"event\"}}");
    let mut headers = sign(gw, "shop", event_id, SystemTime::now(), body.as_bytes());
    headers.insert("content-type", "application/json".parse().unwrap());
    gw.post("/hooks/shop", headers, body).await
}

/// Waits until `done` holds, up to `limit`.
async fn until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn store(gw: &Gateway) -> idemgate_sqlite::SqliteStore {
    idemgate_sqlite::SqliteStore::open_existing(gw.data_dir(), Default::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_downstream_gets_each_event_once_while_senders_are_answered_at_once() {
    let down = Downstream::start(ok(Duration::from_millis(300))).await;
    let gw = Gateway::start(&config(&down.url, "concurrency = 2")).await;
    // An empty queue is on every scrape, at 0 (absent series would fire `absent()` alerts).
    let metrics = gw.get("/metrics").await.unwrap();
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    for series in [
        "idemgate_inbox_pending{source=\"shop\"} 0",
        "idemgate_inbox_in_flight{source=\"shop\"} 0",
        "idemgate_inbox_dead{source=\"shop\"} 0",
        "idemgate_inbox_oldest_pending_seconds{source=\"shop\"} 0.0",
    ] {
        assert!(text.contains(series), "no {series} in\n{text}");
    }
    let started = Instant::now();
    let a = deliver(&gw, "evt_1").await;
    assert_eq!((a.status, a.outcome()), (202, "queued"), "{:?}", a.body);
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "acknowledged before the downstream answered"
    );
    // Every retry is a duplicate, whatever the dispatch state.
    let a = deliver(&gw, "evt_1").await;
    assert_eq!((a.status, a.outcome()), (200, "duplicate"));
    until(Duration::from_secs(10), "the delivery", || {
        down.attempts("shop:evt_1") == [1]
    })
    .await;
    let a = deliver(&gw, "evt_1").await;
    assert_eq!((a.status, a.outcome()), (200, "duplicate"));

    // History: claimed, then completed once the downstream took it.
    use idemgate_core::store::ClaimStore;
    let s = store(&gw);
    let key = idemgate_core::Key::parse("shop", "evt_1").unwrap();
    let started = Instant::now();
    loop {
        let view = s.lookup(&key).await.unwrap();
        let outcomes: Vec<_> = view.history.iter().map(|h| h.outcome.as_str()).collect();
        if outcomes.contains(&"completed") {
            assert_eq!(outcomes[0], "claimed", "{outcomes:?}");
            assert_eq!(
                outcomes.iter().filter(|o| **o == "completed").count(),
                1,
                "{outcomes:?}"
            );
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{outcomes:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(down.total(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_retried_with_growing_attempts_and_completed_once() {
    let down = Downstream::start(Script {
        fail: 2,
        status: 500,
        retry_after: None,
        delay: Duration::ZERO,
    })
    .await;
    let gw = Gateway::start(&config(
        &down.url,
        "backoff = \"20ms\"\nmax_backoff = \"50ms\"",
    ))
    .await;
    let a = deliver(&gw, "evt_2").await;
    assert_eq!(a.status, 202);
    until(Duration::from_secs(10), "three attempts", || {
        down.attempts("shop:evt_2").len() >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        down.attempts("shop:evt_2"),
        [1, 2, 3],
        "delivered once it succeeded"
    );
    let stats = store(&gw).inbox_stats().await.unwrap();
    assert!(
        stats.iter().all(|s| s.pending == 0 && s.in_flight == 0),
        "{stats:?}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    let down = Downstream::start(Script {
        fail: 1,
        status: 503,
        retry_after: Some(1),
        delay: Duration::ZERO,
    })
    .await;
    let gw = Gateway::start(&config(
        &down.url,
        "backoff = \"10ms\"\nmax_backoff = \"5s\"",
    ))
    .await;
    assert_eq!(deliver(&gw, "evt_3").await.status, 202);
    until(Duration::from_secs(10), "the second attempt", || {
        down.attempts("shop:evt_3").len() >= 2
    })
    .await;
    let times = down.times("shop:evt_3");
    let gap = times[1] - times[0];
    assert!(gap >= Duration::from_millis(950), "retried after {gap:?}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_always_failing_downstream_dead_letters_and_replay_delivers_once_it_is_fixed() {
    let down = Downstream::start(Script {
        fail: usize::MAX,
        status: 500,
        retry_after: None,
        delay: Duration::ZERO,
    })
    .await;
    let gw = Gateway::start(&config(
        &down.url,
        "max_attempts = 3\nbackoff = \"10ms\"\nmax_backoff = \"20ms\"",
    ))
    .await;
    assert_eq!(deliver(&gw, "evt_4").await.status, 202);
    let s = store(&gw);
    let mut dead = Vec::new();
    let started = Instant::now();
    while dead.is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "never dead");
        tokio::time::sleep(Duration::from_millis(50)).await;
        dead = s
            .dead_letters(&ReplayFilter::default(), std::num::NonZeroU32::MIN)
            .await
            .unwrap();
    }
    assert_eq!(down.attempts("shop:evt_4"), [1, 2, 3]);
    assert_eq!(dead[0].attempts.len(), 3, "{dead:?}");
    assert!(dead[0].attempts.iter().all(|a| a.status == Some(500)));
    assert!(dead[0].queued.body.starts_with(b"{\"id\": \"evt_4\""));
    // Still a duplicate to its sender.
    assert_eq!(deliver(&gw, "evt_4").await.outcome(), "duplicate");
    let metrics = gw.get("/metrics").await.unwrap();
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(
        text.contains("idemgate_inbox_dead{source=\"shop\"} 1"),
        "{text}"
    );
    // /healthz and the dashboard say the same of it: a warning, naming the dead letter.
    let health = gw.get("/healthz").await.unwrap().json();
    assert_eq!(health["status"], "degraded", "{health}");
    let inbox = health["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "inbox")
        .unwrap()
        .clone();
    assert_eq!(inbox["status"], "warn", "{inbox}");
    assert!(
        inbox["error"].as_str().unwrap().contains("1 dead letter"),
        "{inbox}"
    );
    let page = String::from_utf8_lossy(&gw.get("/dashboard").await.unwrap().body).into_owned();
    assert!(
        page.contains("shop: 1 dead letter wait"),
        "the dashboard agrees"
    );
    // The event's page tells its story: dead, after three failed attempts.
    let event = gw.get("/dashboard/events/shop/evt_4").await.unwrap();
    let event = String::from_utf8_lossy(&event.body).into_owned();
    assert!(event.contains("data-inbox-state=\"dead\""), "{event}");
    assert!(event.contains("attempt 3 failed"), "{event}");
    assert!(event.contains("HTTP 500"), "{event}");
    assert!(
        event.contains("<dt>delivered</dt><dd>not yet</dd>"),
        "{event}"
    );

    // The overview lists the dead letter with its last error, the downstream's last answer and
    // the source's latest deliveries.
    for part in [
        "data-dead=\"evt_4\"",
        "downstream answered 500",
        "data-field=\"downstream_last\">failed: the downstream answered 500",
        "data-recent=\"shop\"",
        "data-outcome=\"dead_lettered\"",
    ] {
        assert!(page.contains(part), "no {part:?} in the dashboard");
    }

    down.set(ok(Duration::ZERO));
    // Replayed with the dashboard's button: the page's form token, a reason, one event.
    let form_token = page
        .split("name=\"form_token\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a form token in the page")
        .to_owned();
    let form = |body: String, extra: &[(&str, &str)]| {
        let mut h = support::headers(&[("content-type", "application/x-www-form-urlencoded")]);
        for (k, v) in extra {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        (h, body)
    };
    let (h, body) = form(
        "form_token=wrong&source=shop&event_id=evt_4&reason=x".into(),
        &[],
    );
    assert_eq!(gw.post("/dashboard/replay", h, body).await.status, 403);
    let (h, body) = form(
        format!("form_token={form_token}&source=shop&event_id=evt_4&reason=x"),
        &[("sec-fetch-site", "cross-site")],
    );
    assert_eq!(gw.post("/dashboard/replay", h, body).await.status, 403);
    let (h, body) = form(
        format!("form_token={form_token}&source=shop&event_id=evt_4&reason=+"),
        &[],
    );
    let r = gw.post("/dashboard/replay", h, body).await;
    assert_eq!((r.status, r.outcome()), (400, "invalid_reason"));
    assert_eq!(
        s.dead_letters(&ReplayFilter::default(), std::num::NonZeroU32::MIN)
            .await
            .unwrap()
            .len(),
        1,
        "refused forms moved nothing"
    );
    let (h, body) = form(
        format!("form_token={form_token}&source=shop&event_id=evt_4&reason=downstream+fixed"),
        &[],
    );
    let r = gw.post("/dashboard/replay", h, body).await;
    assert_eq!((r.status, r.outcome()), (303, "replayed"), "{:?}", r.body);
    until(Duration::from_secs(10), "the replayed delivery", || {
        down.attempts("shop:evt_4").len() == 4
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(down.attempts("shop:evt_4"), [1, 2, 3, 4]);
    use idemgate_core::store::ClaimStore;
    let view = s
        .lookup(&idemgate_core::Key::parse("shop", "evt_4").unwrap())
        .await
        .unwrap();
    let replayed = view
        .history
        .iter()
        .find(|h| h.outcome == idemgate_core::HistoryOutcome::Replayed)
        .expect("a replayed row");
    assert_eq!(replayed.note.as_deref(), Some("downstream fixed"));
    // Every failed attempt is in history, with its error: after the delivery too, when the item
    // (and its attempt log) is gone.
    let failed: Vec<_> = view
        .history
        .iter()
        .filter(|h| {
            matches!(
                h.outcome,
                idemgate_core::HistoryOutcome::AttemptFailed
                    | idemgate_core::HistoryOutcome::DeadLettered
            )
        })
        .map(|h| (h.attempt, h.note.clone().unwrap_or_default()))
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert!(
        failed.iter().all(|(_, note)| note.contains("500")),
        "{failed:?}"
    );
    let event = gw.get("/dashboard/events/shop/evt_4").await.unwrap();
    let event = String::from_utf8_lossy(&event.body).into_owned();
    assert!(event.contains("data-inbox-state=\"delivered\""), "{event}");
    assert!(event.contains("downstream fixed"), "{event}");
    let health = gw.get("/healthz").await.unwrap().json();
    assert_eq!(health["status"], "ok", "{health}");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_is_never_exceeded() {
    let down = Downstream::start(ok(Duration::from_millis(100))).await;
    let gw = Gateway::start(&config(&down.url, "concurrency = 3")).await;
    for i in 0..15 {
        assert_eq!(deliver(&gw, &format!("evt_c{i}")).await.status, 202);
    }
    until(Duration::from_secs(20), "every delivery", || {
        down.total() >= 15
    })
    .await;
    assert!(down.most.load(Ordering::SeqCst) <= 3, "more than 3 at once");
    assert_eq!(down.most.load(Ordering::SeqCst), 3, "the slots were used");
    assert_eq!(down.total(), 15, "each once");
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_gateway_leaves_its_queue_and_the_next_one_delivers_it() {
    // A downstream that is down: every item fails its first attempt and is due again later.
    let down = Downstream::start(Script {
        fail: 1,
        status: 503,
        retry_after: None,
        delay: Duration::ZERO,
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{}\n[store]\nkind = \"sqlite\"\npath = {:?}\n",
        config(&down.url, "backoff = \"1s\"\nmax_backoff = \"1s\""),
        dir.path().display().to_string()
    );
    let gw = Gateway::start_with(&text).await;
    for i in 0..5 {
        assert_eq!(deliver(&gw, &format!("evt_s{i}")).await.status, 202);
    }
    until(Duration::from_secs(10), "first attempts", || {
        down.total() >= 5
    })
    .await;
    gw.stop().await;
    // A second attempt may already have begun (the backoff has full jitter): the stopping
    // dispatcher lets it settle, and it succeeds. Every other item stays queued.
    let delivered = down.total() as u64 - 5;
    let s = idemgate_sqlite::SqliteStore::open_existing(dir.path(), Default::default()).unwrap();
    let stats = s.inbox_stats().await.unwrap();
    assert_eq!(
        stats.iter().map(|s| s.pending).sum::<u64>(),
        5 - delivered,
        "{stats:?}"
    );
    assert!(
        delivered < 5,
        "the first gateway delivered everything before it stopped"
    );

    // The next gateway on the same store delivers them, each once more.
    let gw = Gateway::start_with(&text).await;
    until(Duration::from_secs(15), "second attempts", || {
        down.total() >= 10
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..5 {
        assert_eq!(down.attempts(&format!("shop:evt_s{i}")), [1, 2]);
    }
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_lag_past_the_margin_is_a_metric_and_a_degraded_health() {
    // A downstream that is down for a minute: the item waits in the queue.
    let down = Downstream::start(Script {
        fail: usize::MAX,
        status: 503,
        retry_after: Some(60),
        delay: Duration::ZERO,
    })
    .await;
    let config = format!(
        "[[source]]\nname = \"shop\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n\
         mode = \"inbox\"\nforward_url = \"{}\"\nqueue_lag = \"1s\"\n\
         [source.dispatch]\nmax_age = \"1h\"\n",
        down.url
    );
    let gw = Gateway::start(&config).await;
    let health = gw.get("/healthz").await.unwrap();
    assert_eq!(health.json()["status"], "ok", "{:?}", health.body);
    assert_eq!(deliver(&gw, "evt_lag").await.status, 202);
    until(Duration::from_secs(10), "the first attempt", || {
        down.total() >= 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let health = gw.get("/healthz").await.unwrap();
    assert_eq!(health.status, 200, "the gateway still serves");
    let json = health.json();
    assert_eq!(json["status"], "degraded", "{json}");
    let inbox = json["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "inbox")
        .cloned()
        .unwrap();
    assert_eq!(inbox["status"], "lagging", "{inbox}");
    assert!(
        inbox["error"].as_str().unwrap().contains("queue_lag"),
        "{inbox}"
    );
    let text = String::from_utf8_lossy(&gw.get("/metrics").await.unwrap().body).into_owned();
    let lag: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("idemgate_inbox_oldest_pending_seconds{source=\"shop\"} "))
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    assert!(lag >= 1.0, "{lag}");
    assert!(
        text.contains("idemgate_inbox_pending{source=\"shop\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("idemgate_dispatches_total{source=\"shop\",result=\"retry\"} 1"),
        "{text}"
    );
    gw.stop().await;
}
