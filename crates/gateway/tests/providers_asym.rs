//! The public-key providers as gateway sources, over real HTTP: SendGrid batches (one claim per
//! event), Standard Webhooks `v1a`, Pub/Sub with a JWKS file and a JWKS URL, and SNS with its
//! signing certificate and subscription confirmation served over HTTPS by the test (a private
//! test CA the source trusts through `fetch_ca_file`).

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use idemgate_providers::{Scheme, Secret, Verifier, pubsub, sns};
use idemgate_tls::testing::TestCa;
use serde_json::{Map, Value, json};
use support::{Behaviour, Downstream, Gateway, server_tls};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../providers/tests/fixtures");

fn fixture(provider: &str, file: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{provider}/{file}")).unwrap()
}

fn vectors(provider: &str) -> Value {
    serde_json::from_str(&fixture(provider, "vectors.json")).unwrap()
}

fn source(name: &str, provider: &str, down: &Downstream, extra: &str) -> String {
    format!(
        "[[source]]\nname = \"{name}\"\nprovider = \"{provider}\"\nforward_url = \"{}\"\n{extra}\n",
        down.url
    )
}

fn json_headers(mut h: HeaderMap) -> HeaderMap {
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h
}

/// An HTTPS server for the documents a source fetches: `path -> body`, counting the GETs of
/// each path.
#[derive(Clone)]
struct Documents {
    addr: SocketAddr,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Documents {
    async fn start(ca: &TestCa, files: Vec<(&'static str, String)>) -> Self {
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let files: Arc<HashMap<&'static str, String>> = Arc::new(files.into_iter().collect());
        let app = axum::Router::new().fallback({
            let hits = hits.clone();
            move |uri: axum::http::Uri| {
                let (hits, files) = (hits.clone(), files.clone());
                async move {
                    *hits
                        .lock()
                        .unwrap()
                        .entry(uri.path().to_owned())
                        .or_default() += 1;
                    match files.get(uri.path()) {
                        Some(body) => (StatusCode::OK, body.clone()),
                        None => (StatusCode::NOT_FOUND, String::new()),
                    }
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(server_tls(
            &ca.issue(&["127.0.0.1", "localhost"]),
            None,
        ));
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { addr, hits }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }

    fn hits(&self, path: &str) -> usize {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

/// A test CA written to `dir`, and the `fetch_ca_file` line trusting it.
fn authority(dir: &Path) -> (TestCa, String) {
    let ca = TestCa::new("documents CA");
    let file = ca.write(dir, "documents-ca");
    (
        ca,
        format!("fetch_ca_file = {:?}\n", file.display().to_string()),
    )
}

// --- SendGrid ---------------------------------------------------------------------------------

fn sendgrid_signer() -> Verifier {
    let f = vectors("sendgrid");
    let key = f["signing_key"].as_str().unwrap();
    Verifier::new(
        Scheme::Sendgrid,
        vec![Secret::from(key)],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap()
}

fn batch(ids: &[&str]) -> Vec<u8> {
    let events: Vec<Value> = ids
        .iter()
        .map(|id| json!({"email": "a@example.com", "event": "delivered", "sg_event_id": id}))
        .collect();
    serde_json::to_vec(&events).unwrap()
}

async fn post_batch(gw: &Gateway, body: Vec<u8>) -> support::Answer {
    let headers = sendgrid_signer()
        .sign("", SystemTime::now(), &body)
        .unwrap();
    gw.post("/hooks/sendgrid", json_headers(headers), body)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sendgrid_batch_forwards_each_new_event_once_and_answers_for_each() {
    let down = Downstream::start(Behaviour::Ok).await;
    let public = vectors("sendgrid")["keys"]["current"]
        .as_str()
        .unwrap()
        .to_owned();
    let gw = Gateway::start(&source(
        "sendgrid",
        "sendgrid",
        &down,
        &format!("secrets = [\"{public}\"]"),
    ))
    .await;

    let first = post_batch(&gw, batch(&["sg-a", "sg-b"])).await;
    assert_eq!(
        (first.status, first.outcome()),
        (200, "batch"),
        "{:?}",
        first.body
    );
    assert_eq!(first.json()["processed"], 2);

    // Three events, one already delivered in the first batch: two forwarded, one duplicate.
    let second = post_batch(&gw, batch(&["sg-b", "sg-c", "sg-d"])).await;
    assert_eq!(second.status, 200, "{:?}", second.body);
    let answer = second.json();
    assert_eq!(
        (answer["processed"].as_u64(), answer["duplicates"].as_u64()),
        (Some(2), Some(1))
    );
    let outcomes: Vec<_> = answer["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_str().unwrap().to_owned(),
                e["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("sg-b", "duplicate"),
            ("sg-c", "forwarded"),
            ("sg-d", "forwarded")
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
    );
    for id in ["sg-a", "sg-b", "sg-c", "sg-d"] {
        assert_eq!(down.attempts(&format!("sendgrid:{id}")), [1], "{id}");
    }
    assert_eq!(down.total(), 4);

    // An event without an id and a repeat within the batch: the others are processed, the
    // answer is a 400 naming the bad one.
    let body = br#"[{"event":"open","sg_event_id":"sg-e"},{"event":"click"},{"event":"open","sg_event_id":"sg-e"}]"#;
    let third = post_batch(&gw, body.to_vec()).await;
    assert_eq!(third.status, 400, "{:?}", third.body);
    let events = third.json()["events"].clone();
    assert_eq!(events[0]["outcome"], "forwarded");
    assert_eq!(events[1]["outcome"], "missing_event_id");
    assert_eq!(events[1]["detail"], "no sg_event_id");
    assert_eq!(events[2]["outcome"], "duplicate");
    assert_eq!(down.attempts("sendgrid:sg-e"), [1]);

    // Another key's signature, and a tampered body: 401, nothing forwarded.
    let body = batch(&["sg-x"]);
    let mut headers = sendgrid_signer()
        .sign("", SystemTime::now(), &body)
        .unwrap();
    let r = gw
        .post(
            "/hooks/sendgrid",
            json_headers(headers.clone()),
            batch(&["sg-y"]),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));
    headers.insert(
        "x-twilio-email-event-webhook-timestamp",
        HeaderValue::from_static("1"),
    );
    let r = gw
        .post("/hooks/sendgrid", json_headers(headers), body)
        .await;
    assert_eq!(r.status, 401);
    assert_eq!(down.total(), 5);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_forward_in_a_batch_is_a_5xx_and_the_retry_forwards_only_what_is_left() {
    let down = Downstream::start(Behaviour::Fail).await;
    let public = vectors("sendgrid")["keys"]["current"]
        .as_str()
        .unwrap()
        .to_owned();
    let gw = Gateway::start(&source(
        "sendgrid",
        "sendgrid",
        &down,
        &format!("secrets = [\"{public}\"]"),
    ))
    .await;
    let r = post_batch(&gw, batch(&["f-1", "f-2"])).await;
    assert_eq!(r.status, 502, "{:?}", r.body);
    assert_eq!(r.json()["failed"], 2);
    down.set(Behaviour::Ok);
    let r = post_batch(&gw, batch(&["f-1", "f-2"])).await;
    assert_eq!((r.status, r.json()["processed"].as_u64()), (200, Some(2)));
    // Each event reached the downstream twice: refused, then taken.
    assert_eq!(down.attempts("sendgrid:f-1").len(), 2);
    assert_eq!(down.attempts("sendgrid:f-2").len(), 2);
    let r = post_batch(&gw, batch(&["f-1", "f-2"])).await;
    assert_eq!((r.status, r.json()["duplicates"].as_u64()), (200, Some(2)));
    assert_eq!(down.total(), 4);
    gw.stop().await;
}

// --- Standard Webhooks v1a --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1a_source_takes_deliveries_signed_by_its_public_keys_owner_only() {
    let down = Downstream::start(Behaviour::Ok).await;
    let f = vectors("standard-webhooks");
    let public = f["keys"]["current"].as_str().unwrap();
    let gw = Gateway::start(&source(
        "std",
        "standard-webhooks",
        &down,
        &format!("secrets = [\"{public}\"]"),
    ))
    .await;
    let signer = Verifier::new(
        Scheme::StandardWebhooks,
        vec![Secret::from(f["signing_key"].as_str().unwrap())],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap();
    let body = br#"{"type":"invoice.paid"}"#;
    let headers = signer.sign("msg_v1a_1", SystemTime::now(), body).unwrap();
    let r = gw
        .post("/hooks/std", json_headers(headers.clone()), &body[..])
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"));
    let r = gw
        .post("/hooks/std", json_headers(headers), &body[..])
        .await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"));
    // The previous key's owner signs: not a key this source trusts.
    let stranger = Verifier::new(
        Scheme::StandardWebhooks,
        vec![Secret::from(f["whsec"].as_str().unwrap())],
        Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap();
    let headers = stranger.sign("msg_v1a_2", SystemTime::now(), body).unwrap();
    let r = gw
        .post("/hooks/std", json_headers(headers), &body[..])
        .await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));
    assert_eq!(down.total(), 1);
    gw.stop().await;
}

// --- Pub/Sub ----------------------------------------------------------------------------------

const AUDIENCE: &str = "https://hooks.example.com/hooks/pubsub";

fn push_body(id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "message": {"data": "e30=", "messageId": id, "attributes": {}, "publishTime": "2026-01-02T03:04:05Z"},
        "subscription": "projects/p/subscriptions/s",
    }))
    .unwrap()
}

fn token(audience: &str) -> HeaderMap {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "aud": audience, "iss": "https://accounts.google.com", "iat": now, "exp": now + 3600,
        "email": "push@p.iam.gserviceaccount.com", "email_verified": true,
    });
    let jwt = pubsub::sign_token(
        fixture("pubsub", "signing-key.pem").as_bytes(),
        "k1",
        &claims,
    )
    .unwrap();
    let mut h = HeaderMap::new();
    h.insert(
        "authorization",
        HeaderValue::from_str(&format!("Bearer {jwt}")).unwrap(),
    );
    json_headers(h)
}

fn jwks() -> String {
    pubsub::jwks_of(fixture("pubsub", "signing-key.pem").as_bytes(), "k1").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_with_a_jwks_file_takes_its_audience_only() {
    let down = Downstream::start(Behaviour::Ok).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, jwks()).unwrap();
    let gw = Gateway::start(&source(
        "pubsub",
        "pubsub",
        &down,
        &format!(
            "audience = \"{AUDIENCE}\"\nservice_account = \"push@p.iam.gserviceaccount.com\"\njwks_file = {:?}",
            file.display().to_string()
        ),
    ))
    .await;
    let r = gw
        .post("/hooks/pubsub", token(AUDIENCE), push_body("m-1"))
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    assert_eq!(down.attempts("pubsub:m-1"), [1]);
    let r = gw
        .post(
            "/hooks/pubsub",
            token("https://other.example.com/"),
            push_body("m-2"),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (401, "bad_claim"));
    assert!(
        r.json()["detail"].as_str().unwrap().contains("aud"),
        "{:?}",
        r.body
    );
    let r = gw
        .post(
            "/hooks/pubsub",
            json_headers(HeaderMap::new()),
            push_body("m-3"),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (401, "missing_header"));
    assert_eq!(down.total(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_with_a_jwks_url_fetches_it_once_over_https_and_keeps_it() {
    let down = Downstream::start(Behaviour::Ok).await;
    let dir = tempfile::tempdir().unwrap();
    let (ca, trust) = authority(dir.path());
    let docs = Documents::start(&ca, vec![("/jwks", jwks())]).await;
    let gw = Gateway::start(&source(
        "pubsub",
        "pubsub",
        &down,
        &format!(
            "audience = \"{AUDIENCE}\"\nallow_any_service_account = true\njwks_url = \"{}\"\n{trust}",
            docs.url("/jwks")
        ),
    ))
    .await;
    for id in ["u-1", "u-2"] {
        let r = gw
            .post("/hooks/pubsub", token(AUDIENCE), push_body(id))
            .await;
        assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    }
    assert_eq!(docs.hits("/jwks"), 1, "the JWKS is kept");
    let r = gw
        .post(
            "/hooks/pubsub",
            token("https://other.example.com/"),
            push_body("u-3"),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (401, "bad_claim"));
    assert_eq!(down.total(), 2);
    gw.stop().await;

    // A source that does not trust the server's CA cannot fetch: 503, so Pub/Sub retries.
    let gw = Gateway::start(&source(
        "pubsub",
        "pubsub",
        &down,
        &format!(
            "audience = \"{AUDIENCE}\"\nallow_any_service_account = true\njwks_url = \"{}\"",
            docs.url("/jwks")
        ),
    ))
    .await;
    let r = gw
        .post("/hooks/pubsub", token(AUDIENCE), push_body("u-4"))
        .await;
    assert_eq!(
        (r.status, r.outcome()),
        (503, "document_unavailable"),
        "{:?}",
        r.body
    );
    gw.stop().await;
}

// --- SNS --------------------------------------------------------------------------------------

fn sns_message(kind: &str, id: &str, cert_url: &str) -> Map<String, Value> {
    let mut m = json!({
        "Type": kind, "MessageId": id, "TopicArn": "arn:aws:sns:us-east-1:123456789012:orders",
        "Message": "{\"order\": 42}", "SignatureVersion": "2", "SigningCertURL": cert_url,
        "Timestamp": humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
    });
    if kind == "SubscriptionConfirmation" {
        m["Token"] = json!("tok-123");
    }
    m.as_object().unwrap().clone()
}

fn sns_body(m: &Map<String, Value>) -> Vec<u8> {
    let signed = sns::sign(fixture("sns", "signing-key.pem").as_bytes(), m).unwrap();
    serde_json::to_vec(&signed).unwrap()
}

async fn sns_gateway(down: &Downstream, docs: &Documents, trust: &str, extra: &str) -> Gateway {
    Gateway::start(&source(
        "sns",
        "sns",
        down,
        &format!(
            "cert_hosts = [\"127.0.0.1:{}\"]\ntopic_arns = [\"arn:aws:sns:us-east-1:123456789012:orders\"]\n{trust}{extra}",
            docs.addr.port()
        ),
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_fetches_its_certificate_over_https_and_never_from_a_host_outside_the_pattern() {
    let down = Downstream::start(Behaviour::Ok).await;
    let dir = tempfile::tempdir().unwrap();
    let (ca, trust) = authority(dir.path());
    let cert = fixture("sns", "signing-cert.pem");
    let docs = Documents::start(&ca, vec![("/cert.pem", cert)]).await;
    let gw = sns_gateway(&down, &docs, &trust, "").await;

    let body = sns_body(&sns_message("Notification", "n-1", &docs.url("/cert.pem")));
    let r = gw
        .post("/hooks/sns", json_headers(HeaderMap::new()), body.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"), "{:?}", r.body);
    // SNS retries the same signed message: a duplicate, and the certificate is kept.
    let r = gw
        .post("/hooks/sns", json_headers(HeaderMap::new()), body)
        .await;
    assert_eq!((r.status, r.outcome()), (200, "duplicate"));
    assert_eq!(docs.hits("/cert.pem"), 1);
    assert_eq!(down.attempts("sns:n-1"), [1]);

    // A message AWS signed for another account's topic: 403, never forwarded.
    let mut foreign = sns_message("Notification", "n-foreign", &docs.url("/cert.pem"));
    foreign.insert(
        "TopicArn".into(),
        Value::String("arn:aws:sns:us-east-1:999999999999:orders".into()),
    );
    let r = gw
        .post(
            "/hooks/sns",
            json_headers(HeaderMap::new()),
            sns_body(&foreign),
        )
        .await;
    assert_eq!(
        (r.status, r.outcome()),
        (403, "untrusted_topic"),
        "{:?}",
        r.body
    );
    assert!(down.attempts("sns:n-foreign").is_empty());

    // The same server under another name: outside the pattern, refused without a fetch.
    let elsewhere = format!("https://localhost:{}/cert.pem", docs.addr.port());
    let body = sns_body(&sns_message("Notification", "n-2", &elsewhere));
    let r = gw
        .post("/hooks/sns", json_headers(HeaderMap::new()), body)
        .await;
    assert_eq!(
        (r.status, r.outcome()),
        (401, "untrusted_url"),
        "{:?}",
        r.body
    );
    assert_eq!(
        docs.hits("/cert.pem"),
        1,
        "nothing fetched for the untrusted URL"
    );

    // A tampered message: 401.
    let mut m: Map<String, Value> = serde_json::from_slice(&sns_body(&sns_message(
        "Notification",
        "n-3",
        &docs.url("/cert.pem"),
    )))
    .unwrap();
    m.insert("Message".into(), json!("tampered"));
    let r = gw
        .post(
            "/hooks/sns",
            json_headers(HeaderMap::new()),
            serde_json::to_vec(&m).unwrap(),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));
    assert_eq!(down.total(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sns_subscription_confirmation_is_confirmed_or_only_logged_as_configured() {
    let down = Downstream::start(Behaviour::Ok).await;
    let dir = tempfile::tempdir().unwrap();
    let (ca, trust) = authority(dir.path());
    let docs = Documents::start(
        &ca,
        vec![
            ("/cert.pem", fixture("sns", "signing-cert.pem")),
            ("/confirm", "<ConfirmSubscriptionResponse/>".to_owned()),
        ],
    )
    .await;
    let mut m = sns_message("SubscriptionConfirmation", "s-1", &docs.url("/cert.pem"));
    m.insert(
        "SubscribeURL".into(),
        json!(docs.url("/confirm?Token=tok-123")),
    );
    let body = sns_body(&m);

    let gw = sns_gateway(&down, &docs, &trust, "sns_subscription = \"confirm\"\n").await;
    let r = gw
        .post("/hooks/sns", json_headers(HeaderMap::new()), body.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (200, "handshake"), "{:?}", r.body);
    assert_eq!(r.json()["subscription"], "confirmed");
    assert_eq!(docs.hits("/confirm"), 1);
    gw.stop().await;

    let gw = sns_gateway(&down, &docs, &trust, "").await;
    let r = gw
        .post("/hooks/sns", json_headers(HeaderMap::new()), body)
        .await;
    assert_eq!(
        (r.status, r.json()["subscription"].as_str()),
        (200, Some("logged"))
    );
    assert_eq!(docs.hits("/confirm"), 1, "logged, not visited");
    assert_eq!(down.total(), 0, "a handshake is never forwarded");
    gw.stop().await;
}

#[tokio::test]
async fn keys_for_another_provider_are_refused_naming_the_key() {
    let down = Downstream::start(Behaviour::Ok).await;
    for (provider, extra, key) in [
        ("stripe", "secrets = [\"s\"]\naudience = \"x\"", "audience"),
        (
            "pubsub",
            "cert_hosts = [\"a.example.com\"]\naudience = \"x\"",
            "cert_hosts",
        ),
        ("pubsub", "", "audience"),
        (
            "stripe",
            "secrets = [\"s\"]\nfetch_ca_file = \"/x\"",
            "fetch_ca_file",
        ),
        (
            "sns",
            "secrets = [\"s\"]\nallow_any_topic = true",
            "secrets",
        ),
        ("sns", "", "topic_arns"),
        ("sns", "topic_arns = [\"orders\"]", "topic_arns"),
        ("pubsub", "audience = \"x\"", "service_account"),
        (
            "stripe",
            "secrets = [\"s\"]\nallow_any_topic = true",
            "allow_any_topic",
        ),
        (
            "pubsub",
            "audience = \"x\"\nallow_any_service_account = true\njwks_file = \"/nonexistent/jwks.json\"",
            "jwks_file",
        ),
    ] {
        let text = format!(
            "{}\n[store]\nkind = \"sqlite\"\npath = \"/tmp/unused\"\n",
            source("s", provider, &down, extra)
        );
        let config = idemgate_gateway::Config::from_toml(&text).unwrap();
        let e = idemgate_gateway::Sources::build(&config)
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{provider} {extra:?}: {e}");
    }
}
