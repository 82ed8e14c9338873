//! `IdempotencyLayer` around an axum router: duplicates answered without calling the handler,
//! any answer but a 2xx (a 5xx, an unrouted path's 404, a 400, a 429) releasing the claim,
//! refusals from the key function, a verified provider scheme, and conflicts answered as the
//! gateway answers them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use http_body_util::BodyExt;
use idemgate::layer::{Refusal, verified};
use idemgate::{
    AnyStore, ClaimRequest, ClaimStore, Claimed, Dedup, Fingerprint, HistoryOutcome,
    IdempotencyLayer, Key, OnConflict, Scheme, Secret, SourceName, Verifier,
};
use tower::ServiceExt;

/// A handler that counts its calls and answers with the attempt, or 500 while `fail` is set.
fn app(calls: Arc<AtomicUsize>, fail: Arc<AtomicUsize>, layer: IdempotencyLayer) -> axum::Router {
    axum::Router::new()
        .route(
            "/hook",
            post(move |claimed: axum::Extension<Claimed>| {
                let (calls, fail) = (calls.clone(), fail.clone());
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    if fail.load(Ordering::SeqCst) > 0 {
                        fail.fetch_sub(1, Ordering::SeqCst);
                        return (StatusCode::INTERNAL_SERVER_ERROR, "down".to_owned());
                    }
                    (StatusCode::OK, format!("attempt {}", claimed.token.attempt))
                }
            }),
        )
        .layer(layer)
}

/// The event id from an `x-id` header.
fn by_header(
    parts: &axum::http::request::Parts,
    _body: &bytes::Bytes,
) -> Result<ClaimRequest, Refusal> {
    let id = parts
        .headers
        .get("x-id")
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Refusal::new(StatusCode::BAD_REQUEST, "missing_event_id", "no x-id"))?;
    let key = Key::parse("bus", id)
        .map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, "invalid_event_id", e.to_string()))?;
    Ok(ClaimRequest::new(
        key,
        Duration::from_secs(60),
        Duration::from_secs(3_600),
    ))
}

async fn send(app: &axum::Router, id: Option<&str>) -> (StatusCode, String, String) {
    let mut req = Request::post("/hook");
    if let Some(id) = id {
        req = req.header("x-id", id);
    }
    let response = app
        .clone()
        .oneshot(req.body(Body::from("{}")).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let outcome = response
        .headers()
        .get("idemgate-outcome")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, outcome, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn duplicates_are_answered_without_calling_the_service() {
    let (calls, fail) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let layer = IdempotencyLayer::new(Dedup::new(AnyStore::memory()), by_header);
    let app = app(calls.clone(), fail, layer);
    assert_eq!(
        send(&app, Some("e-1")).await,
        (StatusCode::OK, String::new(), "attempt 1".into())
    );
    let (status, outcome, _) = send(&app, Some("e-1")).await;
    assert_eq!((status, outcome.as_str()), (StatusCode::OK, "duplicate"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_5xx_is_passed_on_and_releases_the_claim() {
    let (calls, fail) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(1)));
    let layer = IdempotencyLayer::new(Dedup::new(AnyStore::memory()), by_header);
    let app = app(calls.clone(), fail, layer);
    let (status, _, body) = send(&app, Some("e-2")).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::INTERNAL_SERVER_ERROR, "down")
    );
    // The retry is processed (a fresh claim).
    assert_eq!(send(&app, Some("e-2")).await.0, StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A router whose `/hook/{status}` answers that status, counting its calls, behind `layer`.
fn answering(calls: Arc<AtomicUsize>, layer: IdempotencyLayer) -> axum::Router {
    axum::Router::new()
        .route(
            "/hook/{status}",
            post(
                move |axum::extract::Path(status): axum::extract::Path<u16>| {
                    let calls = calls.clone();
                    async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        StatusCode::from_u16(status).unwrap()
                    }
                },
            ),
        )
        .layer(layer)
}

async fn post_to(app: &axum::Router, path: &str, id: &str) -> (StatusCode, String) {
    let response = app
        .clone()
        .oneshot(
            Request::post(path)
                .header("x-id", id)
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await
        .unwrap();
    let outcome = response
        .headers()
        .get("idemgate-outcome")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (response.status(), outcome)
}

#[tokio::test]
async fn only_a_2xx_completes_the_claim_by_default() {
    // A delivery to a path the service does not route (404), and answers of 400, 422 and 429: none
    // is proof the event was processed, so each releases the claim and the retry reaches the
    // service again, never "duplicate".
    let calls = Arc::new(AtomicUsize::new(0));
    let dedup = Dedup::new(AnyStore::memory());
    let layer = IdempotencyLayer::new(dedup.clone(), by_header);
    let app = answering(calls.clone(), layer);
    let (status, outcome) = post_to(&app, "/unrouted", "e-404").await;
    assert_eq!((status, outcome.as_str()), (StatusCode::NOT_FOUND, ""));
    let (status, outcome) = post_to(&app, "/unrouted", "e-404").await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the retry was not answered duplicate: {outcome}"
    );
    let view = dedup
        .store()
        .lookup(&Key::parse("bus", "e-404").unwrap())
        .await
        .unwrap();
    assert!(view.record.is_none(), "released, not completed: {view:?}");
    for status in [400u16, 422, 429] {
        let id = format!("e-{status}");
        let before = calls.load(Ordering::SeqCst);
        assert_eq!(
            post_to(&app, &format!("/hook/{status}"), &id)
                .await
                .0
                .as_u16(),
            status
        );
        assert_eq!(
            post_to(&app, &format!("/hook/{status}"), &id)
                .await
                .0
                .as_u16(),
            status
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            before + 2,
            "{status}: the retry ran again"
        );
    }
    // 2xx completes.
    assert_eq!(
        post_to(&app, "/hook/204", "e-204").await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        post_to(&app, "/hook/204", "e-204").await,
        (StatusCode::OK, "duplicate".to_owned())
    );
}

#[tokio::test]
async fn the_statuses_that_complete_are_the_callers_to_choose() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(Dedup::new(AnyStore::memory()), by_header)
        .complete_on(|s| s.is_success() || s == StatusCode::UNPROCESSABLE_ENTITY);
    let app = answering(calls.clone(), layer);
    assert_eq!(
        post_to(&app, "/hook/422", "e-1").await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        post_to(&app, "/hook/422", "e-1").await,
        (StatusCode::OK, "duplicate".to_owned())
    );
    assert_eq!(
        post_to(&app, "/hook/400", "e-2").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        post_to(&app, "/hook/400", "e-2").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_key_functions_refusal_is_a_problem_and_calls_nothing() {
    let (calls, fail) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let layer = IdempotencyLayer::new(Dedup::new(AnyStore::memory()), by_header);
    let app = app(calls.clone(), fail, layer);
    let (status, outcome, body) = send(&app, None).await;
    assert_eq!(
        (status, outcome.as_str()),
        (StatusCode::BAD_REQUEST, "missing_event_id")
    );
    assert!(
        body.contains("urn:idemgate:problem:missing_event_id"),
        "{body}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_stripe_source_verifies_signatures_and_takes_the_body_id() {
    let verifier = || {
        Verifier::new(
            Scheme::Stripe,
            vec![Secret::from("whsec_layer_test")],
            Verifier::DEFAULT_TOLERANCE,
        )
        .unwrap()
    };
    let key = verified(
        SourceName::new("stripe-live").unwrap(),
        verifier(),
        Duration::from_secs(7 * 86_400),
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(Dedup::new(AnyStore::memory()), key);
    let app = app(calls.clone(), Arc::new(AtomicUsize::new(0)), layer);
    let body = r#"{"id":"evt_layer_1","object":"event"}"#;
    let signed = verifier()
        .sign("evt_layer_1", SystemTime::now(), body.as_bytes())
        .unwrap();
    let request = |headers: &axum::http::HeaderMap| {
        let mut req = Request::post("/hook");
        for (name, value) in headers {
            req = req.header(name, value);
        }
        req.body(Body::from(body)).unwrap()
    };
    let r = app.clone().oneshot(request(&signed)).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = app.clone().oneshot(request(&signed)).await.unwrap();
    assert_eq!(r.headers()["idemgate-outcome"], "duplicate");
    // A forged signature is refused before any claim.
    let r = app
        .clone()
        .oneshot(request(&axum::http::HeaderMap::new()))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// The event id from an `x-id` header, and the body's SHA-256 as the payload's fingerprint.
fn by_header_and_body(
    parts: &axum::http::request::Parts,
    body: &bytes::Bytes,
) -> Result<ClaimRequest, Refusal> {
    use sha2::Digest;
    let claim = by_header(parts, body)?;
    Ok(claim.fingerprint(Fingerprint(sha2::Sha256::digest(body).into())))
}

async fn post_body(
    app: &axum::Router,
    id: &str,
    body: &'static str,
) -> (StatusCode, String, String) {
    let response = app
        .clone()
        .oneshot(
            Request::post("/hook")
                .header("x-id", id)
                .body(Body::from(body))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status();
    let outcome = response
        .headers()
        .get("idemgate-outcome")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, outcome, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn a_conflict_is_a_200_by_default_as_the_gateways_and_a_409_when_rejected() {
    for (policy, status) in [
        (None, StatusCode::OK),
        (Some(OnConflict::Duplicate), StatusCode::OK),
        (Some(OnConflict::Reject), StatusCode::CONFLICT),
    ] {
        let calls = Arc::new(AtomicUsize::new(0));
        let dedup = Dedup::new(AnyStore::memory());
        let mut layer = IdempotencyLayer::new(dedup.clone(), by_header_and_body);
        if let Some(policy) = policy {
            layer = layer.on_conflict(policy);
        }
        let app = app(calls.clone(), Arc::new(AtomicUsize::new(0)), layer);
        assert_eq!(
            post_body(&app, "e-1", r#"{"amount":1}"#).await.0,
            StatusCode::OK
        );
        // The same id with another payload: the service is not called, whatever the answer.
        let (got, outcome, body) = post_body(&app, "e-1", r#"{"amount":2}"#).await;
        assert_eq!(
            (got, outcome.as_str()),
            (status, "conflict"),
            "{policy:?}: {body}"
        );
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(body["first_seen"].is_string(), "{policy:?}: {body}");
        if status == StatusCode::CONFLICT {
            assert_eq!(body["type"], "urn:idemgate:problem:conflict", "{body}");
        } else {
            assert_eq!(body["outcome"], "conflict", "{body}");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{policy:?}");
        // Recorded in history either way; the first payload's retry is still a duplicate.
        let view = dedup
            .store()
            .lookup(&Key::parse("bus", "e-1").unwrap())
            .await
            .unwrap();
        assert!(
            view.history
                .iter()
                .any(|h| h.outcome == HistoryOutcome::Conflict),
            "{view:?}"
        );
        let (got, outcome, _) = post_body(&app, "e-1", r#"{"amount":1}"#).await;
        assert_eq!((got, outcome.as_str()), (StatusCode::OK, "duplicate"));
    }
    assert_eq!(OnConflict::default(), OnConflict::Duplicate);
}
