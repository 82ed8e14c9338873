//! The HTTP client every sender shares, and small GET helpers for `/healthz`, `/metrics` and a
//! process's `Date`.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

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

/// GETs `url`: its status and body, or why not (within `timeout`).
pub async fn get(client: &Client, url: &str, timeout: Duration) -> Result<(u16, String), String> {
    let req = hyper::Request::get(url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
}

/// GETs `url` for its `Date` header (the answering process's wall clock), within `timeout`.
pub async fn date(client: &Client, url: &str, timeout: Duration) -> Result<String, String> {
    let req = hyper::Request::get(url)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let date = resp
            .headers()
            .get(hyper::header::DATE)
            .and_then(|d| d.to_str().ok())
            .map(str::to_owned);
        // Read to the end, so the connection goes back to the pool.
        let _ = resp.into_body().collect().await;
        date.ok_or_else(|| "the answer had no Date header".to_owned())
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")))
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
