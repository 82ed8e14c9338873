//! The JetStream the bench measures, through async-nats (the client the gateway publishes with):
//! streams on file storage created and deleted, publishes with `Nats-Msg-Id` and their
//! acknowledgements, and the messages a stream holds, counted per id.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, bail};
use async_nats::jetstream;

/// A connection to a NATS server with JetStream. Cheap to clone (clones share the connection,
/// on which every caller's publishes are in flight together).
#[derive(Clone)]
pub struct Nats {
    addr: String,
    js: jetstream::Context,
}

/// JetStream's acknowledgement of a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubAck {
    pub stream: String,
    pub seq: u64,
    /// The id was in the stream's window already: nothing was stored.
    pub duplicate: bool,
}

impl Nats {
    /// Connects to `url` (`nats://[user:password@]host[:port]`).
    ///
    /// # Errors
    /// The server does not answer, naming it.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let addr = url.trim_start_matches("nats://").to_owned();
        let client = async_nats::ConnectOptions::new()
            .name("idemgate-bench")
            .connection_timeout(Duration::from_secs(5))
            .connect(url)
            .await
            .with_context(|| format!("cannot connect to NATS at {addr}"))?;
        Ok(Self {
            addr,
            js: jetstream::new(client),
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
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
        let stream = self
            .js
            .create_stream(jetstream::stream::Config {
                name: name.to_owned(),
                subjects: subjects.iter().map(|&s| s.to_owned()).collect(),
                storage: jetstream::stream::StorageType::File,
                duplicate_window: window,
                ..Default::default()
            })
            .await
            .with_context(|| {
                format!(
                    "JetStream at {} refused to create stream {name} (a server without JetStream refuses every stream: start it with nats-server -js)",
                    self.addr
                )
            })?;
        let got = stream.cached_info().config.duplicate_window;
        if got != window {
            bail!(
                "JetStream created stream {name} with duplicate_window {got:?}, not the {window:?} asked"
            );
        }
        Ok(())
    }

    /// Deletes a stream and its messages.
    ///
    /// # Errors
    /// The API's refusal (a stream that does not exist among them).
    pub async fn delete_stream(&self, name: &str) -> anyhow::Result<()> {
        self.js
            .delete_stream(name)
            .await
            .with_context(|| format!("JetStream did not delete stream {name}"))?;
        Ok(())
    }

    /// Messages stored in a stream now.
    ///
    /// # Errors
    /// The API's refusal (no such stream among them).
    pub async fn stream_messages(&self, name: &str) -> anyhow::Result<u64> {
        let mut stream = self
            .js
            .get_stream(name)
            .await
            .with_context(|| format!("JetStream has no stream {name}"))?;
        Ok(stream.info().await?.state.messages)
    }

    /// How many messages of a stream carry each value of the header `header`, read with an
    /// ordered consumer from the first message to the last stored now.
    ///
    /// # Errors
    /// No such stream, or a read that stops.
    pub async fn count_by_header(
        &self,
        name: &str,
        header: &str,
    ) -> anyhow::Result<HashMap<String, u32>> {
        use futures_util::StreamExt;
        let stream = self
            .js
            .get_stream(name)
            .await
            .with_context(|| format!("JetStream has no stream {name}"))?;
        let total = self.stream_messages(name).await?;
        let mut counts = HashMap::new();
        if total == 0 {
            return Ok(counts);
        }
        let consumer = stream
            .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
            .await
            .with_context(|| format!("cannot read stream {name}"))?;
        let mut messages = consumer.messages().await?;
        let mut read = 0;
        while read < total {
            let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
                .await
                .with_context(|| format!("stream {name} stopped after {read} of {total} messages"))?
                .with_context(|| {
                    format!("stream {name} ended after {read} of {total} messages")
                })??;
            let id = message
                .headers
                .as_ref()
                .and_then(|h| h.get(header))
                .map(|v| v.as_str().to_owned())
                .unwrap_or_default();
            *counts.entry(id).or_default() += 1;
            read += 1;
        }
        Ok(counts)
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
        let ack = self
            .js
            .send_publish(
                subject.to_owned(),
                jetstream::message::PublishMessage::build()
                    .payload(payload.to_vec().into())
                    .message_id(msg_id),
            )
            .await
            .with_context(|| format!("cannot publish to {subject}"))?
            .await
            .with_context(|| format!("JetStream did not take a publish to {subject}"))?;
        Ok(PubAck {
            stream: ack.stream,
            seq: ack.sequence,
            duplicate: ack.duplicate,
        })
    }
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

    #[tokio::test]
    async fn a_refused_connection_names_the_address() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let err = Nats::connect(&format!("nats://127.0.0.1:{port}"))
            .await
            .err()
            .expect("nothing listens there");
        let said = format!("{err:#}");
        assert!(
            said.contains(&format!("NATS at 127.0.0.1:{port}")),
            "{said}"
        );
    }

    #[tokio::test]
    async fn a_repeated_message_id_is_a_duplicate_within_the_window_and_counted_once() {
        let Some(nats) = connected().await else {
            return;
        };
        let (stream, subject) = unique();
        nats.create_stream(&stream, &[&subject], Duration::from_secs(60))
            .await
            .unwrap();
        let outcome = async {
            let first = nats.publish(&subject, "bench/evt_1", b"{}").await?;
            let again = nats.publish(&subject, "bench/evt_1", b"{}").await?;
            let other = nats.publish(&subject, "bench/evt_2", b"{}").await?;
            let stored = nats.stream_messages(&stream).await?;
            let counted = nats.count_by_header(&stream, "Nats-Msg-Id").await?;
            anyhow::Ok((first, again, other, stored, counted))
        }
        .await;
        nats.delete_stream(&stream).await.unwrap();
        let (first, again, other, stored, counted) = outcome.unwrap();
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
        assert_eq!(
            counted,
            HashMap::from([("bench/evt_1".to_owned(), 1), ("bench/evt_2".to_owned(), 1)])
        );
        let err = nats.stream_messages(&stream).await.unwrap_err();
        assert!(format!("{err:#}").contains("no stream"), "{err:#}");
    }

    #[tokio::test]
    async fn a_subject_no_stream_takes_is_refused() {
        let Some(nats) = connected().await else {
            return;
        };
        let (_, subject) = unique();
        let err = nats.publish(&subject, "x", b"").await.unwrap_err();
        assert!(
            format!("{err:#}").contains("did not take a publish"),
            "{err:#}"
        );
    }
}
