//! The documents a source's verifier needs besides the request, fetched over HTTPS and kept:
//! Pub/Sub's JWKS (`jwks_url`) and SNS's signing certificates (`SigningCertURL`).
//!
//! The providers crate does no I/O: [`Verifier::needs`](idemgate_providers::Verifier::needs)
//! names the document (its URL already checked against the source's rules), [`Documents::get`]
//! fetches it or takes the kept copy, and the verifier is handed it with
//! `Delivery::with_document`. Per source, with the source's `fetch_ca_file`:
//!
//! - a body of at most [`LIMIT`] bytes, answered 2xx within [`TIMEOUT`];
//! - at most one fetch per URL at a time: deliveries that need the same document wait for the
//!   one fetch;
//! - kept for [`JWKS_TTL`] (a JWKS: keys rotate) or [`CERTIFICATE_TTL`] (a certificate: its URL
//!   names one), at most [`MAX_URLS`] URLs; a failed fetch is not kept, and a copy past its time
//!   is still used, with a warning, while the fetch fails;
//! - a JWKS is fetched again at once when a token names a key it lacks ([`Documents::refresh`]),
//!   but at most once a minute ([`REFRESH_AFTER`]), so unknown `kid`s cannot make the gateway
//!   hammer the key server;
//! - at most [`MAX_FETCHES`] fetches at once per source, whatever the URLs: a flood of
//!   deliveries naming certificate URLs that are each fetched (and fail, so are never kept)
//!   waits for a slot, up to [`TIMEOUT`], then gets 503, instead of opening a connection each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use idemgate_providers::{DocumentKind, Needed};

use crate::forward::{self, Failure};

/// The largest document accepted.
pub(crate) const LIMIT: usize = 64 * 1024;
/// How long one fetch may take, from connecting to the body's end.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a JWKS is kept.
pub(crate) const JWKS_TTL: Duration = Duration::from_secs(3600);
/// How long a certificate is kept.
pub(crate) const CERTIFICATE_TTL: Duration = Duration::from_secs(24 * 3600);
/// The youngest copy that an unknown key may cause to be fetched again.
pub(crate) const REFRESH_AFTER: Duration = Duration::from_secs(60);
/// How many URLs are kept per source.
pub(crate) const MAX_URLS: usize = 64;
/// How many fetches one source makes at once.
pub(crate) const MAX_FETCHES: usize = 4;

#[derive(Clone)]
struct Copy {
    bytes: Bytes,
    fetched: Instant,
}

/// One URL's kept copy; its lock is held while it is fetched.
type Slot = Arc<tokio::sync::Mutex<Option<Copy>>>;

/// One source's fetched documents.
pub(crate) struct Documents {
    client: forward::Client,
    slots: Mutex<HashMap<String, Slot>>,
    fetching: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Documents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.slots.lock().map(|s| s.len()).unwrap_or(0);
        f.debug_struct("Documents").field("urls", &kept).finish()
    }
}

fn ttl(kind: DocumentKind) -> Duration {
    match kind {
        DocumentKind::Certificate => CERTIFICATE_TTL,
        _ => JWKS_TTL,
    }
}

/// Why a fetch failed, in words (`SigningCertURL https://..: answered 404`).
fn words(url: &str, failure: &Failure) -> String {
    let why = match failure {
        Failure::Status { status, .. } => format!("answered {status}"),
        Failure::Unreachable { why, .. } => why.clone(),
        Failure::Timeout(t) => format!("no answer within {}", idemgate_core::Human(*t)),
        Failure::TooLarge { limit } => format!("longer than {limit} bytes"),
    };
    let shown: String = url.chars().take(200).collect();
    format!("{shown}: {why}")
}

impl Documents {
    pub(crate) fn new(client: forward::Client) -> Self {
        Self {
            client,
            slots: Mutex::default(),
            fetching: tokio::sync::Semaphore::new(MAX_FETCHES),
        }
    }

    fn slot(&self, url: &str) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if !slots.contains_key(url) && slots.len() >= MAX_URLS {
            // Forget the copies nobody is fetching or reading.
            slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        slots.entry(url.to_owned()).or_default().clone()
    }

    /// GETs `url` once, with the source's client and limits.
    ///
    /// # Errors
    /// Why, in words, naming the URL.
    pub(crate) async fn fetch(&self, url: &str) -> Result<Bytes, String> {
        let uri: hyper::Uri = url.parse().map_err(|_| format!("{url:?} is not a URL"))?;
        let _slot = tokio::time::timeout(TIMEOUT, self.fetching.acquire())
            .await
            .ok()
            .and_then(Result::ok)
            .ok_or_else(|| {
                format!(
                    "{}: {MAX_FETCHES} fetches of this source were already under way for {}",
                    url.chars().take(200).collect::<String>(),
                    idemgate_core::Human(TIMEOUT)
                )
            })?;
        forward::get(&self.client, &uri, LIMIT, TIMEOUT)
            .await
            .map_err(|f| words(url, &f))
    }

    /// The document: the kept copy while it is fresh, else fetched (and kept).
    ///
    /// # Errors
    /// Why the fetch failed, naming the URL, when there is no copy to fall back on.
    pub(crate) async fn get(&self, needed: &Needed) -> Result<Bytes, String> {
        let slot = self.slot(&needed.url);
        let mut copy = slot.lock().await;
        if let Some(c) = copy.as_ref()
            && c.fetched.elapsed() < ttl(needed.kind)
        {
            return Ok(c.bytes.clone());
        }
        match self.fetch(&needed.url).await {
            Ok(bytes) => {
                *copy = Some(Copy {
                    bytes: bytes.clone(),
                    fetched: Instant::now(),
                });
                Ok(bytes)
            }
            Err(why) => match copy.as_ref() {
                Some(stale) => {
                    tracing::warn!(error = %why, "cannot fetch a document again; using the copy kept");
                    Ok(stale.bytes.clone())
                }
                None => Err(why),
            },
        }
    }

    /// The document fetched again, unless the kept copy is younger than [`REFRESH_AFTER`]
    /// (`None` then: the copy stands).
    ///
    /// # Errors
    /// Why the fetch failed, naming the URL.
    pub(crate) async fn refresh(&self, needed: &Needed) -> Result<Option<Bytes>, String> {
        let slot = self.slot(&needed.url);
        let mut copy = slot.lock().await;
        if copy
            .as_ref()
            .is_some_and(|c| c.fetched.elapsed() < REFRESH_AFTER)
        {
            return Ok(None);
        }
        let bytes = self.fetch(&needed.url).await?;
        *copy = Some(Copy {
            bytes: bytes.clone(),
            fetched: Instant::now(),
        });
        Ok(Some(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A flood of deliveries naming distinct certificate URLs makes at most [`MAX_FETCHES`]
    /// fetches at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fetches_are_capped_per_source_whatever_the_urls() {
        // A server that accepts and never answers, counting connections.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let opened = Arc::new(AtomicUsize::new(0));
        let counted = opened.clone();
        let server = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(conn);
            }
        });
        let docs = Arc::new(Documents::new(forward::http_client()));
        let tasks: Vec<_> = (0..3 * MAX_FETCHES)
            .map(|i| {
                let docs = docs.clone();
                tokio::spawn(
                    async move { docs.fetch(&format!("http://{addr}/cert-{i}.pem")).await },
                )
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(opened.load(Ordering::SeqCst), MAX_FETCHES);
        for t in tasks {
            t.abort();
        }
        server.abort();
    }
}
