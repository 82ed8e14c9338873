//! S3's HTTP transport: object_store signs the requests (with ring), hyper sends them over
//! rustls, trusting the system's authorities and the archive's `ca_file`, as the gateway's
//! forwards do. No reqwest, no second TLS stack.

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use object_store::ClientOptions;
use object_store::client::{
    HttpClient, HttpConnector as Connect, HttpError, HttpErrorKind, HttpRequest, HttpRequestBody,
    HttpResponse, HttpResponseBody, HttpService,
};

/// Opens hyper clients for object_store.
#[derive(Debug, Clone)]
pub struct Hyper {
    tls: Arc<rustls::ClientConfig>,
}

impl Hyper {
    pub fn new(tls: rustls::ClientConfig) -> Self {
        Self { tls: Arc::new(tls) }
    }
}

impl Connect for Hyper {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(std::time::Duration::from_secs(5)));
        let connector = HttpsConnector::from((http, self.tls.clone()));
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(HttpClient::new(Service { client }))
    }
}

#[derive(Debug)]
struct Service {
    client: Client<HttpsConnector<HttpConnector>, HttpRequestBody>,
}

#[async_trait::async_trait]
impl HttpService for Service {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let response = self.client.request(req).await.map_err(|e| {
            let kind = if e.is_connect() {
                HttpErrorKind::Connect
            } else {
                HttpErrorKind::Request
            };
            HttpError::new(kind, e)
        })?;
        let (parts, body) = response.into_parts();
        let body =
            HttpResponseBody::new(body.map_err(|e| HttpError::new(HttpErrorKind::Decode, e)));
        Ok(HttpResponse::from_parts(parts, body))
    }
}
