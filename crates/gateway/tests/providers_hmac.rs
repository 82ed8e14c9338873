//! Square, Twilio (form and JSON bodies), Mailgun and Postmark sources over real HTTP: a good
//! delivery is claimed and forwarded once and its repeat is a duplicate, a bad one is refused with
//! the right problem; Postmark's basic auth asks for credentials; `allow_from` refuses a peer
//! outside it.

mod support;

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderValue};
use idemgate_gateway::Config;
use serde_json::json;
use support::{Behaviour, Downstream, Gateway, sign, signer};

const FORM: &str = "application/x-www-form-urlencoded";

fn sources(down: &Downstream) -> String {
    format!(
        r#"
[[source]]
name = "square"
provider = "square"
secrets = ["square-signature-key"]
signed_url = "https://hooks.example.com/hooks/square"
forward_url = "{url}"

[[source]]
name = "twilio"
provider = "twilio"
secrets = ["twilio-auth-token", "twilio-previous-token"]
signed_url = "https://hooks.example.com/hooks/twilio"
forward_url = "{url}"

[[source]]
name = "mailgun"
provider = "mailgun"
secrets = ["key-mailgun-signing"]
forward_url = "{url}"

[[source]]
name = "postmark"
provider = "postmark"
secrets = ["postmark:s3cret-pass"]
forward_url = "{url}"
allow_from = ["127.0.0.0/8", "::1/128"]

[[source]]
name = "postmark-elsewhere"
provider = "postmark"
secrets = ["postmark:s3cret-pass"]
forward_url = "{url}"
allow_from = ["3.134.147.250/32", "50.31.156.0/24"]
"#,
        url = down.url
    )
}

fn with_type(mut h: HeaderMap, content_type: &str) -> HeaderMap {
    h.insert("content-type", HeaderValue::from_str(content_type).unwrap());
    h
}

/// Posts the same delivery twice: forwarded, then a duplicate.
async fn once_then_duplicate(gw: &Gateway, path: &str, headers: HeaderMap, body: Vec<u8>) {
    let first = gw.post(path, headers.clone(), body.clone()).await;
    assert_eq!(
        (first.status, first.outcome()),
        (200, "forwarded"),
        "{path}: {}",
        String::from_utf8_lossy(&first.body)
    );
    let again = gw.post(path, headers, body).await;
    assert_eq!(
        (again.status, again.outcome()),
        (200, "duplicate"),
        "{path}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn square_deliveries_are_verified_against_the_signed_url() {
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&sources(&down)).await;
    let body =
        serde_json::to_vec(&json!({"event_id": "sq-evt-1", "type": "payment.created"})).unwrap();
    let headers = with_type(
        sign(&gw, "square", "", SystemTime::now(), &body),
        "application/json",
    );
    once_then_duplicate(&gw, "/hooks/square", headers.clone(), body.clone()).await;
    assert_eq!(down.attempts("square:sq-evt-1"), [1]);

    let mut tampered = body.clone();
    tampered.push(b' ');
    let r = gw.post("/hooks/square", headers, tampered).await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));
    assert_eq!(r.json()["type"], "urn:idemgate:problem:bad_signature");
    assert_eq!(down.total(), 1);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilio_form_and_json_deliveries() {
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&sources(&down)).await;
    let sc = gw
        .config
        .sources
        .iter()
        .find(|s| s.name == "twilio")
        .unwrap()
        .clone();

    // A form body, with a query string of the webhook's own: both are signed.
    let form = b"MessageSid=SM42&From=%2B14158141829&Body=Hi+there&MessageStatus=received".to_vec();
    let signer = signer(&sc, 0);
    let signed = signer
        .sign_request("idem-form-1", SystemTime::now(), &form, Some(FORM))
        .unwrap();
    assert_eq!(signed.query, None);
    // Signed for the URL with the query the sender was given.
    let token = sc.secrets[0].as_bytes();
    let mut headers = with_type(signed.headers.clone(), FORM);
    headers.insert(
        "x-twilio-signature",
        HeaderValue::from_str(&idemgate_providers::twilio::sign_form(
            token,
            "https://hooks.example.com/hooks/twilio?tenant=acme",
            &form,
        ))
        .unwrap(),
    );
    once_then_duplicate(
        &gw,
        "/hooks/twilio?tenant=acme",
        headers.clone(),
        form.clone(),
    )
    .await;
    assert_eq!(down.attempts("twilio:idem-form-1"), [1]);
    assert_eq!(down.content_types().last().map(String::as_str), Some(FORM));
    // The same signature without the query, or with another, is refused.
    let r = gw
        .post("/hooks/twilio", headers.clone(), form.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));
    let r = gw
        .post("/hooks/twilio?tenant=evil", headers, form.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));

    // The previous auth token still signs, during a rotation.
    let old = support::signer(&sc, 1)
        .sign_request("idem-form-2", SystemTime::now(), &form, Some(FORM))
        .unwrap();
    let r = gw
        .post("/hooks/twilio", with_type(old.headers, FORM), form.clone())
        .await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"));

    // A JSON body: the hash travels in the query, which the sender adds to the URL.
    let body = serde_json::to_vec(&json!({"sid": "SM42", "status": "delivered"})).unwrap();
    let signed = signer
        .sign_request(
            "idem-json-1",
            SystemTime::now(),
            &body,
            Some("application/json"),
        )
        .unwrap();
    let query = signed.query.clone().unwrap();
    let path = format!("/hooks/twilio?{query}");
    let headers = with_type(signed.headers, "application/json");
    once_then_duplicate(&gw, &path, headers.clone(), body.clone()).await;
    let r = gw
        .post(
            &path,
            headers.clone(),
            br#"{"sid":"SM43","status":"delivered"}"#.to_vec(),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));
    // Without the query the body is taken for a form: refused.
    let r = gw.post("/hooks/twilio", headers, body).await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));

    // Signed, but without Twilio's idempotency token: 400 naming it.
    let signed = signer
        .sign_request("x", SystemTime::now(), &form, Some(FORM))
        .unwrap();
    let mut headers = with_type(signed.headers, FORM);
    headers.remove("i-twilio-idempotency-token");
    let r = gw.post("/hooks/twilio", headers, form).await;
    assert_eq!((r.status, r.outcome()), (400, "missing_event_id"));
    assert!(
        r.json()["detail"]
            .as_str()
            .unwrap()
            .contains("i-twilio-idempotency-token"),
        "{:?}",
        r.json()
    );
    assert_eq!(down.total(), 3);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailgun_tokens_deduplicate_and_guard_against_replays() {
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&sources(&down)).await;
    let sc = gw
        .config
        .sources
        .iter()
        .find(|s| s.name == "mailgun")
        .unwrap()
        .clone();
    let signer = signer(&sc, 0);
    let token = "k".repeat(50);
    let event = json!({"event-data": {"id": "CPgfbmQMTCKtHW6uIWtuVe", "event": "delivered"}});
    let signed = signer
        .sign_request(
            &token,
            SystemTime::now(),
            &serde_json::to_vec(&event).unwrap(),
            None,
        )
        .unwrap();
    let headers = with_type(HeaderMap::new(), "application/json");
    once_then_duplicate(&gw, "/hooks/mailgun", headers.clone(), signed.body.clone()).await;
    assert_eq!(down.attempts(&format!("mailgun:{token}")), [1]);

    // The signature block replayed with other event data: the same token, another payload, so a
    // conflict, answered as a duplicate and not forwarded.
    let mut forged: serde_json::Value = serde_json::from_slice(&signed.body).unwrap();
    forged["event-data"]["event"] = json!("failed");
    let r = gw
        .post(
            "/hooks/mailgun",
            headers.clone(),
            serde_json::to_vec(&forged).unwrap(),
        )
        .await;
    assert_eq!((r.status, r.outcome()), (200, "conflict"));
    assert_eq!(down.total(), 1);

    // A retry resends the first attempt's timestamp: hours old is still accepted (the default
    // tolerance covers the retry window), beyond it is stale.
    assert_eq!(sc.tolerance(), Duration::from_secs(8 * 3600 + 10 * 60));
    let hours_ago = SystemTime::now() - Duration::from_secs(5 * 3600);
    let late = signer
        .sign_request("late-token", hours_ago, b"{}", None)
        .unwrap();
    let r = gw.post("/hooks/mailgun", headers.clone(), late.body).await;
    assert_eq!((r.status, r.outcome()), (200, "forwarded"));
    let too_old = SystemTime::now() - Duration::from_secs(9 * 3600);
    let stale = signer
        .sign_request("stale-token", too_old, b"{}", None)
        .unwrap();
    let r = gw.post("/hooks/mailgun", headers.clone(), stale.body).await;
    assert_eq!((r.status, r.outcome()), (401, "stale_timestamp"));

    // A wrong key, and a body without a signature block.
    let mut wrong_sc = sc.clone();
    wrong_sc.secrets = vec!["key-wrong".into()];
    let wrong = idemgate_gateway::verifier(&wrong_sc)
        .unwrap()
        .sign_request("t2", SystemTime::now(), b"{}", None)
        .unwrap();
    let r = gw.post("/hooks/mailgun", headers.clone(), wrong.body).await;
    assert_eq!((r.status, r.outcome()), (401, "bad_signature"));
    let r = gw
        .post("/hooks/mailgun", headers, b"{\"event-data\":{}}".to_vec())
        .await;
    assert_eq!((r.status, r.outcome()), (401, "malformed_body"));
    assert_eq!(down.total(), 2);
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postmark_checks_basic_auth_and_the_peer_address() {
    let down = Downstream::start(Behaviour::Ok).await;
    let gw = Gateway::start(&sources(&down)).await;
    let body = serde_json::to_vec(&json!({
        "RecordType": "Delivery",
        "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
        "Recipient": "john@example.com",
        "DeliveredAt": "2026-11-05T16:33:54Z",
    }))
    .unwrap();
    let headers = with_type(
        sign(&gw, "postmark", "", SystemTime::now(), &body),
        "application/json",
    );
    assert!(
        headers["authorization"]
            .to_str()
            .unwrap()
            .starts_with("Basic ")
    );
    once_then_duplicate(&gw, "/hooks/postmark", headers.clone(), body.clone()).await;
    assert_eq!(
        down.attempts("postmark:Delivery:883953f4-6105-42a2-a16a-77a8eac79483:john@example.com"),
        [1]
    );

    // Wrong or missing credentials: 401, and the sender is told to use basic auth.
    let mut wrong = headers.clone();
    wrong.insert(
        "authorization",
        HeaderValue::from_str(&idemgate_providers::postmark::authorization(
            b"postmark:guess",
        ))
        .unwrap(),
    );
    let r = gw.post("/hooks/postmark", wrong, body.clone()).await;
    assert_eq!((r.status, r.outcome()), (401, "bad_credentials"));
    assert_eq!(
        r.headers["www-authenticate"],
        "Basic realm=\"idemgate postmark\""
    );
    let mut missing = headers.clone();
    missing.remove("authorization");
    let r = gw.post("/hooks/postmark", missing, body.clone()).await;
    assert_eq!((r.status, r.outcome()), (401, "missing_header"));
    assert_eq!(
        r.headers["www-authenticate"],
        "Basic realm=\"idemgate postmark\""
    );

    // A source that accepts only Postmark's addresses refuses this loopback peer, before the
    // credentials (which are right) are even read.
    let r = gw.post("/hooks/postmark-elsewhere", headers, body).await;
    assert_eq!((r.status, r.outcome()), (403, "forbidden_peer"));
    assert_eq!(
        r.json()["detail"],
        "deliveries to source postmark-elsewhere are not accepted from 127.0.0.1 (allow_from)"
    );
    assert_eq!(down.total(), 1);
    gw.stop().await;
}

#[test]
fn configuration_errors_name_the_key() {
    let base = "[store]\nkind = \"sqlite\"\npath = \"/tmp/unused\"\n";
    let err = |source: &str| {
        let text = format!("{base}[[source]]\nname = \"s\"\n{source}");
        let config = Config::from_toml(&text);
        let built = config.and_then(|c| {
            idemgate_gateway::verifier(&c.sources[0])?;
            Ok(c)
        });
        built.err().map(|e| e.to_string()).unwrap_or_default()
    };
    assert_eq!(
        err("provider = \"square\"\nsecrets = [\"k\"]\n"),
        "source \"s\": signed_url: required for provider \"square\": the public URL the sender was given for this source (the sender signs it)"
    );
    assert_eq!(
        err(
            "provider = \"stripe\"\nsecrets = [\"whsec_x\"]\nsigned_url = \"https://x.example/\"\n"
        ),
        "source \"s\": signed_url: only for provider \"square\" or \"twilio\", not \"stripe\""
    );
    assert!(
        err("provider = \"twilio\"\nsecrets = [\"t\"]\nsigned_url = \"https://x.example/h?a=1\"\n")
            .starts_with("source \"s\": signed_url: twilio: signed_url: give the URL without its query string")
    );
    assert_eq!(
        err("provider = \"postmark\"\nsecrets = [\"u:p\"]\nallow_from = [\"50.31.156.7/24\"]\n"),
        "source \"s\": allow_from: \"50.31.156.7/24\" has address bits set past /24: write 50.31.156.0/24 for the network, or 50.31.156.7/32 for the one address"
    );
    assert!(
        err("provider = \"mailgun\"\nsecrets = [\"k\"]\ntolerance = \"30d\"\n")
            .starts_with("source \"s\": tolerance: 30d is longer than the source's TTL"),
        "{}",
        err("provider = \"mailgun\"\nsecrets = [\"k\"]\ntolerance = \"30d\"\n")
    );
    assert_eq!(
        err(
            "provider = \"twilio\"\nsecrets = [\"t\"]\nsigned_url = \"https://x.example/h\"\nevent_id_header = \"X-Id\"\nevent_id_field = \"MessageSid\"\n"
        ),
        "source \"s\": event_id_field: set one of event_id_header, event_id_pointer and event_id_field, not both event_id_header and event_id_field"
    );
    assert_eq!(
        err(
            "provider = \"square\"\nsecrets = [\"k\"]\nsigned_url = \"https://x.example/h\"\nevent_id_field = \"id\"\n"
        ),
        "source \"s\": event_id_field: only for provider \"generic-hmac\", \"none\", \"twilio\", \"mailgun\" or \"postmark\", not \"square\""
    );
    assert_eq!(
        err("provider = \"postmark\"\nsecrets = [\"no-colon\"]\n"),
        "source \"s\": secrets: secrets[0] (counting from 0) is not a postmark secret: must be user:password, the credentials written into the webhook URL"
    );
    // A form field as the event id of a `none` source.
    assert_eq!(
        err("provider = \"none\"\nretry_window = \"1h\"\nevent_id_field = \"MessageSid\"\n"),
        ""
    );
}
