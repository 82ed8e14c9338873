//! Keyed requests through the gateway's `Idempotency-Key` sidecar (an `[[api]]`), beside the
//! webhook load: an upstream that creates one payment per request it is sent and counts the
//! creations of each key, and clients that send each key until they hold an answer, then send
//! the same request once more and expect that answer back, replayed byte for byte.
//!
//! What must hold whatever the fault: the upstream creates each key once (a keyed request is
//! never sent upstream without a claim, and a response the client was given is never followed by
//! a second creation), each client ends holding the upstream's first answer for its key, and its
//! second send is answered with that answer again, marked as a replay.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::net::TcpListener;

use crate::clock::Clock;
use crate::http::Client;
use crate::run::Run;
use crate::verdict::Verdict;

/// Clients sending keys through the sidecar at once, each one key after another.
const CLIENTS: usize = 8;
/// How long a key's client may go on sending it, from the start of the clients.
const KEY_DEADLINE: Duration = Duration::from_secs(120);

/// A scenario's sidecar: the upstream, and the `[[api]]` address on the gateway.
#[derive(Debug)]
pub struct Sidecar {
    pub upstream: Upstream,
    api: SocketAddr,
}

impl Sidecar {
    /// Starts the upstream and adds the `[[api]]` in front of it to gateway `index`'s config
    /// (before the gateway starts).
    ///
    /// # Errors
    /// When no port is free or the gateway is unknown.
    pub async fn add(run: &mut Run<'_>, index: u8) -> anyhow::Result<Self> {
        let upstream = Upstream::start().await?;
        let api: SocketAddr = format!("127.0.0.1:{}", crate::gateway::free_port()?).parse()?;
        run.gateway(index)?
            .extra_toml
            .push_str(&api_toml(api, upstream.addr));
        Ok(Self { upstream, api })
    }

    /// Starts the clients (once the gateway is up).
    pub fn clients(&self, run: &Run<'_>) -> Clients {
        Clients::start(
            run.ctx.client.clone(),
            run.clock(),
            self.api,
            &format!("key-{}", run.tag),
            CLIENTS,
            run.clock().after(KEY_DEADLINE),
        )
    }

    /// Waits a second past the fault, stops the clients and waits for each key's end.
    pub async fn finish(&self, run: &mut Run<'_>, clients: Clients) -> Vec<(String, KeyEnd)> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ends = clients.finish().await;
        run.note(format!(
            "{} keys sent through the sidecar; every key's client ended",
            ends.len()
        ));
        ends
    }

    /// Adds the keyed load's notes and failures to `v`, and a failure when no send was answered
    /// `hit` (`"503"`): the fault did not reach the sidecar.
    pub fn judge(&self, v: &mut Verdict, ends: &[(String, KeyEnd)], hit: &str) {
        let judged = judge(ends, &self.upstream.created());
        v.notes.extend(judged.notes);
        v.failures.extend(judged.failures);
        if answered(ends, hit) == 0 {
            v.failures.push(format!(
                "no keyed request was answered {hit} during the fault: it did not hit the sidecar"
            ));
        }
    }
}

/// The keyed route.
pub const ROUTE: &str = "/v1/payments";
/// How long the upstream takes per creation, unless a scenario slows it: long enough that the
/// sidecar's claim is held while the store's writes start failing.
pub const CREATE: Duration = Duration::from_millis(20);
/// How long a client waits for an answer before it hangs up and sends again.
pub const CLIENT_WAIT: Duration = Duration::from_secs(3);
/// A client's pause after a 409 or a 5xx, doubled up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_millis(400);
/// A worker's pause between one key and the next, so the keyed load spans the scenario.
const BETWEEN_KEYS: Duration = Duration::from_millis(20);

/// The `[[api]]` table that puts the sidecar on `listen` in front of `upstream`.
pub fn api_toml(listen: SocketAddr, upstream: SocketAddr) -> String {
    format!(
        "[[api]]\nname = \"payments\"\nlisten = \"{listen}\"\nupstream = \"http://{upstream}\"\n\
         routes = [\"POST {ROUTE}\"]\nretry_window = \"10m\"\n"
    )
}

/// The upstream: `POST /v1/payments` creates a payment (after [`CREATE`]) and answers 201 with
/// a body naming the key and the creation's number, so a second creation answers differently.
#[derive(Debug)]
pub struct Upstream {
    pub addr: SocketAddr,
    created: Arc<Mutex<HashMap<String, Vec<String>>>>,
    /// How long a creation takes, in ms.
    create_ms: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Listens on a free loopback port.
    ///
    /// # Errors
    /// When no port can be bound.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let created: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
        let create_ms = Arc::new(AtomicU64::new(CREATE.as_millis() as u64));
        let (shared, took) = (created.clone(), create_ms.clone());
        let task = tokio::spawn(crate::http::serve(listener, move |req| {
            let took = Duration::from_millis(took.load(Ordering::SeqCst));
            create(shared.clone(), took, req)
        }));
        Ok(Self {
            addr,
            created,
            create_ms,
            task,
        })
    }

    /// Makes each creation from now on take `took`.
    pub fn set_create_time(&self, took: Duration) {
        self.create_ms
            .store(took.as_millis() as u64, Ordering::SeqCst);
    }

    /// The bodies the upstream answered each key with, in order: one per creation.
    pub fn created(&self) -> HashMap<String, Vec<String>> {
        lock(&self.created).clone()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn create(
    created: Arc<Mutex<HashMap<String, Vec<String>>>>,
    took: Duration,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (status, body) = match key {
        Some(key) if req.uri().path() == ROUTE => {
            // The creation counts once the request arrived, as a real API's would: the
            // handler runs on even if the sidecar hangs up.
            let body = {
                let mut created = lock(&created);
                let bodies = created.entry(key.clone()).or_default();
                let body = format!(
                    r#"{{"id":"pay_{key}_{}","object":"payment","amount":4200}}"#,
                    bodies.len() + 1
                );
                bodies.push(body.clone());
                body
            };
            tokio::time::sleep(took).await;
            (201, body)
        }
        _ => (404, String::new()),
    };
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

/// How one key's client ended.
#[derive(Debug, Clone, Default)]
pub struct KeyEnd {
    /// The body of the first 2xx it was answered, if any.
    pub answer: Option<String>,
    /// Whether that first 2xx was itself a replay (a send whose answer the client never saw
    /// reached the upstream, and a later send was given back that answer).
    pub first_replayed: bool,
    /// The second send's final answer: the body and whether it was marked a replay.
    pub again: Option<(String, bool)>,
    /// Sends, and how they were answered (`"201"`, `"409"`, `"503"`, `"no answer"`).
    pub sends: Vec<String>,
}

/// The clients of one run: `concurrency` workers, each sending one new key after another
/// (`{tag}-{n}`) until told to stop.
#[derive(Debug)]
pub struct Clients {
    ends: Arc<Mutex<Vec<(String, KeyEnd)>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Clients {
    /// Starts the workers; each key is sent to the sidecar at `api` until answered, or until
    /// `deadline` (run microseconds) at the latest.
    pub fn start(
        client: Client,
        clock: Clock,
        api: SocketAddr,
        tag: &str,
        concurrency: usize,
        deadline: u64,
    ) -> Self {
        let ends: Arc<Mutex<Vec<(String, KeyEnd)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU32::new(0));
        let workers: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, ends, stop, next) =
                    (client.clone(), ends.clone(), stop.clone(), next.clone());
                let tag = tag.to_owned();
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("{tag}-{}", next.fetch_add(1, Ordering::SeqCst));
                        let end = one_key(&client, clock, api, &key, deadline).await;
                        lock(&ends).push((key, end));
                        tokio::time::sleep(BETWEEN_KEYS).await;
                    }
                })
            })
            .collect();
        let task = tokio::spawn(async move {
            for w in workers {
                let _ = w.await;
            }
        });
        Self { ends, stop, task }
    }

    /// Stops starting new keys, waits for the keys under way to end, and gives every key's end.
    pub async fn finish(self) -> Vec<(String, KeyEnd)> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let mut ends = lock(&self.ends).clone();
        ends.sort_by(|a, b| a.0.cmp(&b.0));
        ends
    }
}

/// Sends `key` until a 2xx (or `deadline`), then once more until a 2xx.
async fn one_key(
    client: &Client,
    clock: Clock,
    api: SocketAddr,
    key: &str,
    deadline: u64,
) -> KeyEnd {
    let mut end = KeyEnd::default();
    let Some((body, replayed)) =
        send_until_answered(client, clock, api, key, deadline, &mut end).await
    else {
        return end;
    };
    end.answer = Some(body);
    end.first_replayed = replayed;
    end.again = send_until_answered(client, clock, api, key, deadline, &mut end).await;
    end
}

async fn send_until_answered(
    client: &Client,
    clock: Clock,
    api: SocketAddr,
    key: &str,
    deadline: u64,
    end: &mut KeyEnd,
) -> Option<(String, bool)> {
    let mut pause = FIRST_PAUSE;
    while clock.now() < deadline {
        match send(client, api, key).await {
            Ok((status, body, replayed)) => {
                end.sends.push(status.to_string());
                if (200..300).contains(&status) {
                    return Some((body, replayed));
                }
            }
            Err(_) => end.sends.push("no answer".to_owned()),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
    None
}

/// One send: status, body and whether it was marked a replay.
async fn send(client: &Client, api: SocketAddr, key: &str) -> Result<(u16, String, bool), String> {
    let req = Request::post(format!("http://{api}{ROUTE}"))
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"amount":4200,"currency":"eur","customer":"cus_chaos"}"#,
        )))
        .map_err(|e| e.to_string())?;
    let (status, headers, body) = crate::http::exchange(client, req, CLIENT_WAIT).await?;
    let replayed = headers
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes() == b"true");
    Ok((status, body, replayed))
}

/// How many sends of all keys were answered `what` (`"503"`, `"no answer"`).
pub fn answered(ends: &[(String, KeyEnd)], what: &str) -> usize {
    ends.iter()
        .map(|(_, e)| e.sends.iter().filter(|s| *s == what).count())
        .sum()
}

/// What the keyed load shows: notes, and failures of what must hold.
#[derive(Debug, Default)]
pub struct Judged {
    pub notes: Vec<String>,
    pub failures: Vec<String>,
}

/// Judges the clients' ends against what the upstream created.
pub fn judge(ends: &[(String, KeyEnd)], created: &HashMap<String, Vec<String>>) -> Judged {
    let mut j = Judged::default();
    let mut answers: HashMap<String, u64> = HashMap::new();
    for (_, end) in ends {
        for s in &end.sends {
            *answers.entry(s.clone()).or_default() += 1;
        }
    }
    let mut answers: Vec<(String, u64)> = answers.into_iter().collect();
    answers.sort();
    let replayed_first = ends.iter().filter(|(_, e)| e.first_replayed).count();
    j.notes.push(format!(
        "keyed requests through the sidecar: {} keys, {} sends ({}); {replayed_first} keys' first 2xx was already a replay",
        ends.len(),
        answers.iter().map(|(_, n)| n).sum::<u64>(),
        answers
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let twice: Vec<&String> = created
        .iter()
        .filter(|(_, b)| b.len() > 1)
        .map(|(k, _)| k)
        .collect();
    if !twice.is_empty() {
        j.failures.push(format!(
            "the upstream created {} keys more than once (e.g. {}: {:?})",
            twice.len(),
            twice[0],
            created[twice[0]]
        ));
    }
    let mut unanswered = Vec::new();
    let mut wrong = Vec::new();
    let mut not_replayed = Vec::new();
    for (key, end) in ends {
        let first = created.get(key).and_then(|b| b.first());
        match (&end.answer, first) {
            (None, _) => unanswered.push(key),
            (Some(a), Some(f)) if a == f => {}
            (Some(_), _) => wrong.push(key),
        }
        match (&end.again, &end.answer) {
            (Some((again, true)), Some(a)) if again == a => {}
            (_, Some(_)) => not_replayed.push(key),
            (_, None) => {}
        }
    }
    if !unanswered.is_empty() {
        j.failures.push(format!(
            "{} keys were never answered 2xx before the deadline (e.g. {}: {:?})",
            unanswered.len(),
            unanswered[0],
            ends.iter()
                .find(|(k, _)| k == unanswered[0])
                .map(|(_, e)| &e.sends)
        ));
    }
    if !wrong.is_empty() {
        j.failures.push(format!(
            "{} keys' clients hold an answer other than the upstream's first (e.g. {})",
            wrong.len(),
            wrong[0]
        ));
    }
    if !not_replayed.is_empty() {
        j.failures.push(format!(
            "{} keys sent again were not answered with their first answer, replayed (e.g. {})",
            not_replayed.len(),
            not_replayed[0]
        ));
    }
    j
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(answer: &str, again: (&str, bool)) -> KeyEnd {
        KeyEnd {
            answer: Some(answer.to_owned()),
            first_replayed: false,
            again: Some((again.0.to_owned(), again.1)),
            sends: vec!["201".into(), "200".into()],
        }
    }

    #[test]
    fn a_key_created_twice_or_answered_otherwise_fails() {
        let created: HashMap<String, Vec<String>> =
            [("k-0".to_owned(), vec!["a".to_owned()])].into();
        let good = judge(&[("k-0".into(), end("a", ("a", true)))], &created);
        assert!(good.failures.is_empty(), "{:?}", good.failures);
        let doubled: HashMap<String, Vec<String>> =
            [("k-1".to_owned(), vec!["b".to_owned(), "b2".to_owned()])].into();
        let twice = judge(&[("k-1".into(), end("b", ("b", true)))], &doubled);
        assert_eq!(twice.failures.len(), 1, "{:?}", twice.failures);
        let not_first = judge(&[("k-0".into(), end("x", ("x", true)))], &created);
        assert_eq!(not_first.failures.len(), 1, "{:?}", not_first.failures);
        let not_marked = judge(&[("k-0".into(), end("a", ("a", false)))], &created);
        assert_eq!(not_marked.failures.len(), 1, "{:?}", not_marked.failures);
        let unanswered = judge(&[("k-2".into(), KeyEnd::default())], &created);
        assert_eq!(unanswered.failures.len(), 1, "{:?}", unanswered.failures);
    }
}
