//! Forwarding and dispatching to `https://` downstreams started here, with certificates from a
//! test authority: the right CA, the wrong one, a certificate for another name, mutual TLS, and
//! an inbox source.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use idemgate_core::inbox::ReplayFilter;
use idemgate_core::store::ClaimStore;
use idemgate_core::{HistoryOutcome, Key};
use idemgate_tls::testing::TestCa;
use support::{Answer, Behaviour, Downstream, Gateway, server_tls, sign};

/// A source forwarding to `url` with `[source.tls]` holding `tls`, on the SQLite store in `dir`.
fn config(dir: &Path, url: &str, mode: &str, tls: &str) -> String {
    format!(
        "[[source]]\nname = \"s\"\nprovider = \"github\"\nsecrets = [\"x\"]\nforward_url = \"{url}\"\n\
         mode = \"{mode}\"\n[source.dispatch]\nmax_attempts = 1\n[source.tls]\n{tls}\n\
         [store]\nkind = \"sqlite\"\npath = {:?}\n",
        dir.display().to_string()
    )
}

/// `[source.tls]` trusting the CA in `ca_file` alone.
fn trusting(ca_file: &Path) -> String {
    format!(
        "ca_file = {:?}\nsystem_roots = false\n",
        ca_file.display().to_string()
    )
}

async fn deliver(gw: &Gateway, event_id: &str) -> Answer {
    let body = format!("{{\"id\": \"{event_id}\"}}");
    let headers = sign(gw, "s", event_id, SystemTime::now(), body.as_bytes());
    gw.post("/hooks/s", headers, body).await
}

fn detail(r: &Answer) -> String {
    r.json()["detail"].as_str().unwrap_or_default().to_owned()
}

async fn history(dir: &Path, id: &str) -> Vec<HistoryOutcome> {
    let store = idemgate_sqlite::SqliteStore::open(dir).unwrap();
    let view = store.lookup(&Key::parse("s", id).unwrap()).await.unwrap();
    view.history.iter().map(|h| h.outcome).collect()
}

/// A downstream CA and a server certificate it signed for `names`, written to `dir`.
fn authority(dir: &Path, stem: &str) -> (TestCa, PathBuf) {
    let ca = TestCa::new(&format!("{stem} CA"));
    let file = ca.write(dir, stem);
    (ca, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_is_forwarded_over_https_with_the_sources_ca_on_one_kept_alive_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ca_file) = authority(dir.path(), "downstream");
    let down = Downstream::start_https(
        Behaviour::Ok,
        server_tls(&ca.issue(&["127.0.0.1", "localhost"]), None),
    )
    .await;
    let gw = Gateway::start_with(&config(
        dir.path(),
        &down.url,
        "on_success",
        &trusting(&ca_file),
    ))
    .await;
    for id in ["d-1", "d-2"] {
        let r = deliver(&gw, id).await;
        assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
        assert_eq!(down.attempts(&format!("s:{id}")), [1]);
    }
    assert_eq!(
        history(dir.path(), "d-1").await,
        [HistoryOutcome::Claimed, HistoryOutcome::Completed]
    );
    // The gateway offers HTTP/1.1 alone, and keeps the connection for the next forward.
    assert_eq!(down.alpn(), [Some("http/1.1".to_owned())]);
    assert_eq!(down.connections(), 1);
    // A duplicate is not forwarded again.
    assert_eq!(deliver(&gw, "d-1").await.outcome(), "duplicate");
    assert_eq!(down.total(), 2);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_a_502_naming_the_unknown_issuer_and_the_retry_forwards_once_fixed()
 {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ca_file) = authority(dir.path(), "downstream");
    let (_, stranger_file) = authority(dir.path(), "stranger");
    let down = Downstream::start_https(
        Behaviour::Ok,
        server_tls(&ca.issue(&["127.0.0.1", "localhost"]), None),
    )
    .await;
    let gw = Gateway::start_with(&config(
        dir.path(),
        &down.url,
        "on_success",
        &trusting(&stranger_file),
    ))
    .await;
    let r = deliver(&gw, "d-1").await;
    assert_eq!((r.status, r.outcome()), (502, "forward_unreachable"));
    let detail = detail(&r);
    assert!(
        detail.contains("not signed by a trusted authority") && detail.contains("unknown issuer"),
        "{detail}"
    );
    assert_eq!(down.total(), 0, "nothing was delivered");
    assert_eq!(
        history(dir.path(), "d-1").await,
        [HistoryOutcome::Claimed, HistoryOutcome::Released],
        "the event is not processed"
    );
    gw.stop().await;

    // The CA fixed and the gateway restarted: the sender's retry is forwarded, once.
    let gw = Gateway::start_with(&config(
        dir.path(),
        &down.url,
        "on_success",
        &trusting(&ca_file),
    ))
    .await;
    let r = deliver(&gw, "d-1").await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    assert_eq!(down.attempts("s:d-1").len(), 1);
    assert_eq!(deliver(&gw, "d-1").await.outcome(), "duplicate");
    assert_eq!(down.total(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused_naming_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ca_file) = authority(dir.path(), "downstream");
    // A certificate for a name other than the one forward_url connects to (127.0.0.1).
    let down = Downstream::start_https(
        Behaviour::Ok,
        server_tls(&ca.issue(&["hooks.internal.test"]), None),
    )
    .await;
    let gw = Gateway::start_with(&config(
        dir.path(),
        &down.url,
        "on_success",
        &trusting(&ca_file),
    ))
    .await;
    let r = deliver(&gw, "d-1").await;
    assert_eq!((r.status, r.outcome()), (502, "forward_unreachable"));
    let detail = detail(&r);
    assert!(
        detail.contains(
            "not valid for the host name connected to, 127.0.0.1 (it names hooks.internal.test)"
        ),
        "names both names: {detail}"
    );
    assert_eq!(down.total(), 0);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_requiring_a_client_certificate_takes_the_source_with_one_only() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ca_file) = authority(dir.path(), "downstream");
    let clients = TestCa::new("client CA");
    let down = Downstream::start_https(
        Behaviour::Ok,
        server_tls(&ca.issue(&["127.0.0.1"]), Some(&clients)),
    )
    .await;
    let (cert, key) = clients.issue(&["idemgate"]).write(dir.path(), "client");
    let with_identity = format!(
        "{}client_cert = {:?}\nclient_key = {:?}\n",
        trusting(&ca_file),
        cert.display().to_string(),
        key.display().to_string()
    );

    let without = tempfile::tempdir().unwrap();
    let gw = Gateway::start_with(&config(
        without.path(),
        &down.url,
        "on_success",
        &trusting(&ca_file),
    ))
    .await;
    let r = deliver(&gw, "d-1").await;
    assert_eq!((r.status, r.outcome()), (502, "forward_unreachable"));
    let why = detail(&r);
    // Under TLS 1.3 the server's alert may lose the race with the pool taking the connection:
    // then the gateway says what such a close means.
    assert!(
        why.contains("the server requires a client certificate, and none was presented")
            || why.contains("a server refusing the client certificate"),
        "{why}"
    );
    assert_eq!(down.total(), 0);
    let refused = down.refused().len();
    assert!(refused >= 1, "{:?}", down.refused());
    gw.stop().await;

    // A client certificate from an authority the downstream does not trust is refused too.
    let (cert, key) = TestCa::new("another client CA")
        .issue(&["idemgate"])
        .write(without.path(), "stranger");
    let stranger = format!(
        "{}client_cert = {:?}\nclient_key = {:?}\n",
        trusting(&ca_file),
        cert.display().to_string(),
        key.display().to_string()
    );
    let gw = Gateway::start_with(&config(without.path(), &down.url, "on_success", &stranger)).await;
    let r = deliver(&gw, "d-1").await;
    assert_eq!((r.status, r.outcome()), (502, "forward_unreachable"));
    let why = detail(&r);
    assert!(
        why.contains("the server refused the client certificate")
            || why.contains("a server refusing the client certificate"),
        "{why}"
    );
    assert_eq!(down.total(), 0);
    assert!(down.refused().len() > refused, "{:?}", down.refused());
    gw.stop().await;

    let gw =
        Gateway::start_with(&config(dir.path(), &down.url, "on_success", &with_identity)).await;
    let r = deliver(&gw, "d-1").await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    assert_eq!(down.attempts("s:d-1"), [1]);
    gw.stop().await;
}

/// Waits until `done` holds, up to ten seconds.
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !done().await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_source_dispatches_over_https_and_dead_letters_a_refused_handshake_with_why() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ca_file) = authority(dir.path(), "downstream");
    let down =
        Downstream::start_https(Behaviour::Ok, server_tls(&ca.issue(&["127.0.0.1"]), None)).await;
    let gw =
        Gateway::start_with(&config(dir.path(), &down.url, "inbox", &trusting(&ca_file))).await;
    assert_eq!(deliver(&gw, "q-1").await.status, 202);
    until("the dispatch", async || down.attempts("s:q-1") == [1]).await;
    until("the completion", async || {
        history(dir.path(), "q-1").await.last() == Some(&HistoryOutcome::Completed)
    })
    .await;
    gw.stop().await;

    // Trusting the wrong authority: the one attempt allowed fails, and the dead letter says why.
    let (_, stranger_file) = authority(dir.path(), "stranger");
    let gw = Gateway::start_with(&config(
        dir.path(),
        &down.url,
        "inbox",
        &trusting(&stranger_file),
    ))
    .await;
    assert_eq!(deliver(&gw, "q-2").await.status, 202);
    use idemgate_core::inbox::Inbox;
    let store = idemgate_sqlite::SqliteStore::open(dir.path()).unwrap();
    let mut dead = Vec::new();
    until("the dead letter", async || {
        dead = store
            .dead_letters(&ReplayFilter::default(), std::num::NonZeroU32::MIN)
            .await
            .unwrap();
        !dead.is_empty()
    })
    .await;
    let error = dead[0].attempts[0].error.clone();
    assert!(
        error.contains(&format!(
            "the downstream {} is unreachable",
            down.url.trim_end_matches("/hook")
        )) && error.contains("unknown issuer"),
        "{error}"
    );
    assert_eq!(down.attempts("s:q-2"), Vec::<u32>::new());
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_with_the_same_tls_settings_share_one_client_and_its_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ca_file) = authority(dir.path(), "downstream");
    let down =
        Downstream::start_https(Behaviour::Ok, server_tls(&ca.issue(&["127.0.0.1"]), None)).await;
    let mut text = config(dir.path(), &down.url, "on_success", &trusting(&ca_file));
    text.push_str(&format!(
        "[[source]]\nname = \"t\"\nprovider = \"github\"\nsecrets = [\"y\"]\nforward_url = \"{}\"\n\
         [source.tls]\n{}\n",
        down.url,
        trusting(&ca_file)
    ));
    let gw = Gateway::start_with(&text).await;
    for (source, id) in [("s", "d-1"), ("t", "d-2"), ("s", "d-3")] {
        let body = format!("{{\"id\": \"{id}\"}}");
        let headers = sign(&gw, source, id, SystemTime::now(), body.as_bytes());
        let r = gw.post(&format!("/hooks/{source}"), headers, body).await;
        assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    }
    assert_eq!(down.total(), 3);
    assert_eq!(down.connections(), 1, "one pool for both sources");
    gw.stop().await;
}
