//! Routing and error mapping, one request at a time through `app(state).oneshot(..)` on the
//! in-memory store: every route, every refusal's status, `Idemgate-Outcome` and problem type,
//! with no socket in the way. Timeouts, connection limits and shutdown need real TCP; they are
//! tested in `connections.rs` and `ingest.rs`.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use idemgate_gateway::{AnyStore, AppState, Config, Outcome, app};
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKEN: &str = "worker-token-0123456789";

fn config() -> Config {
    Config::from_toml(&format!(
        "api_tokens = [\"{TOKEN}\"]\n[limits]\nbody_limit = 4096\n\
         [[source]]\nname = \"orders\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\n\
         [[source]]\nname = \"jobs\"\nprovider = \"none\"\nretry_window = \"1h\"\n\
         event_id_header = \"x-event-id\"\n\
         [[source]]\nname = \"queue\"\nprovider = \"stripe\"\nsecrets = [\"whsec_q\"]\n\
         mode = \"inbox\"\nforward_url = \"http://127.0.0.1:9/hook\"\n"
    ))
    .unwrap()
}

fn router() -> axum::Router {
    app(AppState::new(&config(), AnyStore::memory(), None).unwrap())
}

/// One answer: status, the `Idemgate-Outcome` header, the typed outcome the handler set, and
/// the body as JSON (`Null` when it is not JSON).
#[derive(Debug)]
struct Answer {
    status: StatusCode,
    header: String,
    outcome: Option<Outcome>,
    content_type: String,
    json: Value,
    headers: axum::http::HeaderMap,
}

async fn call(router: &axum::Router, request: Request<Body>) -> Answer {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let outcome = response.extensions().get::<Outcome>().copied();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let text = |name| {
        headers
            .get(name)
            .map(|v: &axum::http::HeaderValue| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    Answer {
        status,
        header: text("idemgate-outcome"),
        outcome,
        content_type: text("content-type"),
        json: serde_json::from_slice(&body).unwrap_or(Value::Null),
        headers,
    }
}

fn request(method: Method, path: &str, body: impl Into<Body>, bearer: bool) -> Request<Body> {
    let mut r = Request::builder()
        .method(method)
        .uri(path)
        .header(header::CONTENT_TYPE, "application/json");
    if bearer {
        r = r.header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    }
    r.body(body.into()).unwrap()
}

/// A refusal is problem+json whose `type` says what the header says.
fn assert_problem(a: &Answer, status: u16, outcome: &str) {
    assert_eq!(a.status.as_u16(), status, "{a:?}");
    assert_eq!(a.header, outcome, "{a:?}");
    assert_eq!(a.outcome.map(Outcome::as_str), Some(outcome), "{a:?}");
    assert_eq!(a.content_type, "application/problem+json", "{a:?}");
    assert_eq!(a.json["type"], format!("urn:idemgate:problem:{outcome}"));
    assert_eq!(a.json["status"], status, "{a:?}");
    assert!(
        a.json["detail"].as_str().is_some_and(|d| !d.is_empty()),
        "{a:?}"
    );
}

#[tokio::test]
async fn unknown_paths_and_sources_are_404_problems() {
    let r = router();
    let a = call(&r, request(Method::GET, "/nope", Body::empty(), false)).await;
    assert_problem(&a, 404, "not_found");

    let a = call(&r, request(Method::POST, "/hooks/nosuch", "{}", false)).await;
    assert_problem(&a, 404, "unknown_source");
    assert!(
        a.json["detail"].as_str().unwrap().contains("nosuch"),
        "{a:?}"
    );

    let body = json!({"source": "nosuch", "event_id": "e1"}).to_string();
    let a = call(&r, request(Method::POST, "/v1/claims", body, true)).await;
    assert_problem(&a, 404, "unknown_source");

    let a = call(
        &r,
        request(Method::GET, "/v1/events/nosuch/e1", Body::empty(), true),
    )
    .await;
    assert_problem(&a, 404, "unknown_source");
}

#[tokio::test]
async fn the_claim_api_needs_its_bearer_token() {
    let r = router();
    let body = json!({"source": "jobs", "event_id": "e1"}).to_string();
    let a = call(&r, request(Method::POST, "/v1/claims", body.clone(), false)).await;
    assert_problem(&a, 401, "unauthorized");
    assert!(a.headers.contains_key(header::WWW_AUTHENTICATE), "{a:?}");

    let mut wrong = request(Method::POST, "/v1/claims", body, false);
    wrong.headers_mut().insert(
        header::AUTHORIZATION,
        "Bearer not-the-token-at-all".parse().unwrap(),
    );
    let a = call(&r, wrong).await;
    assert_problem(&a, 401, "unauthorized");

    let a = call(
        &r,
        request(Method::GET, "/v1/events/jobs/e1", Body::empty(), false),
    )
    .await;
    assert_problem(&a, 401, "unauthorized");
}

#[tokio::test]
async fn bad_claim_bodies_name_what_is_wrong() {
    let r = router();
    for (body, outcome, names) in [
        ("{", "invalid_json", "line 1"),
        (r#"{"source": "jobs"}"#, "invalid_json", "event_id"),
        (
            r#"{"source": "jobs", "event_id": ""}"#,
            "invalid_event_id",
            "event id",
        ),
        (
            r#"{"source": "jobs", "event_id": "e1", "fingerprint": "xyz"}"#,
            "invalid_fingerprint",
            "fingerprint",
        ),
        (
            r#"{"source": "jobs", "event_id": "e1", "lease_s": 0}"#,
            "invalid_lease",
            "lease",
        ),
    ] {
        let a = call(&r, request(Method::POST, "/v1/claims", body, true)).await;
        assert_problem(&a, 400, outcome);
        let detail = a.json["detail"].as_str().unwrap().to_lowercase();
        assert!(detail.contains(names), "{body}: {detail}");
    }
}

#[tokio::test]
async fn a_claim_goes_through_every_answer() {
    let r = router();
    let claim = || {
        request(
            Method::POST,
            "/v1/claims",
            json!({"source": "jobs", "event_id": "job/1"}).to_string(),
            true,
        )
    };
    let a = call(&r, claim()).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (201, "claimed"));
    assert_eq!(a.outcome, Some(Outcome::Claimed));
    assert_eq!(a.json["outcome"], "claimed");
    let token = a.json["token"].as_str().unwrap().to_owned();

    let a = call(&r, claim()).await;
    assert_problem(&a, 409, "in_flight");
    assert!(a.headers.contains_key(header::RETRY_AFTER), "{a:?}");

    let path = "/v1/claims/jobs/job%2F1/complete";
    let bad = json!({"token": "not-a-token"}).to_string();
    let a = call(&r, request(Method::POST, path, bad, true)).await;
    assert_problem(&a, 400, "invalid_token");

    let good = json!({"token": token}).to_string();
    let a = call(&r, request(Method::POST, path, good.clone(), true)).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "completed"));
    assert_eq!(a.outcome, Some(Outcome::Completed));

    let a = call(&r, claim()).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "duplicate"));
    assert_eq!(a.json["state"], "done");

    let a = call(
        &r,
        request(Method::GET, "/v1/events/jobs/job%2F1", Body::empty(), true),
    )
    .await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "lookup"));
    assert_eq!(a.json["record"]["state"], "done", "{a:?}");

    // The holder's token cannot undo its completion: the event was processed, and its next
    // delivery stays a duplicate.
    let path = "/v1/claims/jobs/job%2F1/release";
    let a = call(&r, request(Method::POST, path, good, true)).await;
    assert_problem(&a, 409, "completed_claim");
    let a = call(&r, claim()).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "duplicate"));
}

#[tokio::test]
async fn hooks_map_signature_failures_and_accept_what_verifies() {
    let r = router();
    let a = call(&r, request(Method::POST, "/hooks/orders", "{}", false)).await;
    assert_problem(&a, 401, "missing_header");
    assert!(
        a.json["detail"]
            .as_str()
            .unwrap()
            .contains("stripe-signature")
    );

    let config = config();
    let source = config.sources.iter().find(|s| s.name == "orders").unwrap();
    let signer = idemgate_gateway::verifier(source).unwrap();
    let body = br#"{"id": "evt_1", "object": "event"}"#;
    let signed = |at: SystemTime| {
        let headers = signer.sign("evt_1", at, body).unwrap();
        let mut req = request(Method::POST, "/hooks/orders", body.to_vec(), false);
        req.headers_mut().extend(headers);
        req
    };
    // Signed an hour ago: outside Stripe's tolerance.
    let stale = SystemTime::now() - std::time::Duration::from_secs(3_600);
    let a = call(&r, signed(stale)).await;
    assert_problem(&a, 401, "stale_timestamp");

    let a = call(&r, signed(SystemTime::now())).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "accepted"));
    assert_eq!(a.outcome, Some(Outcome::Accepted));
    let a = call(&r, signed(SystemTime::now())).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "duplicate"));

    // Over the body limit: refused before anything is read or stored.
    let big = vec![b'x'; 8_192];
    let mut req = request(Method::POST, "/hooks/orders", big.clone(), false);
    req.headers_mut()
        .insert(header::CONTENT_LENGTH, big.len().into());
    let a = call(&r, req).await;
    assert_problem(&a, 413, "body_too_large");
}

#[tokio::test]
async fn admin_routes_answer_with_their_outcomes() {
    let r = router();
    // The router alone runs no dispatcher for its inbox source: degraded (still 200), saying so.
    let a = call(&r, request(Method::GET, "/healthz", Body::empty(), false)).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "degraded"));
    assert_eq!(a.json["status"], "degraded", "{a:?}");
    let dispatchers = a.json["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "dispatchers")
        .unwrap()
        .clone();
    assert_eq!(dispatchers["status"], "stopped", "{a:?}");
    let a = call(&r, request(Method::GET, "/livez", Body::empty(), false)).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "live"));
    let a = call(&r, request(Method::GET, "/readyz", Body::empty(), false)).await;
    assert_problem(&a, 503, "not_ready");

    let a = call(&r, request(Method::GET, "/metrics", Body::empty(), false)).await;
    assert_eq!(a.status.as_u16(), 200);
    assert!(a.content_type.starts_with("application/openmetrics-text"));

    let a = call(
        &r,
        request(Method::GET, "/openapi.json", Body::empty(), false),
    )
    .await;
    assert_eq!(a.status.as_u16(), 200);
    assert!(a.json["paths"]["/v1/claims"].is_object(), "{a:?}");
}

/// Span names seen while the test's subscriber is set.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0
            .lock()
            .unwrap()
            .push(attrs.metadata().name().to_owned());
    }
}

#[tokio::test]
async fn a_delivery_is_traced_from_the_handler_to_the_claim() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let r = router();
    // `provider = "none"`: a bearer token instead of a signature, the event id from a header.
    let a = call(&r, request(Method::POST, "/hooks/jobs", "{}", false)).await;
    assert_problem(&a, 401, "unauthorized");
    let a = call(&r, request(Method::POST, "/hooks/jobs", "{}", true)).await;
    assert_problem(&a, 400, "missing_event_id");
    let mut req = request(Method::POST, "/hooks/jobs", "{}", true);
    req.headers_mut()
        .insert("x-event-id", "job-7".parse().unwrap());
    let a = call(&r, req).await;
    assert_eq!(a.status.as_u16(), 200, "{a:?}");

    let seen = spans.0.lock().unwrap().clone();
    for name in ["delivery", "process_once"] {
        assert!(seen.iter().any(|s| s == name), "no {name} span in {seen:?}");
    }
}

/// The OpenAPI document describes every outcome the gateway can send: the header's pattern and
/// the problem type's pattern admit each spelling (snake_case).
#[test]
fn the_openapi_patterns_admit_every_outcome() {
    let doc: Value = serde_json::from_str(include_str!("../openapi.json")).unwrap();
    let header = doc["components"]["headers"]["Outcome"]["schema"]["pattern"]
        .as_str()
        .unwrap();
    let problem = doc["components"]["schemas"]["Problem"]["properties"]["type"]["pattern"]
        .as_str()
        .unwrap();
    assert_eq!(header, "^[a-z][a-z_]*$");
    assert_eq!(problem, "^urn:idemgate:problem:[a-z][a-z_]*$");
    for outcome in Outcome::ALL {
        let name = outcome.as_str();
        let mut chars = name.chars();
        assert!(
            chars.next().is_some_and(|c| c.is_ascii_lowercase())
                && chars.all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name} is outside the documented pattern"
        );
    }
}

#[tokio::test]
async fn replay_is_for_inbox_sources_and_says_why() {
    let r = router();
    let post = |source: &str, body: &str| {
        request(
            Method::POST,
            &format!("/v1/sources/{source}/replay"),
            body.to_owned(),
            true,
        )
    };
    let a = call(&r, post("queue", r#"{"reason": "downstream fixed"}"#)).await;
    assert_eq!((a.status.as_u16(), a.header.as_str()), (200, "replayed"));
    assert_eq!(a.json["moved"], 0, "{a:?}");
    let a = call(&r, post("queue", r#"{"reason": "x", "since_s": 3600}"#)).await;
    assert_eq!(a.status.as_u16(), 200, "{a:?}");

    let a = call(&r, post("orders", r#"{"reason": "x"}"#)).await;
    assert_problem(&a, 409, "not_inbox");
    let a = call(&r, post("nosuch", r#"{"reason": "x"}"#)).await;
    assert_problem(&a, 404, "unknown_source");
    let a = call(&r, post("queue", "{}")).await;
    assert_problem(&a, 400, "invalid_json");
    let a = call(&r, post("queue", r#"{"reason": "   "}"#)).await;
    assert_problem(&a, 400, "invalid_reason");
    let a = call(&r, post("queue", r#"{"reason": "x", "since_s": 1.5}"#)).await;
    assert_problem(&a, 400, "invalid_reason");
    let mut anonymous = post("queue", r#"{"reason": "x"}"#);
    anonymous.headers_mut().remove(header::AUTHORIZATION);
    assert_problem(&call(&r, anonymous).await, 401, "unauthorized");
}

#[tokio::test]
async fn replay_refuses_a_null_since_and_leases_parse_exactly() {
    let r = router();
    let a = call(
        &r,
        request(
            Method::POST,
            "/v1/sources/queue/replay",
            r#"{"reason": "x", "since_s": null}"#,
            true,
        ),
    )
    .await;
    assert_problem(&a, 400, "invalid_json");
    // A large whole lease written as a float is whole (parsed exactly), and cut to the TTL.
    let body = r#"{"source": "jobs", "event_id": "big-lease", "lease_s": 2083753024907641.0}"#;
    let a = call(&r, request(Method::POST, "/v1/claims", body, true)).await;
    assert_eq!(
        (a.status.as_u16(), a.header.as_str()),
        (201, "claimed"),
        "{a:?}"
    );
}
