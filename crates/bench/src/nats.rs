//! A minimal NATS client over TCP: enough of the protocol for JetStream's publish deduplication
//! (streams created and deleted, publishes with `Nats-Msg-Id` and their acknowledgements).
//!
//! The protocol is text. After the server's `INFO`, the client sends `CONNECT` (headers on,
//! verbose off, `no_responders` on, so a request nobody answers fails at once rather than at a
//! timeout) and a `PING`, and is connected at the `PONG`. It subscribes once to an inbox of its
//! own, `_INBOX.<random>.*`; every request carries a reply subject `_INBOX.<random>.<n>`, and
//! the answer (`MSG`, or `HMSG` when it has headers) is matched back to its caller by that `n`.
//! Many requests are in flight on one connection at once: one task writes (coalescing whatever
//! callers queued meanwhile into one write), one task reads and answers the server's `PING`s.
//!
//! Not covered: TLS, clusters (only the one server in the URL), NKeys and JWT credentials. A URL
//! may carry `user:password@` or `token@`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot};

/// How long a request waits for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting (TCP, `INFO`, `CONNECT` to `PONG`) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most the writer puts into one write.
const WRITE_CHUNK: usize = 64 * 1024;

/// Where a NATS server is and how to log in, from `nats://[user:password@|token@]host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`, to connect to.
    pub addr: String,
    pub auth: Auth,
}

/// The credentials a URL carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    User { user: String, pass: String },
    Token(String),
}

impl Endpoint {
    /// Parses `nats://host:port` (port 4222 when left out), with optional credentials.
    ///
    /// # Errors
    /// A URL of another scheme (`tls://` included: this client has no TLS), or with no host.
    pub fn parse(url: &str) -> anyhow::Result<Self> {
        let rest = match url.split_once("://") {
            Some(("nats", rest)) => rest,
            Some((scheme, _)) => {
                bail!("{url:?}: the NATS URL's scheme is {scheme:?}; this client speaks nats://")
            }
            None => url,
        };
        let rest = rest.trim_end_matches('/');
        let (auth, host) = match rest.rsplit_once('@') {
            Some((creds, host)) => match creds.split_once(':') {
                Some((user, pass)) => (
                    Auth::User {
                        user: user.to_owned(),
                        pass: pass.to_owned(),
                    },
                    host,
                ),
                None => (Auth::Token(creds.to_owned()), host),
            },
            None => (Auth::None, rest),
        };
        if host.is_empty() || host.contains('/') {
            bail!("{url:?} names no NATS host (nats://host:port)");
        }
        // A port is the part after the last colon, unless that colon is inside an IPv6 literal.
        let has_port = host
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.contains(']'));
        let addr = if has_port {
            host.to_owned()
        } else {
            format!("{host}:4222")
        };
        Ok(Self { addr, auth })
    }
}

/// An answer to a request: the status line's code when it had headers (`503` for "no
/// responders"), and the payload.
#[derive(Debug)]
pub struct Reply {
    pub status: Option<u16>,
    pub payload: Vec<u8>,
}

/// JetStream's acknowledgement of a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubAck {
    pub stream: String,
    pub seq: u64,
    /// The message id was already in the stream's duplicate window: nothing was stored.
    pub duplicate: bool,
}

/// One connection to a NATS server. Clones share it; requests from many tasks are pipelined.
#[derive(Debug, Clone)]
pub struct Nats {
    conn: Arc<Conn>,
}

#[derive(Debug)]
struct Conn {
    /// `host:port`, for messages (never the credentials).
    addr: String,
    /// `_INBOX.<random>.`: a request's reply subject is this and its number.
    inbox: String,
    next: AtomicU64,
    jetstream: bool,
    out: mpsc::Sender<Vec<u8>>,
    shared: Arc<Shared>,
}

/// What the reader and the callers share: who waits for which reply, and why the connection
/// ended once it has.
#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    waiting: HashMap<u64, oneshot::Sender<Reply>>,
    closed: Option<String>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves only a map behind: still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records why the connection ended (the first reason wins) and wakes every waiter.
    fn close(&self, why: String) {
        let mut st = self.lock();
        st.closed.get_or_insert(why);
        st.waiting.clear();
    }
}

impl Nats {
    /// Connects, logs in and subscribes to the connection's inbox.
    ///
    /// # Errors
    /// A bad URL, a server that cannot be reached, that wants TLS, lacks headers (before 2.2) or
    /// refuses the login, each saying so with the address.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let ep = Endpoint::parse(url)?;
        match tokio::time::timeout(CONNECT_TIMEOUT, Self::handshake(ep.clone())).await {
            Ok(connected) => connected,
            Err(_) => bail!(
                "cannot connect to NATS at {}: no answer within {CONNECT_TIMEOUT:?}",
                ep.addr
            ),
        }
    }

    async fn handshake(ep: Endpoint) -> anyhow::Result<Self> {
        let addr = ep.addr.clone();
        let stream = TcpStream::connect(&addr)
            .await
            .with_context(|| format!("cannot connect to NATS at {addr}"))?;
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let mut read = BufReader::with_capacity(WRITE_CHUNK, read);
        let mut line = Vec::new();
        read.read_until(b'\n', &mut line)
            .await
            .with_context(|| format!("cannot read from NATS at {addr}"))?;
        let text = String::from_utf8_lossy(&line);
        let Some(info) = text.trim_end().strip_prefix("INFO ") else {
            bail!("{addr} did not greet as a NATS server does (INFO ...): {text:?}");
        };
        let info: Value = serde_json::from_str(info)
            .with_context(|| format!("NATS at {addr} sent an INFO that is not JSON"))?;
        if info["tls_required"].as_bool() == Some(true) {
            bail!("NATS at {addr} requires TLS, which this client does not speak");
        }
        if info["headers"].as_bool() != Some(true) {
            bail!(
                "NATS at {addr} (version {}) does not support headers, which Nats-Msg-Id needs \
                 (nats-server 2.2 or later)",
                info["version"]
            );
        }
        let mut connect = json!({
            "verbose": false,
            "pedantic": false,
            "headers": true,
            "no_responders": true,
            "lang": "rust",
            "version": env!("CARGO_PKG_VERSION"),
            "name": "idemgate-bench",
            "protocol": 1,
        });
        match &ep.auth {
            Auth::None => {}
            Auth::User { user, pass } => {
                connect["user"] = json!(user);
                connect["pass"] = json!(pass);
            }
            Auth::Token(token) => connect["auth_token"] = json!(token),
        }
        let inbox = format!("_INBOX.{:016x}.", idemgate_core::machine::nonce());
        write
            .write_all(format!("CONNECT {connect}\r\nPING\r\nSUB {inbox}* 1\r\n").as_bytes())
            .await
            .with_context(|| format!("cannot write to NATS at {addr}"))?;
        loop {
            line.clear();
            if read.read_until(b'\n', &mut line).await? == 0 {
                bail!("NATS at {addr} closed the connection while logging in");
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end();
            if text == "PONG" {
                break;
            }
            if let Some(err) = text.strip_prefix("-ERR ") {
                bail!(
                    "NATS at {addr} refused the connection: {}",
                    err.trim_matches('\'')
                );
            }
            if text == "PING" {
                write.write_all(b"PONG\r\n").await?;
            }
        }
        let shared = Arc::new(Shared::default());
        let (out, rx) = mpsc::channel(4096);
        tokio::spawn(write_loop(write, rx, shared.clone()));
        tokio::spawn(read_loop(
            read,
            out.downgrade(),
            shared.clone(),
            inbox.clone(),
        ));
        Ok(Self {
            conn: Arc::new(Conn {
                addr,
                inbox,
                next: AtomicU64::new(0),
                jetstream: info["jetstream"].as_bool() == Some(true),
                out,
                shared,
            }),
        })
    }

    /// `host:port` of the server.
    pub fn addr(&self) -> &str {
        &self.conn.addr
    }

    /// Whether the server's `INFO` says JetStream is enabled.
    pub fn jetstream(&self) -> bool {
        self.conn.jetstream
    }

    /// Publishes `payload` to `subject` (with a `Nats-Msg-Id` header when `msg_id` is given) and
    /// waits for the answer.
    ///
    /// # Errors
    /// A subject or id that cannot go on the wire, a closed connection (saying why), or no answer
    /// within 5 s.
    pub async fn request(
        &self,
        subject: &str,
        msg_id: Option<&str>,
        payload: &[u8],
    ) -> anyhow::Result<Reply> {
        if subject.is_empty() || subject.contains(char::is_whitespace) {
            bail!("{subject:?} is no NATS subject (empty, or holding white space)");
        }
        if let Some(id) = msg_id
            && (id.is_empty() || id.contains(['\r', '\n']))
        {
            bail!("{id:?} cannot be a Nats-Msg-Id (empty, or holding a line break)");
        }
        let conn = &self.conn;
        let n = conn.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut st = conn.shared.lock();
            if let Some(why) = &st.closed {
                bail!("the connection to NATS at {} is closed: {why}", conn.addr);
            }
            st.waiting.insert(n, tx);
        }
        let reply_to = format!("{}{n}", conn.inbox);
        let frame = frame(subject, &reply_to, msg_id, payload);
        if conn.out.send(frame).await.is_err() {
            bail!("{}", self.closed_reason());
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => bail!("{}", self.closed_reason()),
            Err(_) => {
                conn.shared.lock().waiting.remove(&n);
                bail!(
                    "no answer from NATS at {} to {subject} within {REQUEST_TIMEOUT:?}",
                    conn.addr
                )
            }
        }
    }

    fn closed_reason(&self) -> String {
        let why = self.conn.shared.lock().closed.clone();
        format!(
            "the connection to NATS at {} closed: {}",
            self.conn.addr,
            why.as_deref().unwrap_or("no reason given")
        )
    }

    /// A JetStream API call (`$JS.API.<what>`): the answer's JSON.
    ///
    /// # Errors
    /// No JetStream on the server, an answer that is not JSON, or the API's error, with its
    /// description and codes.
    pub async fn api(&self, what: &str, body: &Value) -> anyhow::Result<Value> {
        let subject = format!("$JS.API.{what}");
        let payload = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let reply = self.request(&subject, None, &payload).await?;
        if reply.status == Some(503) {
            bail!(
                "nothing at NATS {} answers {subject}: is JetStream enabled (nats-server -js)?",
                self.conn.addr
            );
        }
        let answer = json_of(&reply.payload)
            .with_context(|| format!("NATS at {} answered {subject}", self.conn.addr))?;
        if let Some(err) = api_error(&answer) {
            bail!("JetStream at {} refused {subject}: {err}", self.conn.addr);
        }
        Ok(answer)
    }

    /// Creates a stream on file storage taking `subjects`, remembering message ids for `window`.
    ///
    /// # Errors
    /// The API's refusal (a name in use with other settings, a bad name), or a stream that came
    /// back with another duplicate window than asked.
    pub async fn create_stream(
        &self,
        name: &str,
        subjects: &[&str],
        window: Duration,
    ) -> anyhow::Result<()> {
        let nanos = u64::try_from(window.as_nanos()).context("the duplicate window is too long")?;
        let answer = self
            .api(
                &format!("STREAM.CREATE.{name}"),
                &json!({
                    "name": name,
                    "subjects": subjects,
                    "storage": "file",
                    "retention": "limits",
                    "num_replicas": 1,
                    "duplicate_window": nanos,
                }),
            )
            .await?;
        let got = answer["config"]["duplicate_window"].as_u64();
        if got != Some(nanos) {
            bail!(
                "JetStream created stream {name} with duplicate_window {got:?} ns, not the \
                 {nanos} ns asked"
            );
        }
        Ok(())
    }

    /// Deletes a stream and its messages.
    ///
    /// # Errors
    /// The API's refusal (a stream that does not exist among them).
    pub async fn delete_stream(&self, name: &str) -> anyhow::Result<()> {
        let answer = self
            .api(&format!("STREAM.DELETE.{name}"), &Value::Null)
            .await?;
        if answer["success"].as_bool() != Some(true) {
            bail!("JetStream did not delete stream {name}: {answer}");
        }
        Ok(())
    }

    /// Messages stored in a stream now.
    ///
    /// # Errors
    /// The API's refusal (no such stream among them).
    pub async fn stream_messages(&self, name: &str) -> anyhow::Result<u64> {
        let answer = self
            .api(&format!("STREAM.INFO.{name}"), &Value::Null)
            .await?;
        answer["state"]["messages"]
            .as_u64()
            .with_context(|| format!("JetStream's info of stream {name} has no message count"))
    }

    /// Publishes to a stream's subject with a `Nats-Msg-Id`, and waits for JetStream's
    /// acknowledgement (after the stream has taken the message, or found its id in the window).
    ///
    /// # Errors
    /// No stream taking `subject`, or JetStream's refusal.
    pub async fn publish(
        &self,
        subject: &str,
        msg_id: &str,
        payload: &[u8],
    ) -> anyhow::Result<PubAck> {
        let reply = self.request(subject, Some(msg_id), payload).await?;
        if reply.status == Some(503) {
            bail!(
                "no JetStream stream at NATS {} takes subject {subject}",
                self.conn.addr
            );
        }
        let ack = json_of(&reply.payload)
            .with_context(|| format!("the acknowledgement of a publish to {subject}"))?;
        if let Some(err) = api_error(&ack) {
            bail!("JetStream refused a publish to {subject}: {err}");
        }
        match (ack["stream"].as_str(), ack["seq"].as_u64()) {
            (Some(stream), Some(seq)) => Ok(PubAck {
                stream: stream.to_owned(),
                seq,
                duplicate: ack["duplicate"].as_bool() == Some(true),
            }),
            _ => {
                bail!("JetStream acknowledged a publish to {subject} with no stream and seq: {ack}")
            }
        }
    }
}

/// The wire form of a publish: `PUB`, or `HPUB` with a `Nats-Msg-Id` header.
fn frame(subject: &str, reply_to: &str, msg_id: Option<&str>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(subject.len() + reply_to.len() + payload.len() + 80);
    match msg_id {
        Some(id) => {
            let headers = format!("NATS/1.0\r\nNats-Msg-Id: {id}\r\n\r\n");
            let total = headers.len() + payload.len();
            out.extend_from_slice(
                format!("HPUB {subject} {reply_to} {} {total}\r\n", headers.len()).as_bytes(),
            );
            out.extend_from_slice(headers.as_bytes());
        }
        None => out.extend_from_slice(
            format!("PUB {subject} {reply_to} {}\r\n", payload.len()).as_bytes(),
        ),
    }
    out.extend_from_slice(payload);
    out.extend_from_slice(b"\r\n");
    out
}

fn json_of(payload: &[u8]) -> anyhow::Result<Value> {
    serde_json::from_slice(payload).with_context(|| {
        format!(
            "with no JSON: {:?}",
            String::from_utf8_lossy(&payload[..payload.len().min(200)])
        )
    })
}

/// A JetStream API error (`{"error":{"code":..,"err_code":..,"description":..}}`) in words.
fn api_error(answer: &Value) -> Option<String> {
    let err = answer.get("error")?;
    Some(format!(
        "{} (code {}, err_code {})",
        err["description"].as_str().unwrap_or("no description"),
        err["code"],
        err["err_code"]
    ))
}

/// Writes what callers queue, coalescing everything already queued into one write.
async fn write_loop(
    mut write: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Vec<u8>>,
    shared: Arc<Shared>,
) {
    let mut buf = Vec::with_capacity(WRITE_CHUNK);
    while let Some(first) = rx.recv().await {
        buf.clear();
        buf.extend_from_slice(&first);
        while buf.len() < WRITE_CHUNK {
            match rx.try_recv() {
                Ok(more) => buf.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if let Err(e) = write.write_all(&buf).await {
            shared.close(format!("cannot write to the server: {e}"));
            return;
        }
    }
    // Every handle dropped: the write half closes with this task, and the server hangs up.
}

/// Reads the server's messages until the connection ends, then records why.
async fn read_loop(
    mut read: BufReader<OwnedReadHalf>,
    out: mpsc::WeakSender<Vec<u8>>,
    shared: Arc<Shared>,
    inbox: String,
) {
    let why = match read_messages(&mut read, &out, &shared, &inbox).await {
        Ok(()) => "the server closed the connection".to_owned(),
        Err(e) => format!("{e:#}"),
    };
    shared.close(why);
}

async fn read_messages(
    read: &mut BufReader<OwnedReadHalf>,
    out: &mpsc::WeakSender<Vec<u8>>,
    shared: &Shared,
    inbox: &str,
) -> anyhow::Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        if read.read_until(b'\n', &mut line).await? == 0 {
            return Ok(());
        }
        let text = std::str::from_utf8(&line)
            .context("the server sent a line that is not UTF-8")?
            .trim_end();
        let (op, rest) = text.split_once(' ').unwrap_or((text, ""));
        match op {
            "MSG" | "HMSG" => {
                let msg = Header::parse(op == "HMSG", rest)
                    .with_context(|| format!("the server sent a malformed {text:?}"))?;
                let mut body = vec![0; msg.total + 2];
                read.read_exact(&mut body).await?;
                body.truncate(msg.total);
                let status = if msg.headers > 0 {
                    status_of(&body[..msg.headers])
                } else {
                    None
                };
                let payload = body.split_off(msg.headers);
                let n = msg
                    .subject
                    .strip_prefix(inbox)
                    .and_then(|n| n.parse::<u64>().ok());
                let waiter = n.and_then(|n| shared.lock().waiting.remove(&n));
                if let Some(waiter) = waiter {
                    // A caller that gave up (timed out) no longer listens: nothing to do.
                    let _ = waiter.send(Reply { status, payload });
                }
            }
            "PING" => {
                if let Some(out) = out.upgrade() {
                    let _ = out.send(b"PONG\r\n".to_vec()).await;
                }
            }
            "-ERR" => bail!("the server said {}", rest.trim_matches('\'')),
            // +OK (verbose is off, but harmless), PONG, INFO updates.
            _ => {}
        }
    }
}

/// The control line of a `MSG` (`subject sid [reply] size`) or `HMSG` (`subject sid [reply]
/// header_size total_size`).
#[derive(Debug, PartialEq, Eq)]
struct Header<'a> {
    subject: &'a str,
    headers: usize,
    total: usize,
}

impl<'a> Header<'a> {
    fn parse(with_headers: bool, args: &'a str) -> Option<Self> {
        let args: Vec<&str> = args.split_ascii_whitespace().collect();
        let sizes = if with_headers { 2 } else { 1 };
        if args.len() != 2 + sizes && args.len() != 3 + sizes {
            return None;
        }
        let sizes: Vec<usize> = args[args.len() - sizes..]
            .iter()
            .map(|s| s.parse().ok())
            .collect::<Option<_>>()?;
        let (headers, total) = match sizes[..] {
            [total] => (0, total),
            [headers, total] if headers <= total => (headers, total),
            _ => return None,
        };
        Some(Self {
            subject: args[0],
            headers,
            total,
        })
    }
}

/// The status code of a header block's first line (`NATS/1.0 503 No Responders`), if it has one.
fn status_of(headers: &[u8]) -> Option<u16> {
    let first = headers.split(|&b| b == b'\r').next()?;
    let first = std::str::from_utf8(first).ok()?;
    first.strip_prefix("NATS/1.0 ")?.get(..3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHAT_TO_START: &str = "start nats-server -js on 127.0.0.1:4222 or set \
                                 IDEMGATE_TEST_NATS to a NATS URL";

    fn nats_url() -> String {
        std::env::var("IDEMGATE_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
    }

    async fn connected() -> Option<Nats> {
        idemgate_core::testkit::require_service(Nats::connect(&nats_url()).await, WHAT_TO_START)
    }

    /// A stream name and subject no other test or run uses.
    fn unique() -> (String, String) {
        let tag = format!(
            "{}_{:016x}",
            std::process::id(),
            idemgate_core::machine::nonce()
        );
        (
            format!("idemgate_test_{tag}"),
            format!("idemgate-test.{tag}.events"),
        )
    }

    #[test]
    fn urls_give_an_address_and_credentials() {
        let ep = |url| Endpoint::parse(url).unwrap();
        assert_eq!(ep("nats://127.0.0.1:4222").addr, "127.0.0.1:4222");
        assert_eq!(ep("nats://localhost").addr, "localhost:4222");
        assert_eq!(ep("example.com:5222/").addr, "example.com:5222");
        assert_eq!(ep("nats://[::1]").addr, "[::1]:4222");
        assert_eq!(ep("nats://[::1]:4223").addr, "[::1]:4223");
        assert_eq!(
            ep("nats://u:p@h:1").auth,
            Auth::User {
                user: "u".into(),
                pass: "p".into()
            }
        );
        assert_eq!(ep("nats://s3cret@h").auth, Auth::Token("s3cret".into()));
        let err = Endpoint::parse("tls://h:4222").unwrap_err().to_string();
        assert!(err.contains("\"tls\""), "{err}");
        let err = Endpoint::parse("nats://").unwrap_err().to_string();
        assert!(err.contains("names no NATS host"), "{err}");
    }

    #[test]
    fn publishes_are_framed_with_exact_sizes() {
        let framed = frame("s.a", "_INBOX.x.1", Some("evt_1"), b"hi");
        let headers = "NATS/1.0\r\nNats-Msg-Id: evt_1\r\n\r\n";
        assert_eq!(
            String::from_utf8(framed).unwrap(),
            format!(
                "HPUB s.a _INBOX.x.1 {} {}\r\n{headers}hi\r\n",
                headers.len(),
                headers.len() + 2
            )
        );
        assert_eq!(frame("s", "r", None, b""), b"PUB s r 0\r\n\r\n");
    }

    #[test]
    fn message_lines_parse_with_and_without_reply_or_headers() {
        let h = |hdr, args| Header::parse(hdr, args);
        let at = |subject, headers, total| {
            Some(Header {
                subject,
                headers,
                total,
            })
        };
        assert_eq!(h(false, "_INBOX.a.7 1 42"), at("_INBOX.a.7", 0, 42));
        assert_eq!(h(false, "s 1 r 5"), at("s", 0, 5));
        assert_eq!(h(true, "_INBOX.a.7 1 16 16"), at("_INBOX.a.7", 16, 16));
        assert_eq!(h(true, "s 1 r 16 20"), at("s", 16, 20));
        assert_eq!(
            h(true, "s 1 20 16"),
            None,
            "headers longer than the message"
        );
        assert_eq!(h(false, "s 1 x"), None);
        assert_eq!(h(false, "s"), None);
        assert_eq!(status_of(b"NATS/1.0 503\r\n\r\n"), Some(503));
        assert_eq!(
            status_of(b"NATS/1.0 408 Request Timeout\r\n\r\n"),
            Some(408)
        );
        assert_eq!(status_of(b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n"), None);
    }

    #[tokio::test]
    async fn a_refused_connection_names_the_address() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let err = Nats::connect(&format!("nats://127.0.0.1:{port}"))
            .await
            .expect_err("nothing listens there");
        let said = format!("{err:#}");
        assert!(
            said.contains(&format!("NATS at 127.0.0.1:{port}")) && said.contains("refused"),
            "{said}"
        );
    }

    #[tokio::test]
    async fn a_repeated_message_id_is_a_duplicate_within_the_window() {
        let Some(nats) = connected().await else {
            return;
        };
        assert!(
            nats.jetstream(),
            "NATS at {} runs without JetStream",
            nats.addr()
        );
        let (stream, subject) = unique();
        nats.create_stream(&stream, &[&subject], Duration::from_secs(60))
            .await
            .unwrap();
        let outcome = async {
            let first = nats.publish(&subject, "bench/evt_1", b"{}").await?;
            let again = nats.publish(&subject, "bench/evt_1", b"{}").await?;
            let other = nats.publish(&subject, "bench/evt_2", b"{}").await?;
            let stored = nats.stream_messages(&stream).await?;
            anyhow::Ok((first, again, other, stored))
        }
        .await;
        nats.delete_stream(&stream).await.unwrap();
        let (first, again, other, stored) = outcome.unwrap();
        assert_eq!(
            first,
            PubAck {
                stream: stream.clone(),
                seq: 1,
                duplicate: false
            }
        );
        assert!(again.duplicate, "{again:?}");
        assert_eq!(again.seq, 1, "a duplicate names the message it repeats");
        assert_eq!((other.seq, other.duplicate), (2, false));
        assert_eq!(stored, 2, "the duplicate was not stored");
        // Deleted: the API says so, in words.
        let err = nats.stream_messages(&stream).await.unwrap_err();
        assert!(format!("{err:#}").contains("stream not found"), "{err:#}");
    }

    #[tokio::test]
    async fn many_requests_in_flight_on_one_connection_each_get_their_own_answer() {
        let Some(nats) = connected().await else {
            return;
        };
        let (stream, subject) = unique();
        nats.create_stream(&stream, &[&subject], Duration::from_secs(60))
            .await
            .unwrap();
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let (nats, subject) = (nats.clone(), subject.clone());
                tokio::spawn(async move {
                    // Ids 0..100, each published twice.
                    nats.publish(&subject, &format!("id-{}", i % 100), b"")
                        .await
                })
            })
            .collect();
        let mut acks = Vec::new();
        for t in tasks {
            acks.push(t.await.unwrap());
        }
        let stored = nats.stream_messages(&stream).await;
        nats.delete_stream(&stream).await.unwrap();
        let acks: Vec<PubAck> = acks.into_iter().collect::<anyhow::Result<_>>().unwrap();
        assert_eq!(acks.iter().filter(|a| !a.duplicate).count(), 100);
        let mut seqs: Vec<u64> = acks
            .iter()
            .filter(|a| !a.duplicate)
            .map(|a| a.seq)
            .collect();
        seqs.sort_unstable();
        assert_eq!(
            seqs,
            (1..=100).collect::<Vec<_>>(),
            "each new id stored once"
        );
        assert_eq!(stored.unwrap(), 100);
    }

    #[tokio::test]
    async fn api_errors_and_missing_streams_are_said_in_words() {
        let Some(nats) = connected().await else {
            return;
        };
        let (stream, subject) = unique();
        nats.create_stream(&stream, &[&subject], Duration::from_secs(60))
            .await
            .unwrap();
        // The same name with other subjects: refused by the API, with its description.
        let clash = nats
            .create_stream(&stream, &["idemgate-test.other"], Duration::from_secs(60))
            .await;
        nats.delete_stream(&stream).await.unwrap();
        let err = format!("{:#}", clash.unwrap_err());
        assert!(
            err.contains("refused $JS.API.STREAM.CREATE.") && err.contains("already in use"),
            "{err}"
        );
        // Nothing takes the subject any more: no responders, at once.
        let err = nats.publish(&subject, "x", b"").await.unwrap_err();
        assert!(err.to_string().contains("no JetStream stream"), "{err:#}");
        let err = nats.delete_stream(&stream).await.unwrap_err();
        assert!(format!("{err:#}").contains("stream not found"), "{err:#}");
        let err = nats.request("a b", None, b"").await.unwrap_err();
        assert!(err.to_string().contains("is no NATS subject"), "{err}");
    }
}
