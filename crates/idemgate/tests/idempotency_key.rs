//! `IdempotencyKeyLayer` around an axum router on the SQLite store: the IETF Idempotency-Key
//! rules as a client meets them. One request per key reaches the handler; its response is given
//! back to every retry byte for byte; bad keys, missing keys, reused keys, keys in flight,
//! released keys and responses too large to keep are each answered as documented.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::{get, post};
use http_body_util::BodyExt;
use idemgate::ClaimStore;
use idemgate::idempotency_key::request::event_id;
use idemgate::idempotency_key::{IdempotencyKeyLayer, KeyRules, Principal, Route};
use idemgate::{Dedup, EventId, Key, SourceName, StoreConfig};
use tower::ServiceExt;

/// What the handler does with a request: its body says (`fail` answers 500 once per counter
/// unit, `big` answers 100 KiB, `slow` waits for the gate).
#[derive(Clone)]
struct Api {
    calls: Arc<AtomicUsize>,
    fail: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Default for Api {
    fn default() -> Self {
        Self {
            calls: Arc::default(),
            fail: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

fn router(api: &Api, rules: KeyRules, dedup: Dedup) -> axum::Router {
    let handler = {
        let api = api.clone();
        move |body: String| {
            let api = api.clone();
            async move {
                let n = api.calls.fetch_add(1, Ordering::SeqCst) + 1;
                if body.contains("slow") {
                    let _permit = api.gate.acquire().await.unwrap();
                }
                if body.contains("fail")
                    && api
                        .fail
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |f| f.checked_sub(1))
                        .is_ok()
                {
                    return (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        [("content-type", "text/plain")],
                        "down".to_owned(),
                    );
                }
                if body.contains("bad") {
                    return (
                        StatusCode::BAD_REQUEST,
                        [("content-type", "text/plain")],
                        format!("refused #{n}"),
                    );
                }
                let text = if body.contains("big") {
                    "x".repeat(100 << 10)
                } else {
                    format!("{{\"id\":\"pay_{n}\",\"body\":{body:?}}}")
                };
                (
                    StatusCode::CREATED,
                    [("content-type", "application/json")],
                    text,
                )
            }
        }
    };
    axum::Router::new()
        .route("/payments", post(handler.clone()))
        .route("/orders/{id}", post(handler).get(|| async { "order" }))
        .route("/health", get(|| async { "up" }))
        .layer(IdempotencyKeyLayer::new(dedup, rules))
}

struct Answer {
    status: StatusCode,
    outcome: String,
    replayed: bool,
    retry_after: Option<String>,
    body: String,
}

async fn send(app: &axum::Router, req: axum::http::request::Builder, body: &str) -> Answer {
    let response = app
        .clone()
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let (head, body) = response.into_parts();
    let header = |name: &str| {
        head.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (outcome, replayed, retry_after) = (
        header("idemgate-outcome").unwrap_or_default(),
        header("idempotent-replayed").as_deref() == Some("true"),
        header("retry-after"),
    );
    let status = head.status;
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status,
        outcome,
        replayed,
        retry_after,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn post_with(key: &str) -> axum::http::request::Builder {
    Request::post("/payments").header("idempotency-key", key)
}

async fn sqlite() -> (Dedup, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        path: dir.path().to_owned(),
        ..StoreConfig::default()
    };
    (Dedup::open(&config).await.unwrap(), dir)
}

fn rules() -> KeyRules {
    KeyRules::new(
        SourceName::new("payments").unwrap(),
        Duration::from_secs(3_600),
    )
    .routes([
        "POST /payments".parse().unwrap(),
        "POST /orders/*".parse().unwrap(),
    ])
}

#[tokio::test]
async fn a_retried_key_gets_the_first_response_byte_for_byte() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    let app = router(&api, rules(), dedup);
    let first = send(&app, post_with("\"pay-1\""), "{\"amount\":10}").await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed);
    // The same key, as a bare token this time: the same key.
    for key in ["\"pay-1\"", "pay-1"] {
        let retry = send(&app, post_with(key), "{\"amount\":10}").await;
        assert_eq!(
            (retry.status, retry.body.as_str()),
            (first.status, first.body.as_str())
        );
        assert!(retry.replayed, "a replay says so");
    }
    assert_eq!(api.calls.load(Ordering::SeqCst), 1);
    // A 4xx is the answer to that request: kept and replayed, as Stripe does.
    let refused = send(&app, post_with("pay-2"), "bad").await;
    let again = send(&app, post_with("pay-2"), "bad").await;
    assert_eq!(
        (refused.status, again.status, again.replayed),
        (StatusCode::BAD_REQUEST, StatusCode::BAD_REQUEST, true)
    );
    assert_eq!(again.body, refused.body);
    assert_eq!(api.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_same_key_on_another_request_is_422_and_runs_nothing() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    let app = router(&api, rules(), dedup);
    assert_eq!(
        send(&app, post_with("k"), "{\"amount\":10}").await.status,
        StatusCode::CREATED
    );
    let other = send(&app, post_with("k"), "{\"amount\":99}").await;
    assert_eq!(
        (other.status, other.outcome.as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_reused")
    );
    let problem: serde_json::Value = serde_json::from_str(&other.body).unwrap();
    assert_eq!(
        problem["type"],
        "urn:idemgate:problem:idempotency_key_reused"
    );
    assert_eq!(problem["error"]["type"], "idempotency_error");
    // Another path under the same key is another request too.
    let elsewhere = send(
        &app,
        Request::post("/orders/7").header("idempotency-key", "k"),
        "{\"amount\":10}",
    )
    .await;
    assert_eq!(
        elsewhere.status,
        StatusCode::CREATED,
        "another route is another scope"
    );
    assert_eq!(api.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn bad_and_missing_keys_are_refused_before_anything_runs() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    let app = router(&api, rules(), dedup);
    let missing = send(&app, Request::post("/payments"), "{}").await;
    assert_eq!(
        (missing.status, missing.outcome.as_str()),
        (StatusCode::BAD_REQUEST, "missing_idempotency_key")
    );
    let long = "k".repeat(256);
    for bad in ["\"\"", "", long.as_str(), "\"open", "a b", "\"a\";x=1"] {
        let answer = send(&app, post_with(bad), "{}").await;
        assert_eq!(
            (answer.status, answer.outcome.as_str()),
            (StatusCode::BAD_REQUEST, "invalid_idempotency_key"),
            "{bad:?}: {}",
            answer.body
        );
    }
    let twice = send(&app, post_with("a").header("idempotency-key", "b"), "{}").await;
    assert_eq!(twice.outcome, "invalid_idempotency_key");
    assert!(twice.body.contains("more than once"), "{}", twice.body);
    // Over the fingerprint limit: 413, nothing stored.
    let limited = router(&api, rules().body_limit(16), sqlite().await.0);
    let large = send(&limited, post_with("big-body"), &"x".repeat(17)).await;
    assert_eq!(large.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(api.calls.load(Ordering::SeqCst), 0);
    // Routes that are not keyed pass through, key or not.
    let health = send(&app, Request::get("/health"), "").await;
    assert_eq!(
        (health.status, health.body.as_str()),
        (StatusCode::OK, "up")
    );
    let order = send(&app, Request::get("/orders/1"), "").await;
    assert_eq!(order.body, "order");
}

#[tokio::test]
async fn a_5xx_gives_the_key_back_and_the_retry_runs_once() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    api.fail.store(1, Ordering::SeqCst);
    let app = router(&api, rules(), dedup);
    let failed = send(&app, post_with("f"), "fail").await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    let retry = send(&app, post_with("f"), "fail").await;
    assert_eq!(retry.status, StatusCode::CREATED);
    let again = send(&app, post_with("f"), "fail").await;
    assert!(again.replayed);
    assert_eq!(api.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_copy_in_flight_is_409_or_waits_for_the_first_answer() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    let app = router(&api, rules(), dedup.clone());
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, post_with("slow-1"), "slow").await }
    });
    while api.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let busy = send(&app, post_with("slow-1"), "slow").await;
    assert_eq!(
        (busy.status, busy.outcome.as_str()),
        (StatusCode::CONFLICT, "in_flight")
    );
    assert!(busy.retry_after.is_some(), "409 says when to come back");
    // With wait_for_first, a copy waits and gets the first answer.
    let waiting_app = router(
        &api,
        rules().wait_for_first(Duration::from_secs(10)),
        dedup.clone(),
    );
    let waiting =
        tokio::spawn(async move { send(&waiting_app, post_with("slow-1"), "slow").await });
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    api.gate.add_permits(1);
    let first = first.await.unwrap();
    let waited = waiting.await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(
        (waited.status, waited.body.as_str(), waited.replayed),
        (StatusCode::CREATED, first.body.as_str(), true)
    );
    assert_eq!(api.calls.load(Ordering::SeqCst), 1);
    // The second of waiting read the record, and claimed only when the first had ended: the
    // key's history is the first's claim and completion, the 409's copy, and the waiting copy's
    // first claim and its replay, not a row per look.
    let route: Route = "POST /payments".parse().unwrap();
    let key = Key::new(
        SourceName::new("payments").unwrap(),
        EventId::new(event_id("", &route, &"slow-1".parse().unwrap())).unwrap(),
    );
    let view = dedup.store().lookup(&key).await.unwrap();
    let outcomes: Vec<_> = view.history.iter().map(|h| h.outcome.as_str()).collect();
    assert_eq!(
        outcomes,
        [
            "claimed",
            "in_flight",
            "in_flight",
            "completed",
            "duplicate"
        ],
        "{outcomes:?}"
    );
}

#[tokio::test]
async fn a_client_that_hangs_up_does_not_leave_its_key_unsettled() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    let app = router(&api, rules(), dedup);
    let hung_up = tokio::spawn({
        let app = app.clone();
        async move { send(&app, post_with("gone"), "slow").await }
    });
    while api.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The client goes away while the handler runs; the handler then finishes.
    hung_up.abort();
    api.gate.add_permits(1);
    let mut retry = send(&app, post_with("gone"), "slow").await;
    for _ in 0..100 {
        if retry.status != StatusCode::CONFLICT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        retry = send(&app, post_with("gone"), "slow").await;
    }
    assert_eq!((retry.status, retry.replayed), (StatusCode::CREATED, true));
    assert_eq!(
        api.calls.load(Ordering::SeqCst),
        1,
        "the retry did not run it again"
    );
}

#[tokio::test]
async fn a_response_too_large_to_keep_is_410_for_its_retries() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    let app = router(&api, rules(), dedup);
    let first = send(&app, post_with("big"), "big").await;
    assert_eq!(
        (first.status, first.body.len()),
        (StatusCode::CREATED, 100 << 10)
    );
    let retry = send(&app, post_with("big"), "big").await;
    assert_eq!(
        (retry.status, retry.outcome.as_str()),
        (StatusCode::GONE, "response_not_kept")
    );
    assert!(retry.body.contains("bytes"), "{}", retry.body);
    assert_eq!(api.calls.load(Ordering::SeqCst), 1, "not run again");
}

#[tokio::test]
async fn keys_belong_to_their_principal() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    let app = router(&api, rules().principal(Principal::Bearer), dedup);
    let as_a = || post_with("same").header("authorization", "Bearer sk_a");
    let as_b = || post_with("same").header("authorization", "Bearer sk_b");
    let a = send(&app, as_a(), "{}").await;
    let b = send(&app, as_b(), "{}").await;
    assert_eq!(
        (a.status, b.status),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert_ne!(a.body, b.body, "b is not given a's response");
    assert!(send(&app, as_a(), "{}").await.replayed);
    let nobody = send(&app, post_with("same"), "{}").await;
    assert_eq!(
        (nobody.status, nobody.outcome.as_str()),
        (StatusCode::BAD_REQUEST, "missing_principal")
    );
    assert_eq!(api.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn sixty_four_concurrent_copies_run_once() {
    let (dedup, _dir) = sqlite().await;
    let api = Api::default();
    let app = router(&api, rules(), dedup);
    let copies: Vec<_> = (0..64)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { send(&app, post_with("race"), "{\"amount\":1}").await })
        })
        .collect();
    let mut statuses = Vec::new();
    for copy in copies {
        let answer = copy.await.unwrap();
        statuses.push((answer.status, answer.replayed));
    }
    let first = statuses
        .iter()
        .filter(|(s, replayed)| *s == StatusCode::CREATED && !replayed)
        .count();
    let others_ok = statuses.iter().all(|(s, replayed)| {
        (*s == StatusCode::CREATED && (*replayed || first == 1)) || *s == StatusCode::CONFLICT
    });
    assert_eq!(first, 1, "{statuses:?}");
    assert!(others_ok, "{statuses:?}");
    assert_eq!(api.calls.load(Ordering::SeqCst), 1);
}
