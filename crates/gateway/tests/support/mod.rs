//! Test support: a gateway on 127.0.0.1:0, a scriptable downstream (over HTTP or HTTPS), and a
//! small HTTP client.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idemgate_gateway::Config;
use idemgate_tls::rustls;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// What the downstream does with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    /// 200 at once.
    Ok,
    /// 200 after a pause.
    Slow(Duration),
    /// 500.
    Fail,
    /// Never answers (well, after a minute).
    Hang,
}

#[derive(Debug, Default)]
struct Seen {
    behaviour: Option<Behaviour>,
    /// Idempotency-Key -> the Idemgate-Attempt of each delivery received.
    deliveries: HashMap<String, Vec<u32>>,
    content_types: Vec<String>,
    content_encodings: Vec<String>,
    /// HTTPS: connections accepted, the ALPN protocol each agreed, and why each refused
    /// handshake was refused.
    connections: usize,
    alpn: Vec<Option<String>>,
    refused: Vec<String>,
}

/// A downstream service that records what it receives.
#[derive(Debug, Clone)]
pub struct Downstream {
    pub url: String,
    seen: Arc<Mutex<Seen>>,
}

impl Downstream {
    pub async fn start(behaviour: Behaviour) -> Self {
        let (seen, app) = Self::app(behaviour);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url: format!("http://{addr}/hook"),
            seen,
        }
    }

    /// The same downstream over HTTPS with `tls` (see [`server_tls`]), at
    /// `https://127.0.0.1:{port}/hook`.
    pub async fn start_https(behaviour: Behaviour, tls: Arc<rustls::ServerConfig>) -> Self {
        let (seen, app) = Self::app(behaviour);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let state = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, app, seen) = (acceptor.clone(), app.clone(), state.clone());
                tokio::spawn(async move {
                    seen.lock().unwrap().connections += 1;
                    let stream = match acceptor.accept(tcp).await {
                        Ok(stream) => stream,
                        Err(e) => {
                            seen.lock().unwrap().refused.push(e.to_string());
                            return;
                        }
                    };
                    let alpn = stream
                        .get_ref()
                        .1
                        .alpn_protocol()
                        .map(|p| String::from_utf8_lossy(p).into_owned());
                    seen.lock().unwrap().alpn.push(alpn);
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            url: format!("https://{addr}/hook"),
            seen,
        }
    }

    fn app(behaviour: Behaviour) -> (Arc<Mutex<Seen>>, axum::Router) {
        let seen = Arc::new(Mutex::new(Seen {
            behaviour: Some(behaviour),
            ..Seen::default()
        }));
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post({
                let seen = seen.clone();
                move |headers: HeaderMap, _body: Bytes| {
                    let seen = seen.clone();
                    async move {
                        let behaviour = {
                            let mut s = seen.lock().unwrap();
                            let key = header(&headers, "idempotency-key");
                            let attempt = header(&headers, "idemgate-attempt").parse().unwrap_or(0);
                            s.deliveries.entry(key).or_default().push(attempt);
                            s.content_types.push(header(&headers, "content-type"));
                            s.content_encodings
                                .push(header(&headers, "content-encoding"));
                            s.behaviour.unwrap_or(Behaviour::Ok)
                        };
                        match behaviour {
                            Behaviour::Ok => StatusCode::OK,
                            Behaviour::Slow(d) => {
                                tokio::time::sleep(d).await;
                                StatusCode::OK
                            }
                            Behaviour::Fail => StatusCode::INTERNAL_SERVER_ERROR,
                            Behaviour::Hang => {
                                tokio::time::sleep(Duration::from_secs(60)).await;
                                StatusCode::OK
                            }
                        }
                    }
                }
            }),
        );
        (seen, app)
    }

    pub fn set(&self, behaviour: Behaviour) {
        self.seen.lock().unwrap().behaviour = Some(behaviour);
    }

    /// The attempts received for `{source}:{event_id}`.
    pub fn attempts(&self, key: &str) -> Vec<u32> {
        self.seen
            .lock()
            .unwrap()
            .deliveries
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    pub fn total(&self) -> usize {
        self.seen
            .lock()
            .unwrap()
            .deliveries
            .values()
            .map(Vec::len)
            .sum()
    }

    pub fn content_types(&self) -> Vec<String> {
        self.seen.lock().unwrap().content_types.clone()
    }

    pub fn content_encodings(&self) -> Vec<String> {
        self.seen.lock().unwrap().content_encodings.clone()
    }

    /// Every `Idempotency-Key` received, as text.
    pub fn keys(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .deliveries
            .keys()
            .cloned()
            .collect()
    }

    /// HTTPS: how many connections were opened to it.
    pub fn connections(&self) -> usize {
        self.seen.lock().unwrap().connections
    }

    /// HTTPS: the ALPN protocol agreed on each connection whose handshake finished.
    pub fn alpn(&self) -> Vec<Option<String>> {
        self.seen.lock().unwrap().alpn.clone()
    }

    /// HTTPS: why each refused handshake was refused, as the server saw it.
    pub fn refused(&self) -> Vec<String> {
        self.seen.lock().unwrap().refused.clone()
    }
}

/// A server TLS configuration presenting `pair` (agreeing `h2` or `http/1.1` by ALPN, as a
/// server speaking both would), and, with `clients`, requiring a client certificate signed by
/// that authority (mutual TLS).
pub fn server_tls(
    pair: &idemgate_tls::testing::Pair,
    clients: Option<&idemgate_tls::testing::TestCa>,
) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let provider = idemgate_tls::provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
                .unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .build()
            .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let chain = CertificateDer::pem_slice_iter(pair.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).unwrap();
    let mut config = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

fn header(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// A running gateway.
pub struct Gateway {
    pub addr: SocketAddr,
    pub config: Config,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), idemgate_gateway::StartError>>>,
    _dir: Option<tempfile::TempDir>,
}

impl Gateway {
    /// Starts a gateway on the SQLite store in a fresh directory. `config` is TOML without the
    /// `[store]` table.
    pub async fn start(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "{config}\n[store]\nkind = \"sqlite\"\npath = {:?}\n",
            dir.path().display().to_string()
        );
        let mut gw = Self::start_with(&text).await;
        gw._dir = Some(dir);
        gw
    }

    /// Starts a gateway on a complete config text.
    pub async fn start_with(text: &str) -> Self {
        let config = Config::from_toml(text).unwrap_or_else(|e| panic!("config: {e}"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(idemgate_gateway::run(
            config.clone(),
            listener,
            async move {
                let _ = stopped.await;
            },
        ));
        let gw = Self {
            addr,
            config,
            stop: Some(stop),
            task: Some(task),
            _dir: None,
        };
        // Wait until it answers (on the admin listener, when there is one).
        let health = match &gw.config.admin_listen {
            Some(admin) => format!("http://{admin}/healthz"),
            None => gw.url("/healthz"),
        };
        for _ in 0..100 {
            if let Ok(r) = send(Method::GET, &health, HeaderMap::new(), Bytes::new()).await
                && r.status == 200
            {
                return gw;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the gateway did not come up");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub async fn get(&self, path: &str) -> Result<Answer, String> {
        send(Method::GET, &self.url(path), HeaderMap::new(), Bytes::new()).await
    }

    pub async fn post(&self, path: &str, headers: HeaderMap, body: impl Into<Bytes>) -> Answer {
        send(Method::POST, &self.url(path), headers, body.into())
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
    }

    /// Stops the gateway and waits for it to finish draining.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }

    /// Where the SQLite store lives.
    pub fn data_dir(&self) -> std::path::PathBuf {
        self.config.store.path.clone()
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn outcome(&self) -> &str {
        self.headers
            .get("idemgate-outcome")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

pub async fn send(
    method: Method,
    url: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Answer, String> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::builder().method(method).uri(url);
    for (name, value) in &headers {
        req = req.header(name, value);
    }
    let req = req.body(Full::new(body)).map_err(|e| e.to_string())?;
    let response = client.request(req).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// Headers from `(name, value)` pairs.
pub fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    h
}

/// Signs a delivery as the source's provider would, with the source's first secret.
pub fn sign(gw: &Gateway, source: &str, event_id: &str, at: SystemTime, body: &[u8]) -> HeaderMap {
    let sc = gw
        .config
        .sources
        .iter()
        .find(|s| s.name == source)
        .unwrap_or_else(|| panic!("no source {source}"));
    signer(sc, 0).sign(event_id, at, body).unwrap()
}

/// A verifier holding only the source's secret number `index`, for signing.
pub fn signer(
    sc: &idemgate_gateway::config::SourceConfig,
    index: usize,
) -> idemgate_providers::Verifier {
    let mut one = sc.clone();
    one.secrets = vec![sc.secrets[index].clone()];
    idemgate_gateway::verifier(&one).unwrap()
}
