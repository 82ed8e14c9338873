//! The HTTP client every sender shares, one exchange read to its end within a timeout, small GET
//! helpers for `/healthz`, `/metrics` and a process's `Date`, and the HTTP/1.1 server loop of the
//! harness's own servers (the downstream, the sidecar's upstream).

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

pub type Client = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

pub fn client() -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(2)));
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(512)
        .build(connector)
}

/// Sends `req` and reads the answer to its end (so the connection goes back to the pool):
/// status, headers and body, or why not (within `timeout`).
pub async fn exchange(
    client: &Client,
    req: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<(u16, HeaderMap, String), String> {
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((
            parts.status.as_u16(),
            parts.headers,
            String::from_utf8_lossy(&body).into_owned(),
        ))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
}

fn get_request(url: &str) -> Result<Request<Full<Bytes>>, String> {
    Request::get(url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())
}

/// GETs `url`: its status and body, or why not (within `timeout`).
pub async fn get(client: &Client, url: &str, timeout: Duration) -> Result<(u16, String), String> {
    let (status, _, body) = exchange(client, get_request(url)?, timeout).await?;
    Ok((status, body))
}

/// GETs `url` for its `Date` header (the answering process's wall clock), within `timeout`.
pub async fn date(client: &Client, url: &str, timeout: Duration) -> Result<String, String> {
    let (_, headers, _) = exchange(client, get_request(url)?, timeout).await?;
    headers
        .get(hyper::header::DATE)
        .and_then(|d| d.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| "the answer had no Date header".to_owned())
}

/// Serves HTTP/1.1 on `listener` until aborted, each connection on a task of its own, each
/// request answered by `handle`.
pub async fn serve<F, Fut>(listener: TcpListener, handle: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let answer = handle(req);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The sum of every sample of metric `name` whose labels contain `labels` (Prometheus text).
pub fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && rest.contains(labels)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

#[cfg(test)]
mod tests {
    #[test]
    fn metric_sums_matching_samples() {
        let text = "# HELP x\nidemgate_redis_tier_total{result=\"hit\"} 12\nidemgate_redis_tier_total{result=\"miss\"} 3\nidemgate_live_rows 7\nidemgate_live_rows_other 1\n";
        assert_eq!(
            super::metric(text, "idemgate_redis_tier_total", "\"hit\""),
            12.0
        );
        assert_eq!(super::metric(text, "idemgate_redis_tier_total", ""), 15.0);
        assert_eq!(super::metric(text, "idemgate_live_rows", ""), 7.0);
        assert_eq!(super::metric(text, "absent", ""), 0.0);
    }
}
