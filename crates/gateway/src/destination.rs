//! Where a source's events go: a destination URL, parsed once at load ([`Target`], in
//! `target.rs`) and opened once at start ([`Destination`]).
//!
//! - `http://` and `https://`: an HTTP POST ([`crate::forward::forward`]), 2xx is delivered.
//! - `nats://HOST:PORT/SUBJECT` (`tls://` for TLS): a JetStream publish to the stream that
//!   captures SUBJECT, waiting for its acknowledgement. `Nats-Msg-Id` is `{source}:{event_id}`,
//!   so the stream drops a second publish of the event within its duplicate window; an
//!   acknowledgement that says `duplicate` is delivered too (the stream has the event).
//! - `amqp://USER:PASS@HOST:PORT/VHOST?exchange=E&routing_key=K` (`amqps://` for TLS): a
//!   persistent, mandatory RabbitMQ publish on a channel in confirm mode, waiting for the broker's
//!   confirm. `message_id` is `{source}:{event_id}`; a message no queue takes (returned by the
//!   broker) or a negative confirm is a failure, never a delivery.
//!
//! Every message carries the body as received, its content type and encoding, and the headers
//! `Idemgate-Source`, `Idemgate-Event-Id`, `Idemgate-Attempt` and `Idempotency-Key` (the value
//! an HTTP forward gets). A broker's connection is opened on first use, shared by every send of
//! the destination, and opened again after it breaks (the first failure of a broken connection
//! is a failed attempt: a 503 to the sender in forward mode, a retry in inbox mode; never a lost
//! event). Credentials in a URL are never logged: a destination is named by [`Target`]'s
//! `Display`, which leaves them out.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use idemgate_core::Key;
use idemgate_tls::ClientTls;
use tokio::sync::Mutex;

use crate::forward::{self, Delivery, Failure};
pub use crate::target::{AmqpTarget, NatsTarget, Target};
use crate::window::{Audit, Finding};

/// How long opening a broker connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// After a failed connection attempt, the next waits at least this long (then up to
/// [`RECONNECT_MAX`], doubling), so a broker that is down is not hammered by every send.
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(5);

/// What a delivery did at its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sent {
    /// The downstream answered this 2xx.
    Http(u16),
    /// The broker acknowledged (`duplicate`: JetStream already had the event within its window,
    /// and stored nothing new).
    Published { duplicate: bool },
}

impl Sent {
    /// The HTTP status, for an HTTP destination.
    pub(crate) fn status(self) -> Option<u16> {
        match self {
            Self::Http(status) => Some(status),
            Self::Published { .. } => None,
        }
    }
}

/// An opened destination: what [`Target`] names, with what sends to it.
#[derive(Debug)]
pub(crate) struct Destination {
    pub(crate) target: Target,
    link: Link,
    /// The latest window audit; `None` for HTTP, and before the first.
    audit: std::sync::Mutex<Option<Audit>>,
}

#[derive(Debug)]
enum Link {
    Http(forward::Client),
    Nats(Broker<async_nats::jetstream::Context>),
    Amqp(Broker<AmqpLink>),
}

/// A RabbitMQ connection and its one channel, in confirm mode.
#[derive(Clone)]
struct AmqpLink {
    connection: Arc<lapin::Connection>,
    channel: lapin::Channel,
}

/// A broker connection, opened on first use and again after it breaks, with a pause after a
/// failed attempt.
struct Broker<C> {
    tls: Option<ClientTls>,
    open: Mutex<Opened<C>>,
}

struct Opened<C> {
    current: Option<C>,
    /// The earliest time the next attempt to connect may start, and the pause after the next
    /// failure.
    next_try: Option<Instant>,
    pause: Duration,
    /// Why the last attempt failed.
    last_error: Option<String>,
}

impl<C> fmt::Debug for Broker<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Broker")
    }
}

impl<C: Clone> Broker<C> {
    fn new(tls: Option<ClientTls>) -> Self {
        Self {
            tls,
            open: Mutex::new(Opened {
                current: None,
                next_try: None,
                pause: RECONNECT_MIN,
                last_error: None,
            }),
        }
    }

    /// The open connection, or a new one from `connect`; a failure waits out the pause before
    /// the next attempt (and says why the last one failed meanwhile).
    async fn get<F, Fut>(&self, connect: F) -> Result<C, String>
    where
        F: FnOnce(Option<ClientTls>) -> Fut,
        Fut: std::future::Future<Output = Result<C, String>>,
    {
        let mut open = self.open.lock().await;
        if let Some(c) = &open.current {
            return Ok(c.clone());
        }
        if let Some(at) = open.next_try
            && Instant::now() < at
        {
            return Err(open
                .last_error
                .clone()
                .unwrap_or_else(|| "not connected".to_owned()));
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, connect(self.tls.clone())).await {
            Ok(Ok(c)) => {
                open.current = Some(c.clone());
                open.next_try = None;
                open.pause = RECONNECT_MIN;
                open.last_error = None;
                Ok(c)
            }
            outcome => {
                let why = match outcome {
                    Ok(Err(why)) => why,
                    _ => format!(
                        "no connection within {}",
                        idemgate_core::Human(CONNECT_TIMEOUT)
                    ),
                };
                open.next_try = Some(Instant::now() + open.pause);
                open.pause = (open.pause * 2).min(RECONNECT_MAX);
                open.last_error = Some(why.clone());
                Err(why)
            }
        }
    }

    /// Drops the connection after a failure that broke it: the next send opens another.
    async fn broken(&self) -> Option<C> {
        self.open.lock().await.current.take()
    }
}

impl Broker<AmqpLink> {
    /// Closes the connection after a failure that broke it (or left it stuck): the next send
    /// opens another.
    async fn close(&self) {
        if let Some(link) = self.broken().await {
            let _ = link
                .connection
                .close(0, "idemgate opens another".into())
                .await;
        }
    }
}

impl Destination {
    /// Opens `target` (nothing connects yet: a broker is connected on first use). `http` is the
    /// HTTP client an `http(s)://` target sends with.
    pub(crate) fn new(target: Target, tls: Option<ClientTls>, http: forward::Client) -> Self {
        let link = match &target {
            Target::Http(_) => Link::Http(http),
            Target::Nats(_) => Link::Nats(Broker::new(tls)),
            Target::Amqp(_) => Link::Amqp(Broker::new(tls)),
        };
        Self {
            target,
            link,
            audit: std::sync::Mutex::new(None),
        }
    }

    /// Delivers `body` as `delivery` says, waiting at most `timeout` for the destination's
    /// answer (an HTTP 2xx, a broker's acknowledgement).
    ///
    /// # Errors
    /// A [`Failure`] saying why, in words (never with credentials).
    pub(crate) async fn send(
        &self,
        body: Bytes,
        delivery: Delivery<'_>,
        timeout: Duration,
    ) -> Result<Sent, Failure> {
        if let Some(audit) = self.audit().filter(Audit::holds) {
            return Err(self.failure(format!("held by on_short_window = \"refuse\": {audit}")));
        }
        match (&self.link, &self.target) {
            (Link::Http(client), Target::Http(url)) => {
                forward::forward(client, url, body, delivery, timeout)
                    .await
                    .map(Sent::Http)
            }
            (Link::Nats(broker), Target::Nats(nats)) => {
                match tokio::time::timeout(
                    timeout,
                    self.publish_nats(broker, nats, body, &delivery),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => Err(Failure::Timeout(timeout)),
                }
            }
            (Link::Amqp(broker), Target::Amqp(amqp)) => {
                match tokio::time::timeout(
                    timeout,
                    self.publish_amqp(broker, amqp, body, &delivery),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => {
                        // A confirm that never came may mean a stuck channel: open another.
                        broker.close().await;
                        Err(Failure::Timeout(timeout))
                    }
                }
            }
            _ => unreachable!("a destination's link is made for its target"),
        }
    }

    fn failure(&self, why: String) -> Failure {
        Failure::Unreachable {
            downstream: self.target.to_string(),
            why,
        }
    }

    async fn publish_nats(
        &self,
        broker: &Broker<async_nats::jetstream::Context>,
        target: &NatsTarget,
        body: Bytes,
        delivery: &Delivery<'_>,
    ) -> Result<Sent, Failure> {
        let context = broker
            .get(|tls| connect_nats(target.clone(), tls))
            .await
            .map_err(|why| self.failure(why))?;
        let mut headers = async_nats::HeaderMap::new();
        for (name, value) in message_headers(delivery) {
            headers.insert(name, value.as_str());
        }
        let message = async_nats::jetstream::message::PublishMessage::build()
            .payload(body)
            .headers(headers)
            .message_id(forward::idempotency_key(delivery.key));
        let ack = match context.send_publish(target.subject.clone(), message).await {
            Ok(ack) => ack.await,
            Err(e) => Err(e),
        };
        match ack {
            Ok(ack) => Ok(Sent::Published {
                duplicate: ack.duplicate,
            }),
            Err(e) => {
                use async_nats::jetstream::context::PublishErrorKind as Kind;
                let why = match e.kind() {
                    Kind::StreamNotFound => format!(
                        "no JetStream stream captures the subject {:?}: create one (nats stream add --subjects {})",
                        target.subject, target.subject
                    ),
                    Kind::TimedOut => {
                        "JetStream did not acknowledge the publish in time".to_owned()
                    }
                    _ => crate::error::ErrorChain(&e).to_string(),
                };
                Err(self.failure(why))
            }
        }
    }

    async fn publish_amqp(
        &self,
        broker: &Broker<AmqpLink>,
        target: &AmqpTarget,
        body: Bytes,
        delivery: &Delivery<'_>,
    ) -> Result<Sent, Failure> {
        use lapin::options::BasicPublishOptions;
        use lapin::types::{AMQPValue, FieldTable, LongString};
        let mut link = broker
            .get(|tls| connect_amqp(target.clone(), tls))
            .await
            .map_err(|why| self.failure(why))?;
        if !(link.connection.status().connected() && link.channel.status().connected()) {
            // The broker closed it (a restart, a channel error): open another now.
            broker.close().await;
            link = broker
                .get(|tls| connect_amqp(target.clone(), tls))
                .await
                .map_err(|why| self.failure(why))?;
        }
        let channel = &link.channel;
        let mut headers = FieldTable::default();
        let mut content_type = None;
        let mut content_encoding = None;
        for (name, value) in message_headers(delivery) {
            match name {
                "Content-Type" => content_type = Some(value),
                "Content-Encoding" => content_encoding = Some(value),
                _ => {
                    headers.insert(
                        name.into(),
                        AMQPValue::LongString(LongString::from(value.as_str())),
                    );
                }
            }
        }
        let mut properties = lapin::BasicProperties::default()
            .with_message_id(forward::idempotency_key(delivery.key).into())
            // Persistent: a durable queue keeps it across a broker restart.
            .with_delivery_mode(2)
            .with_headers(headers);
        if let Some(ct) = content_type {
            properties = properties.with_content_type(ct.into());
        }
        if let Some(ce) = content_encoding {
            properties = properties.with_content_encoding(ce.into());
        }
        let published = channel
            .basic_publish(
                target.exchange.as_str().into(),
                target.routing_key.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &body,
                properties,
            )
            .await;
        let confirm = match published {
            Ok(confirm) => confirm.await,
            Err(e) => Err(e),
        };
        match confirm {
            Ok(lapin::Confirmation::Ack(None)) => Ok(Sent::Published { duplicate: false }),
            Ok(lapin::Confirmation::Ack(Some(returned))) => Err(self.failure(format!(
                "the broker routed the message to no queue ({} {}): bind a queue to exchange {:?} with routing key {:?}",
                returned.reply_code, returned.reply_text, target.exchange, target.routing_key
            ))),
            Ok(lapin::Confirmation::Nack(_)) => Err(self.failure(
                "the broker refused the message (a negative confirm: it could not store it)"
                    .to_owned(),
            )),
            Ok(lapin::Confirmation::NotRequested) => {
                // Cannot happen: the channel is opened in confirm mode.
                broker.close().await;
                Err(self.failure("the channel did not confirm the publish".to_owned()))
            }
            Err(e) => {
                broker.close().await;
                Err(self.failure(amqp_error(&e, target)))
            }
        }
    }

    /// What the broker says of its own dedup, read now: JetStream's stream that captures the
    /// subject and its `duplicate_window`; for RabbitMQ, that it keeps none (once the connection,
    /// the credentials and the exchange, or the default exchange's queue, are found good).
    pub(crate) async fn read_dedup(&self) -> Finding {
        match (&self.link, &self.target) {
            (Link::Nats(broker), Target::Nats(target)) => {
                let context = match broker.get(|tls| connect_nats(target.clone(), tls)).await {
                    Ok(c) => c,
                    Err(why) => return Finding::Unreachable(why),
                };
                read_window(&context, target).await
            }
            (Link::Amqp(broker), Target::Amqp(target)) => {
                let link = match broker.get(|tls| connect_amqp(target.clone(), tls)).await {
                    Ok(l) => l,
                    Err(why) if why.contains("refused the credentials") => {
                        return Finding::Misconfigured(why);
                    }
                    Err(why) => return Finding::Unreachable(why),
                };
                match check_route(&link, target).await {
                    Ok(()) => Finding::NoBrokerDedup,
                    Err(finding) => finding,
                }
            }
            _ => Finding::NoBrokerDedup,
        }
    }

    /// The latest audit of this destination (`None` before the first).
    pub(crate) fn audit(&self) -> Option<Audit> {
        self.audit.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Keeps `audit` as the latest: a held destination (`on_short_window = "refuse"` and a window
    /// not known to cover) refuses every send until an audit says otherwise.
    pub(crate) fn record(&self, audit: Audit) {
        *self.audit.lock().unwrap_or_else(|p| p.into_inner()) = Some(audit);
    }

    /// Closes a broker connection (an audit's, or at shutdown).
    pub(crate) async fn close(&self) {
        match &self.link {
            Link::Amqp(broker) => broker.close().await,
            Link::Nats(broker) => {
                if let Some(context) = broker.broken().await {
                    let _ = context.client().drain().await;
                }
            }
            Link::Http(_) => {}
        }
    }
}

/// JetStream: the stream that captures `target`'s subject, and its duplicate window.
async fn read_window(context: &async_nats::jetstream::Context, target: &NatsTarget) -> Finding {
    use async_nats::jetstream::context::GetStreamByNameErrorKind as Kind;
    let stream = match context.stream_by_subject(target.subject.clone()).await {
        Ok(stream) => stream,
        Err(e) if matches!(e.kind(), Kind::NotFound) => {
            return Finding::Misconfigured(format!(
                "no JetStream stream captures the subject {:?}: create one that does (nats stream add --subjects {} --dupe-window ...), or name a subject one captures",
                target.subject, target.subject
            ));
        }
        Err(e) if matches!(e.kind(), Kind::JetStream(_)) => {
            return Finding::Misconfigured(format!(
                "JetStream at {} cannot say which stream captures {:?}: {}",
                target.server,
                target.subject,
                crate::error::ErrorChain(&e)
            ));
        }
        Err(e) => {
            return Finding::Unreachable(format!(
                "JetStream at {} did not answer: {}",
                target.server,
                crate::error::ErrorChain(&e)
            ));
        }
    };
    let info = match context.get_stream(&stream).await {
        Ok(mut s) => s.info().await.map(|i| i.config.duplicate_window),
        Err(e) => {
            return Finding::Unreachable(format!(
                "cannot read stream {stream:?}: {}",
                crate::error::ErrorChain(&e)
            ));
        }
    };
    match info {
        Ok(window) => Finding::Window { stream, window },
        Err(e) => Finding::Unreachable(format!(
            "cannot read stream {stream:?}'s configuration: {}",
            crate::error::ErrorChain(&e)
        )),
    }
}

/// RabbitMQ: the exchange exists (the default exchange: the queue the routing key names exists),
/// checked passively on a channel of its own (a failed passive declare closes its channel).
async fn check_route(link: &AmqpLink, target: &AmqpTarget) -> Result<(), Finding> {
    use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;
    let channel = link
        .connection
        .create_channel()
        .await
        .map_err(|e| Finding::Unreachable(amqp_error(&e, target)))?;
    let checked = if target.exchange.is_empty() {
        channel
            .queue_declare(
                target.routing_key.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map(drop)
            .map_err(|e| {
                Finding::Misconfigured(format!(
                    "RabbitMQ at {} has no queue {:?} in vhost {:?}, which the default exchange (exchange= empty) would route routing_key {:?} to: declare it, or name an exchange ({})",
                    target.server,
                    target.routing_key,
                    target.vhost,
                    target.routing_key,
                    crate::error::ErrorChain(&e)
                ))
            })
    } else {
        channel
            .exchange_declare(
                target.exchange.as_str().into(),
                lapin::ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    passive: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| {
                Finding::Misconfigured(format!(
                    "RabbitMQ at {} has no exchange {:?} in vhost {:?}: declare it (and bind a queue with routing key {:?}), or name another ({})",
                    target.server,
                    target.exchange,
                    target.vhost,
                    target.routing_key,
                    e
                ))
            })
    };
    if channel.status().connected() {
        let _ = channel.close(200, "checked".into()).await;
    }
    checked
}

/// The headers every message carries besides the body, in the broker's terms.
fn message_headers(delivery: &Delivery<'_>) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("Idemgate-Source", delivery.key.source.as_str().to_owned()),
        ("Idemgate-Event-Id", ascii(delivery.key)),
        ("Idemgate-Attempt", delivery.attempt.to_string()),
        ("Idempotency-Key", forward::idempotency_key(delivery.key)),
    ];
    if let Some(ct) = delivery
        .body_headers
        .content_type
        .as_ref()
        .and_then(|v| v.to_str().ok())
    {
        out.push(("Content-Type", ct.to_owned()));
    }
    if let Some(ce) = delivery
        .body_headers
        .content_encoding
        .as_ref()
        .and_then(|v| v.to_str().ok())
    {
        out.push(("Content-Encoding", ce.to_owned()));
    }
    out
}

/// The event id as a header value: percent-encoded as [`forward::idempotency_key`] encodes it.
fn ascii(key: &Key) -> String {
    let full = forward::idempotency_key(key);
    // `{source}:` is ASCII already; what follows is the id, encoded.
    full[key.source.as_str().len() + 1..].to_owned()
}

async fn connect_nats(
    target: NatsTarget,
    tls: Option<ClientTls>,
) -> Result<async_nats::jetstream::Context, String> {
    let mut options = async_nats::ConnectOptions::new()
        .name("idemgate")
        .connection_timeout(CONNECT_TIMEOUT)
        // Once connected, the client reconnects by itself, with its own backoff; a publish
        // meanwhile fails (a failed attempt), and is tried again by the sender or the inbox.
        .max_reconnects(None);
    if let Some((user, password)) = &target.user {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if target.tls {
        let config = tls
            .unwrap_or_default()
            .config()
            .map_err(|e| e.to_string())?;
        options = options.require_tls(true).tls_client_config(config);
    }
    let client = options.connect(target.server.as_str()).await.map_err(|e| {
        format!(
            "cannot connect to NATS at {}: {}",
            target.server,
            crate::error::ErrorChain(&e)
        )
    })?;
    Ok(async_nats::jetstream::new(client))
}

async fn connect_amqp(target: AmqpTarget, tls: Option<ClientTls>) -> Result<AmqpLink, String> {
    use lapin::options::ConfirmSelectOptions;
    let config = match (&tls, target.tls) {
        (Some(tls), true) => amqp_tls(tls)?,
        _ => lapin::tcp::OwnedTLSConfig::default(),
    };
    let runtime = lapin::runtime::default_runtime().map_err(|e| e.to_string())?;
    let connection = lapin::Connection::connect_with_config(
        &target.uri(),
        lapin::ConnectionProperties::default().with_connection_name("idemgate".into()),
        config,
        runtime,
    )
    .await
    .map_err(|e| amqp_error(&e, &target))?;
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| amqp_error(&e, &target))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| amqp_error(&e, &target))?;
    Ok(AmqpLink {
        connection: Arc::new(connection),
        channel,
    })
}

/// The TLS settings of an `amqps://` destination, as lapin takes them: the CA file's
/// certificates, and the client certificate and key.
fn amqp_tls(tls: &ClientTls) -> Result<lapin::tcp::OwnedTLSConfig, String> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let cert_chain = match &tls.ca_file {
        Some(path) => Some(
            String::from_utf8(read(path)?)
                .map_err(|_| format!("{} is not PEM text", path.display()))?,
        ),
        None => None,
    };
    let identity = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => Some(lapin::tcp::OwnedIdentity::PKCS8 {
            pem: read(cert)?,
            key: read(key)?,
        }),
        _ => None,
    };
    Ok(lapin::tcp::OwnedTLSConfig {
        identity,
        cert_chain,
    })
}

/// A lapin error in words, naming the destination without credentials (lapin's own words
/// carry the broker's reply, once: its error's source repeats it).
fn amqp_error(e: &lapin::Error, target: &AmqpTarget) -> String {
    let said = e.to_string();
    if said.contains("ACCESS_REFUSED") || said.contains("ACCESS-REFUSED") {
        format!(
            "RabbitMQ at {} refused the credentials of the destination URL (vhost {:?}): {said}",
            target.server, target.vhost
        )
    } else if said.contains("NOT_ALLOWED") || said.contains("NOT-ALLOWED") {
        format!(
            "RabbitMQ at {} does not let the destination URL's user into vhost {:?} (no such vhost, or no permission): {said}",
            target.server, target.vhost
        )
    } else if said.contains("NOT_FOUND") || said.contains("NOT-FOUND") {
        format!(
            "RabbitMQ at {} has no exchange {:?} in vhost {:?}: declare it, or name another ({said})",
            target.server, target.exchange, target.vhost
        )
    } else {
        format!("RabbitMQ at {}: {said}", target.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_urls_parse_and_never_show_their_credentials() {
        let t = Target::parse("nats://app:s3cret@127.0.0.1:4222/events.stripe").unwrap();
        assert_eq!(t.to_string(), "nats://127.0.0.1:4222/events.stripe");
        assert!(t.is_broker() && !t.tls());
        let Target::Nats(n) = &t else { panic!() };
        assert_eq!(n.user, Some(("app".into(), "s3cret".into())));
        assert_eq!(
            Target::parse("tls://nats.example:7422/a.b")
                .unwrap()
                .scheme(),
            "tls://"
        );
        let t = Target::parse(
            "amqp://idem:p%40ss@rabbit:5673/prod?exchange=events&routing_key=stripe.live",
        )
        .unwrap();
        assert_eq!(
            t.to_string(),
            "amqp://rabbit:5673/prod?exchange=events&routing_key=stripe.live"
        );
        let Target::Amqp(a) = &t else { panic!() };
        assert_eq!((a.user.as_str(), a.password.as_str()), ("idem", "p@ss"));
        assert_eq!(a.uri(), "amqp://idem:p%40ss@rabbit:5673/prod");
        let t = Target::parse("amqps://rabbit/?exchange=&routing_key=q").unwrap();
        let Target::Amqp(a) = &t else { panic!() };
        assert_eq!((a.server.as_str(), a.vhost.as_str()), ("rabbit:5671", "/"));
        assert!(t.tls());
        assert_eq!(
            Target::parse("https://u:p@h.example/x")
                .unwrap()
                .to_string(),
            "https://h.example/x"
        );
    }

    #[test]
    fn bad_destinations_are_refused_saying_why_without_credentials() {
        for (url, says) in [
            ("ftp://u:pw@h/x", "no scheme idemgate delivers to"),
            ("nats://u:pw@h:4222", "names no subject"),
            ("nats://u:pw@h:4222/events.*", "wildcard"),
            ("nats://h:4222/events.>", "wildcard"),
            ("nats://h:4222/a..b", "not a NATS subject"),
            ("nats://h:port/a", "not a number"),
            ("nats://h/a?x=1", "no query"),
            ("amqp://u:pw@h/v?routing_key=k", "names no exchange"),
            ("amqp://u:pw@h/v?exchange=e", "names no routing_key"),
            (
                "amqp://u:pw@h/v?exchange=e&routing_key=k&queue=q",
                "not a parameter",
            ),
            ("http://", "with a host"),
        ] {
            let why = Target::parse(url).unwrap_err();
            assert!(why.contains(says), "{url}: {why}");
            assert!(!why.contains("pw"), "{url}: {why}");
        }
    }
}
