//! Forward mode: the accepted delivery goes to the source's downstream over HTTP or HTTPS.
//!
//! [`client`] makes the one kind of client the gateway sends with: `http://` and `https://`
//! (rustls, *ring*, ALPN `http/1.1`), trusting and presenting what a [`ClientTls`] says, with
//! keep-alive pooling and a 5 s connect timeout. Forwards and the inbox dispatcher use it through
//! [`forward`]; [`get`] fetches a small document (a signing certificate, a JWKS) with it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderValue, Method, Request, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use idemgate_core::Key;
use idemgate_tls::{ClientTls, TlsError, rustls};

/// The gateway's outgoing HTTP client: `http://` and `https://`, pooled. Cheap to clone (clones
/// share the pool).
pub(crate) type Client =
    hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The client the sidecar ([`crate::sidecar`]) proxies with: `http://` and `https://` (the system's authorities),
/// streaming bodies.
pub(crate) type ProxyClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    axum::body::Body,
>;

/// How long a TCP connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an idle keep-alive connection stays in the pool.
const POOL_IDLE: Duration = Duration::from_secs(30);

/// A client for `http://` and `https://` URLs that trusts, for `https://`, the authorities `tls`
/// names (the system's and/or a CA file) and presents its client certificate, if any (mutual
/// TLS). The server's certificate is checked as `tls.verify` says (fully, by default). Build one
/// per set of settings and keep it: it reads its files once, and pools connections.
///
/// # Errors
/// [`TlsError`] naming the file at fault (unreadable, no usable PEM, a key that does not go with
/// its certificate), or that nothing would be trusted.
pub(crate) fn client(tls: &ClientTls) -> Result<Client, TlsError> {
    Ok(with_config(tls.config()?))
}

/// As [`client`], sending streamed bodies (the sidecar's proxy).
pub(crate) fn streaming_client(tls: &ClientTls) -> Result<ProxyClient, TlsError> {
    Ok(with_config(tls.config()?))
}

/// As [`http_client`], sending streamed bodies.
pub(crate) fn streaming_http_client() -> ProxyClient {
    with_config(no_roots())
}

/// A client for `http://` URLs only (an `https://` one is refused: it trusts no authority), for
/// sources that never speak TLS, so they need no trusted authorities on the machine.
pub(crate) fn http_client() -> Client {
    with_config(no_roots())
}

fn no_roots() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(idemgate_tls::provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

fn with_config<B>(
    mut config: rustls::ClientConfig,
) -> hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, B>
where
    B: http_body::Body + Send,
    B::Data: Send,
{
    // The gateway speaks HTTP/1.1 only; saying so lets a server that also speaks h2 pick right.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    // The TLS layer above handles `https://`; this one opens the TCP connection for both.
    http.enforce_http(false);
    let connector = HttpsConnector::from((http, Arc::new(config)));
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .build(connector)
}

/// How a forward (or a [`get`]) failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The downstream answered with a status other than 2xx (and maybe when to come back).
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No answer: connection refused or reset, a TLS handshake refused (an untrusted
    /// certificate, one for another name, no client certificate), or a malformed response.
    Unreachable {
        /// `scheme://host:port` of the downstream.
        downstream: String,
        /// Why, in words (a TLS failure as [`idemgate_tls::explain`] words it).
        why: String,
    },
    /// No answer within the timeout.
    Timeout(Duration),
    /// A [`get`] whose answer was longer than its limit.
    TooLarge { limit: usize },
}

impl Failure {
    /// The downstream's status, when it answered.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The downstream's `Retry-After`, in seconds, when it sent one.
    pub(crate) fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    fn unreachable(url: &hyper::Uri, err: &(dyn std::error::Error + 'static)) -> Self {
        Self::Unreachable {
            downstream: downstream(url),
            why: why(err, url.scheme_str() == Some("https")),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Status { status, .. } => write!(f, "the downstream answered {status}"),
            Self::Unreachable { downstream, why } => {
                write!(f, "the downstream {downstream} is unreachable: {why}")
            }
            Self::Timeout(t) => write!(
                f,
                "the downstream did not answer within {}",
                idemgate_core::Human(*t)
            ),
            Self::TooLarge { limit } => {
                write!(f, "the downstream's answer is longer than {limit} bytes")
            }
        }
    }
}

/// `scheme://host:port` of `url`: the downstream named without its path, query or credentials.
fn downstream(url: &hyper::Uri) -> String {
    let scheme = url.scheme_str().unwrap_or("http");
    let host = url.host().unwrap_or("?");
    let port = url
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    format!("{scheme}://{host}:{port}")
}

/// Why a request got no answer, in words: a TLS failure as [`idemgate_tls::explain`] says it
/// (the unknown issuer, the name the certificate is not valid for), anything else as its chain.
pub(crate) fn why(err: &(dyn std::error::Error + 'static), https: bool) -> String {
    if let Some(tls) = idemgate_tls::find(err) {
        return idemgate_tls::describe(tls);
    }
    let chain = crate::error::ErrorChain(err).to_string();
    if https && chain.contains("connection was not ready") {
        // TLS 1.3 finishes the client's side of the handshake before the server has checked the
        // client's certificate: a server refusing it closes a connection the client already
        // holds, and the pool reports only that, without the server's alert.
        return format!(
            "the connection closed right after the TLS handshake, before the request was sent: a \
             server refusing the client certificate (or asking for one when none was presented) \
             does this under TLS 1.3; its log says which ({chain})"
        );
    }
    chain
}

/// The headers that describe a body, carried with it to the downstream as the sender sent them:
/// its type, and its encoding (a compressed body is forwarded compressed, so the downstream
/// must be told).
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyHeaders {
    pub content_type: Option<HeaderValue>,
    pub content_encoding: Option<HeaderValue>,
}

impl BodyHeaders {
    /// The body headers of a request.
    pub(crate) fn of(headers: &axum::http::HeaderMap) -> Self {
        Self {
            content_type: headers.get(header::CONTENT_TYPE).cloned(),
            content_encoding: headers.get(header::CONTENT_ENCODING).cloned(),
        }
    }
}

/// What the downstream receives besides the body.
pub(crate) struct Delivery<'a> {
    pub key: &'a Key,
    pub attempt: u32,
    pub body_headers: &'a BodyHeaders,
}

/// `{source}:{event_id}` as a header value: event ids may hold any Unicode, a header only
/// printable ASCII, so every byte outside `!`..`~`, and `%` itself, is percent-encoded
/// (`evt_ü` is `evt_%C3%BC`). Ids of printable ASCII without `%` (nearly all) travel as they are.
pub(crate) fn idempotency_key(key: &Key) -> String {
    let text = key.to_string();
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_graphic() && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// POSTs `body` to `url` with `Idempotency-Key: {source}:{event_id}` (see [`idempotency_key`])
/// and `Idemgate-Attempt`, and waits for a 2xx within `timeout` (the whole exchange, response
/// body included).
pub(crate) async fn forward(
    client: &Client,
    url: &hyper::Uri,
    body: Bytes,
    delivery: Delivery<'_>,
    timeout: Duration,
) -> Result<u16, Failure> {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(url.clone())
        .header("idempotency-key", idempotency_key(delivery.key))
        .header("idemgate-attempt", delivery.attempt);
    if let Some(ct) = &delivery.body_headers.content_type {
        req = req.header(header::CONTENT_TYPE, ct);
    }
    if let Some(ce) = &delivery.body_headers.content_encoding {
        req = req.header(header::CONTENT_ENCODING, ce);
    }
    let req = req
        .body(Full::new(body))
        .map_err(|e| Failure::unreachable(url, &e))?;
    let exchange = async {
        let response = client
            .request(req)
            .await
            .map_err(|e| Failure::unreachable(url, &e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        // Read the answer to the end so the connection can be reused.
        let _ = response.into_body().collect().await;
        if status.is_success() {
            Ok(status.as_u16())
        } else {
            Err(Failure::Status {
                status: status.as_u16(),
                retry_after,
            })
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(Failure::Timeout(timeout)))
}

/// GETs `url` and returns its body: a small document (a signing certificate, a JWKS) at most
/// `limit` bytes long, answered 2xx within `timeout` (the whole exchange).
///
/// # Errors
/// A [`Failure`]: a status other than 2xx, no answer (its reason in words, a TLS failure
/// included), the timeout, or a body longer than `limit`.
pub(crate) async fn get(
    client: &Client,
    url: &hyper::Uri,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Failure> {
    let req = Request::builder()
        .method(Method::GET)
        .uri(url.clone())
        .body(Full::new(Bytes::new()))
        .map_err(|e| Failure::unreachable(url, &e))?;
    let exchange = async {
        let response = client
            .request(req)
            .await
            .map_err(|e| Failure::unreachable(url, &e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(Failure::Status {
                status: status.as_u16(),
                retry_after: None,
            });
        }
        match Limited::new(response.into_body(), limit).collect().await {
            Ok(body) => Ok(body.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => {
                Err(Failure::TooLarge { limit })
            }
            Err(e) => Err(Failure::Unreachable {
                downstream: downstream(url),
                why: why(&*e, url.scheme_str() == Some("https")),
            }),
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(Failure::Timeout(timeout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server answering `GET /doc` with `doc`, and 404 elsewhere; its `http://` base.
    async fn serve(doc: &'static str) -> String {
        let app = axum::Router::new().route("/doc", axum::routing::get(move || async move { doc }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }

    #[test]
    fn the_idempotency_key_is_printable_ascii_whatever_the_id() {
        let key = |id: &str| Key::parse("src", id).unwrap();
        assert_eq!(idempotency_key(&key("evt_1")), "src:evt_1");
        assert_eq!(idempotency_key(&key("évt")), "src:%C3%A9vt");
        assert_eq!(idempotency_key(&key("a b%c")), "src:a%20b%25c");
        // Always a valid header value.
        for id in ["\u{1F600}", "tab\there", "x\u{7f}y"] {
            if let Ok(k) = Key::parse("src", id) {
                HeaderValue::from_str(&idempotency_key(&k)).unwrap();
            }
        }
    }

    #[tokio::test]
    async fn get_fetches_a_small_document_and_refuses_a_long_one_or_a_non_2xx() {
        let base = serve("{\"keys\": []}").await;
        let client = client(&ClientTls::default()).unwrap();
        let url = |path: &str| format!("{base}{path}").parse::<hyper::Uri>().unwrap();
        let second = Duration::from_secs(1);
        let doc = get(&client, &url("/doc"), 64, second).await.unwrap();
        assert_eq!(&doc[..], b"{\"keys\": []}");
        let long = get(&client, &url("/doc"), 4, second).await.unwrap_err();
        assert!(matches!(long, Failure::TooLarge { limit: 4 }), "{long}");
        let missing = get(&client, &url("/nothing"), 64, second)
            .await
            .unwrap_err();
        assert_eq!(missing.status(), Some(404));
    }

    #[tokio::test]
    async fn an_unreachable_downstream_is_named_without_its_path_or_credentials() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let url: hyper::Uri = format!("https://user:secret@127.0.0.1:{port}/hook?token=t")
            .parse()
            .unwrap();
        let failure = get(&http_client(), &url, 64, Duration::from_secs(1))
            .await
            .unwrap_err();
        let text = failure.to_string();
        assert!(
            text.starts_with(&format!(
                "the downstream https://127.0.0.1:{port} is unreachable: "
            )),
            "{text}"
        );
        assert!(
            !text.contains("secret") && !text.contains("token"),
            "{text}"
        );
    }
}
