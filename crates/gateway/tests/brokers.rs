//! Broker destinations end to end: forward and inbox sources publishing into NATS JetStream and
//! RabbitMQ with the ids and headers the gateway promises, a duplicate acknowledgement counted as
//! delivered, an unroutable message or a broker that is down as a failed attempt (never a lost
//! event), and the window audit at start, on `/healthz` and with `on_short_window = "refuse"`.
//!
//! JetStream and RabbitMQ are the shared ones (`IDEMGATE_TEST_NATS`, default
//! `nats://127.0.0.1:4222`; `IDEMGATE_TEST_AMQP`, default `amqp://guest:guest@127.0.0.1:5672/%2f`):
//! each test uses streams, subjects and queues of its own, deleted afterwards. A test that stops
//! a broker starts a private `nats-server` of its own. Unreachable: fails with `CI` set, else
//! skips.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

use async_nats::jetstream;
use support::{Gateway, sign};

fn nats_url() -> String {
    std::env::var("IDEMGATE_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

fn amqp_url() -> String {
    std::env::var("IDEMGATE_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// `host:port` of the shared NATS.
fn nats_server() -> String {
    nats_url().trim_start_matches("nats://").to_owned()
}

/// `user:pass@host:port` of the shared RabbitMQ (its default vhost).
fn amqp_authority() -> String {
    let rest = amqp_url();
    let rest = rest.trim_start_matches("amqp://");
    rest.split('/').next().unwrap_or(rest).to_owned()
}

async fn jetstream() -> Option<jetstream::Context> {
    let client = async_nats::connect(nats_url())
        .await
        .map_err(|e| format!("NATS at {} does not answer: {e}", nats_url()));
    let client = idemgate_core::testkit::require_service(
        client,
        "start nats-server with JetStream (nats-server -js), or set IDEMGATE_TEST_NATS",
    )?;
    Some(jetstream::new(client))
}

async fn rabbit() -> Option<lapin::Connection> {
    let connection =
        lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
            .await
            .map_err(|e| format!("RabbitMQ at {} does not answer: {e}", amqp_url()));
    idemgate_core::testkit::require_service(
        connection,
        "start rabbitmq-server, or set IDEMGATE_TEST_AMQP",
    )
}

/// A name no other test (or earlier run) uses.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}{}x{nanos}", std::process::id())
}

/// A stream capturing `{prefix}.>`, deduplicating for `window`.
async fn stream(
    js: &jetstream::Context,
    prefix: &str,
    window: Duration,
) -> jetstream::stream::Stream {
    js.create_stream(jetstream::stream::Config {
        name: prefix.to_uppercase(),
        subjects: vec![format!("{prefix}.>")],
        duplicate_window: window,
        storage: jetstream::stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn messages(stream: &mut jetstream::stream::Stream) -> u64 {
    stream.info().await.unwrap().state.messages
}

fn body(id: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"id": id, "object": "event"})).unwrap()
}

fn stripe(forward_url: &str, extra: &str) -> String {
    format!(
        "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = {forward_url:?}\n{extra}\n"
    )
}

async fn deliver(gw: &Gateway, id: &str) -> support::Answer {
    let b = body(id);
    let mut h = sign(gw, "stripe-live", id, SystemTime::now(), &b);
    h.insert("content-type", "application/json".parse().unwrap());
    gw.post("/hooks/stripe-live", h, b).await
}

fn header<'a>(m: &'a jetstream::message::StreamMessage, name: &str) -> &'a str {
    m.headers
        .get(name)
        .map(|v| v.as_str())
        .unwrap_or_else(|| panic!("no header {name} in {:?}", m.headers))
}

/// Waits until `check` holds, for at most `limit`.
async fn until<F: AsyncFnMut() -> bool>(limit: Duration, mut check: F) -> bool {
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_mode_publishes_each_event_once_into_jetstream_with_its_ids_and_headers() {
    let Some(js) = jetstream().await else { return };
    let prefix = unique("idgfw");
    // A window that covers Stripe's three days of retries.
    let mut events = stream(&js, &prefix, Duration::from_secs(4 * 86_400)).await;
    let url = format!("nats://{}/{prefix}.stripe", nats_server());
    let gw = Gateway::start(&stripe(&url, "")).await;

    let first = deliver(&gw, "evt_1").await;
    assert_eq!(
        (first.status, first.outcome()),
        (200, "forwarded"),
        "{:?}",
        first.body
    );
    assert_eq!(messages(&mut events).await, 1);
    let m = events.get_raw_message(1).await.unwrap();
    assert_eq!(m.subject.as_str(), format!("{prefix}.stripe"));
    assert_eq!(
        m.payload.as_ref(),
        body("evt_1").as_slice(),
        "the body as received"
    );
    assert_eq!(header(&m, "Nats-Msg-Id"), "stripe-live:evt_1");
    assert_eq!(header(&m, "Idempotency-Key"), "stripe-live:evt_1");
    assert_eq!(header(&m, "Idemgate-Source"), "stripe-live");
    assert_eq!(header(&m, "Idemgate-Event-Id"), "evt_1");
    assert_eq!(header(&m, "Idemgate-Attempt"), "1");
    assert_eq!(header(&m, "Content-Type"), "application/json");

    // The sender's retry is a duplicate the claim answers: nothing is published again.
    let again = deliver(&gw, "evt_1").await;
    assert_eq!((again.status, again.outcome()), (200, "duplicate"));
    assert_eq!(messages(&mut events).await, 1);

    // The stream already holds evt_2 under its id (an earlier publish whose claim was never
    // completed): JetStream acknowledges the publish as a duplicate, which is delivered.
    js.send_publish(
        format!("{prefix}.stripe"),
        jetstream::message::PublishMessage::build()
            .payload(body("evt_2").into())
            .message_id("stripe-live:evt_2"),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let second = deliver(&gw, "evt_2").await;
    assert_eq!(
        (second.status, second.outcome()),
        (200, "forwarded"),
        "{:?}",
        second.body
    );
    assert_eq!(messages(&mut events).await, 2, "stored once");

    // The window audit: the stream's window covers the source, so /healthz says so.
    let health = gw.get("/healthz").await.unwrap().json();
    assert_eq!(health["status"], "ok", "{health}");
    let component = health["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "destinations")
        .cloned()
        .unwrap_or_else(|| panic!("no destinations component: {health}"));
    assert_eq!(component["status"], "ok");
    gw.stop().await;
    js.delete_stream(prefix.to_uppercase()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_mode_publishes_from_the_queue_once_per_event() {
    let Some(js) = jetstream().await else { return };
    let prefix = unique("idginbox");
    let mut events = stream(&js, &prefix, Duration::from_secs(3600)).await;
    let url = format!("nats://{}/{prefix}.stripe", nats_server());
    let gw = Gateway::start(&stripe(&url, "mode = \"inbox\"")).await;
    for i in 0..20 {
        let a = deliver(&gw, &format!("evt_{i}")).await;
        assert_eq!((a.status, a.outcome()), (202, "queued"), "{:?}", a.body);
    }
    assert!(
        until(Duration::from_secs(20), async || messages(&mut events)
            .await
            == 20)
        .await,
        "the dispatcher published {} of 20",
        messages(&mut events).await
    );
    let mut ids = Vec::new();
    for seq in 1..=20 {
        let m = events.get_raw_message(seq).await.unwrap();
        assert_eq!(header(&m, "Idemgate-Attempt"), "1");
        assert_eq!(header(&m, "Nats-Msg-Id"), header(&m, "Idempotency-Key"));
        ids.push(header(&m, "Nats-Msg-Id").to_owned());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20, "one message per event");
    gw.stop().await;
    js.delete_stream(prefix.to_uppercase()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_shorter_than_the_source_needs_is_said_and_refused_when_asked() {
    let Some(js) = jetstream().await else { return };
    let prefix = unique("idgshort");
    // JetStream's default window, two minutes: far shorter than Stripe's three days of retries.
    stream(&js, &prefix, Duration::from_secs(120)).await;
    let url = format!("nats://{}/{prefix}.stripe", nats_server());

    // warn (the default): the gateway starts, and says so on /healthz, naming the source.
    let gw = Gateway::start(&stripe(&url, "")).await;
    let health = gw.get("/healthz").await.unwrap();
    assert_eq!(health.status, 200);
    let health = health.json();
    assert_eq!(health["status"], "degraded", "{health}");
    let component = health["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "destinations")
        .cloned()
        .unwrap();
    assert_eq!(component["status"], "warn");
    let why = component["error"].as_str().unwrap();
    assert!(
        why.contains("stripe-live")
            && why.contains("dedups for 2m")
            && why.contains("up to 3d")
            && why.contains("short"),
        "{why}"
    );
    let metrics = String::from_utf8_lossy(&gw.get("/metrics").await.unwrap().body).into_owned();
    for line in [
        "idemgate_destination_dedup_window_seconds{source=\"stripe-live\"} 120.0",
        "idemgate_destination_exposure_seconds{source=\"stripe-live\"} 259200.0",
        "idemgate_destination_window_degraded{source=\"stripe-live\"} 1",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in /metrics"
        );
    }
    // Publishing goes on (warn only): the event is delivered.
    let a = deliver(&gw, "evt_1").await;
    assert_eq!(a.status, 200, "{:?}", a.body);
    // The dashboard's health row and the source's card say it too.
    let page = gw.get("/dashboard").await.unwrap();
    let page = String::from_utf8_lossy(&page.body);
    assert!(page.contains("broker windows"), "no health row");
    assert!(
        page.contains("data-field=\"window_audit\""),
        "no audit line"
    );
    assert!(page.contains("--dupe-window 3d"), "no advice");
    gw.stop().await;

    // refuse: the gateway does not start, and says why, naming the source and the key.
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("never-created");
    let config = idemgate_gateway::Config::from_toml(&format!(
        "{}[store]\npath = {:?}\n",
        stripe(&url, "on_short_window = \"refuse\""),
        store.display().to_string()
    ))
    .unwrap();
    let Err(e) = idemgate_gateway::open(&config).await else {
        panic!("started with a short window and on_short_window = \"refuse\"");
    };
    let message = e.to_string();
    assert!(
        message.contains("source \"stripe-live\": on_short_window")
            && message.contains("dedups for 2m")
            && message.contains("--dupe-window 3d"),
        "{message}"
    );
    assert!(
        !store.exists(),
        "nothing half-started: the store was not touched"
    );

    // A stream whose window covers the source: refuse starts.
    let mut covered = js.get_stream(prefix.to_uppercase()).await.unwrap();
    let mut config_now = covered.info().await.unwrap().config.clone();
    config_now.duplicate_window = Duration::from_secs(3 * 86_400);
    js.update_stream(config_now).await.unwrap();
    let gw = Gateway::start(&stripe(&url, "on_short_window = \"refuse\"")).await;
    assert_eq!(gw.get("/healthz").await.unwrap().json()["status"], "ok");
    gw.stop().await;

    // An inbox source needs only its item lease and longest backoff (25s + 10m by default).
    let gw = Gateway::start(&stripe(
        &url,
        "mode = \"inbox\"\non_short_window = \"refuse\"",
    ))
    .await;
    assert_eq!(gw.get("/healthz").await.unwrap().json()["status"], "ok");
    gw.stop().await;
    let _ = covered.info().await;
    js.delete_stream(prefix.to_uppercase()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subject_no_stream_captures_stops_the_start_naming_the_source() {
    let Some(_js) = jetstream().await else { return };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("never-created");
    let subject = unique("idgnobody");
    let config = idemgate_gateway::Config::from_toml(&format!(
        "{}[store]\npath = {:?}\n",
        stripe(
            &format!("nats://app:s3cret@{}/{subject}.events", nats_server()),
            ""
        ),
        store.display().to_string()
    ))
    .unwrap();
    let Err(e) = idemgate_gateway::open(&config).await else {
        panic!("started publishing to a subject no stream captures");
    };
    let message = e.to_string();
    assert!(
        message.contains("source \"stripe-live\": forward_url")
            && message.contains("no JetStream stream captures the subject"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "credentials in {message}");
    assert!(!store.exists(), "nothing half-started");
}

/// A private `nats-server -js` with a file store, on `port`; stopped on drop.
struct PrivateNats {
    child: Child,
}

impl PrivateNats {
    fn start(port: u16, dir: &std::path::Path) -> Option<Self> {
        let spawned = Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run nats-server: {e}"));
        let child = idemgate_core::testkit::require_service(
            spawned,
            "install nats-server (the NATS server binary, with JetStream)",
        )?;
        Some(Self { child })
    }

    async fn ready(port: u16) -> jetstream::Context {
        for _ in 0..200 {
            if let Ok(c) = async_nats::connect(format!("127.0.0.1:{port}")).await {
                return jetstream::new(c);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the private nats-server on {port} did not come up");
    }
}

impl Drop for PrivateNats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_is_down_is_a_503_in_forward_mode_and_a_retry_in_inbox_mode() {
    let port = free_port();
    let data = tempfile::tempdir().unwrap();
    let url = format!("nats://127.0.0.1:{port}/events.stripe");
    // The broker is down at start: the gateway starts (warn), says so, and serves.
    let config = format!(
        "{}{}",
        stripe(&url, ""),
        "[[source]]\nname = \"inbox\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nmode = \"inbox\"\nforward_url = \"".to_owned()
            + &format!("nats://127.0.0.1:{port}/events.inbox")
            + "\"\n[source.dispatch]\nbackoff = \"100ms\"\nmax_backoff = \"500ms\"\n"
    );
    let gw = Gateway::start(&config).await;
    let health = gw.get("/healthz").await.unwrap().json();
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(
        health.to_string().contains("not known yet"),
        "the audit says it could not read the window: {health}"
    );
    let down = deliver(&gw, "evt_down").await;
    assert_eq!(
        (down.status, down.outcome()),
        (503, "destination_unavailable"),
        "{:?}",
        down.body
    );
    assert_eq!(down.headers.get("retry-after").unwrap(), "1");
    let detail = down.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("cannot connect to NATS"), "{detail}");
    let b = body("evt_inbox");
    let h = sign(&gw, "inbox", "evt_inbox", SystemTime::now(), &b);
    let queued = gw.post("/hooks/inbox", h, b).await;
    assert_eq!(queued.status, 202);

    // The broker comes up, with a stream: the sender's retry is published, and the inbox item
    // is delivered by the dispatcher's own retries.
    let Some(_nats) = PrivateNats::start(port, data.path()) else {
        return;
    };
    let js = PrivateNats::ready(port).await;
    let mut events = stream(&js, "events", Duration::from_secs(4 * 86_400)).await;
    let mut published = None;
    for _ in 0..100 {
        let a = deliver(&gw, "evt_down").await;
        if a.status == 200 {
            published = Some(a);
            break;
        }
        // The pause after a failed connection attempt (at most 5 s) passes.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let published = published.expect("the retry was never published");
    assert_eq!(published.outcome(), "forwarded");
    assert!(
        until(Duration::from_secs(20), async || messages(&mut events)
            .await
            == 2)
        .await,
        "the inbox item was not delivered after the broker came back"
    );
    let mut attempts = Vec::new();
    for seq in 1..=2 {
        let m = events.get_raw_message(seq).await.unwrap();
        attempts.push((
            header(&m, "Nats-Msg-Id").to_owned(),
            header(&m, "Idemgate-Attempt").parse::<u32>().unwrap(),
        ));
    }
    attempts.sort();
    assert_eq!(attempts[0].0, "inbox:evt_inbox");
    assert!(
        attempts[0].1 > 1,
        "the inbox item was retried: {attempts:?}"
    );
    assert_eq!(attempts[1].0, "stripe-live:evt_down");
    gw.stop().await;
}

async fn queue(channel: &lapin::Channel, name: &str) {
    channel
        .queue_declare(
            name.into(),
            lapin::options::QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap();
}

async fn get(channel: &lapin::Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    channel
        .basic_get(
            queue.into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
}

fn amqp_header(m: &lapin::message::Delivery, name: &str) -> String {
    let headers = m.properties.headers().as_ref().expect("headers");
    match headers.inner().get(name) {
        Some(lapin::types::AMQPValue::LongString(s)) => s.to_string(),
        other => panic!("header {name}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_gets_persistent_confirmed_messages_and_an_unroutable_one_is_a_failure() {
    let Some(connection) = rabbit().await else {
        return;
    };
    let channel = connection.create_channel().await.unwrap();
    let name = unique("idgq");
    queue(&channel, &name).await;
    let url = format!(
        "amqp://{}/%2F?exchange=&routing_key={name}",
        amqp_authority()
    );
    let routed = format!(
        "amqp://{}/%2F?exchange=amq.direct&routing_key={name}.k",
        amqp_authority()
    );
    let config = format!(
        "{}[[source]]\nname = \"routed\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = {routed:?}\n",
        stripe(&url, "")
    );
    let gw = Gateway::start(&config).await;

    let a = deliver(&gw, "evt_1").await;
    assert_eq!((a.status, a.outcome()), (200, "forwarded"), "{:?}", a.body);
    let m = get(&channel, &name)
        .await
        .expect("the message is in the queue");
    assert_eq!(m.data, body("evt_1"));
    let p = &m.properties;
    assert_eq!(
        p.message_id().as_ref().unwrap().as_str(),
        "stripe-live:evt_1"
    );
    assert_eq!(*p.delivery_mode(), Some(2), "persistent");
    assert_eq!(
        p.content_type().as_ref().unwrap().as_str(),
        "application/json"
    );
    assert_eq!(amqp_header(&m, "Idempotency-Key"), "stripe-live:evt_1");
    assert_eq!(amqp_header(&m, "Idemgate-Source"), "stripe-live");
    assert_eq!(amqp_header(&m, "Idemgate-Event-Id"), "evt_1");
    assert_eq!(amqp_header(&m, "Idemgate-Attempt"), "1");
    assert!(get(&channel, &name).await.is_none(), "published once");
    let again = deliver(&gw, "evt_1").await;
    assert_eq!(again.outcome(), "duplicate");
    assert!(
        get(&channel, &name).await.is_none(),
        "a duplicate is not published"
    );

    // No queue is bound to amq.direct with that key: the broker returns the message, which is a
    // failed attempt (503, the claim released), not a delivery.
    let b = body("evt_r");
    let h = sign(&gw, "routed", "evt_r", SystemTime::now(), &b);
    let unroutable = gw.post("/hooks/routed", h.clone(), b.clone()).await;
    assert_eq!(
        (unroutable.status, unroutable.outcome()),
        (503, "destination_unavailable"),
        "{:?}",
        unroutable.body
    );
    let detail = unroutable.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains("routed the message to no queue"),
        "{detail}"
    );
    assert!(!detail.contains("guest:"), "credentials in {detail}");
    // Bound now: the sender's retry is published.
    channel
        .queue_bind(
            name.as_str().into(),
            "amq.direct".into(),
            format!("{name}.k").as_str().into(),
            lapin::options::QueueBindOptions::default(),
            lapin::types::FieldTable::default(),
        )
        .await
        .unwrap();
    let h = sign(&gw, "routed", "evt_r", SystemTime::now(), &b);
    let retried = gw.post("/hooks/routed", h, b).await;
    assert_eq!((retried.status, retried.outcome()), (200, "forwarded"));
    let m = get(&channel, &name).await.expect("published on the retry");
    assert_eq!(
        m.properties.message_id().as_ref().unwrap().as_str(),
        "routed:evt_r"
    );

    // RabbitMQ keeps no dedup window: /healthz is not degraded by it, and says consumers dedupe.
    let health = gw.get("/healthz").await.unwrap().json();
    assert_eq!(health["status"], "ok", "{health}");
    gw.stop().await;
    channel
        .queue_delete(
            name.as_str().into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_exchange_or_queue_or_refused_credentials_stop_the_start() {
    let Some(_connection) = rabbit().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("never-created");
    let host = amqp_authority();
    let host = host.rsplit('@').next().unwrap().to_owned();
    let nobody = unique("idgnobody");
    for (url, says) in [
        (
            format!("amqp://guest:guest@{host}/%2F?exchange={nobody}&routing_key=k"),
            "has no exchange",
        ),
        (
            format!("amqp://guest:guest@{host}/%2F?exchange=&routing_key={nobody}"),
            "has no queue",
        ),
        (
            format!("amqp://guest:wr0ng@{host}/%2F?exchange=amq.direct&routing_key=k"),
            "refused the credentials",
        ),
    ] {
        let config = idemgate_gateway::Config::from_toml(&format!(
            "{}[store]\npath = {:?}\n",
            stripe(&url, ""),
            store.display().to_string()
        ))
        .unwrap();
        let Err(e) = idemgate_gateway::open(&config).await else {
            panic!("{url}: started");
        };
        let message = e.to_string();
        assert!(
            message.contains("source \"stripe-live\": forward_url") && message.contains(says),
            "{url}: {message}"
        );
        assert!(!message.contains("wr0ng"), "credentials in {message}");
        assert!(!store.exists(), "nothing half-started");
    }
}
