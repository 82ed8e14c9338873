//! What a broker scenario reads back once its gateways are stopped: every message its JetStream
//! stream or RabbitMQ queue holds, each turned into a processing (event, `Idemgate-Attempt`,
//! process) and checked for what the gateway promises of a message: the body as sent, the event
//! id as `Nats-Msg-Id` / `message_id` and `Idempotency-Key`, `Idemgate-Source`,
//! `Idemgate-Event-Id`, the content type and, in RabbitMQ, persistence.
//!
//! Each gateway process publishes to a subject (JetStream) or routing key (RabbitMQ) of its own,
//! `chaos.{tag}.g{gateway}.r{incarnation}`, as the HTTP downstream's path names it: a message is
//! tied to the process that published it.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::downstream::{Processing, Stored, Via};
use crate::gateway::SOURCE;

/// One message as the broker keeps it.
#[derive(Debug, Clone)]
pub struct Message {
    /// The subject (JetStream) or routing key (RabbitMQ) it was published to.
    pub key: String,
    /// `Nats-Msg-Id` (JetStream) or the `message_id` property (RabbitMQ).
    pub id: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    pub content_type: Option<String>,
    /// Its position in the stream or the queue, from 1.
    pub position: u64,
    /// When the broker stored it (run microseconds), if the broker keeps that.
    pub at: Option<u64>,
    /// RabbitMQ: whether it is persistent (`delivery_mode` 2); `None` for JetStream.
    pub persistent: Option<bool>,
}

/// The subject or routing key prefix of scenario run `tag`.
pub fn prefix(tag: &str) -> String {
    format!("chaos.{tag}")
}

/// `{prefix}.g{gateway}.r{incarnation}`.
pub fn via_of(key: &str, prefix: &str) -> Option<Via> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(".g")?;
    let (g, r) = rest.split_once(".r")?;
    Some(Via {
        gateway: g.parse().ok()?,
        incarnation: r.parse().ok()?,
    })
}

/// The processings the messages stand for, and what is wrong with any of them (a message that
/// names no event of this run is not a processing; one that does, but lacks something the
/// gateway promises, is one, and is reported).
pub fn processings(
    messages: &[Message],
    tag: &str,
    body: impl Fn(u32) -> Bytes,
) -> (Vec<Processing>, Vec<String>) {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let prefix = prefix(tag);
    let key_prefix = format!("{SOURCE}:evt_{tag}_");
    for m in messages {
        let header = |name: &str| m.headers.get(name).map(String::as_str);
        let idempotency = header("Idempotency-Key").unwrap_or_default();
        let event = idempotency
            .strip_prefix(&key_prefix)
            .and_then(|n| n.parse::<u32>().ok());
        let attempt = header("Idemgate-Attempt").and_then(|a| a.parse::<u32>().ok());
        let via = via_of(&m.key, &prefix);
        let (Some(event), Some(attempt), Some(via)) = (event, attempt, via) else {
            problems.push(format!(
                "message #{} names no event and process of this run (published to {:?}, Idempotency-Key {idempotency:?}, Idemgate-Attempt {:?})",
                m.position,
                m.key,
                header("Idemgate-Attempt")
            ));
            continue;
        };
        let event_id = format!("evt_{tag}_{event}");
        let mut wrong = Vec::new();
        if m.id.as_deref() != Some(idempotency) {
            wrong.push(format!(
                "its message id is {:?}, not its Idempotency-Key",
                m.id
            ));
        }
        if header("Idemgate-Source") != Some(SOURCE) {
            wrong.push(format!(
                "Idemgate-Source is {:?}",
                header("Idemgate-Source")
            ));
        }
        if header("Idemgate-Event-Id") != Some(event_id.as_str()) {
            wrong.push(format!(
                "Idemgate-Event-Id is {:?}",
                header("Idemgate-Event-Id")
            ));
        }
        if attempt == 0 {
            wrong.push("Idemgate-Attempt is 0".to_owned());
        }
        if m.content_type.as_deref() != Some("application/json") {
            wrong.push(format!("its content type is {:?}", m.content_type));
        }
        if m.body != body(event).as_ref() {
            wrong.push(format!(
                "its body is not the one sent ({} bytes)",
                m.body.len()
            ));
        }
        if m.persistent == Some(false) {
            wrong.push("it is not persistent (delivery_mode 2)".to_owned());
        }
        if !wrong.is_empty() {
            problems.push(format!(
                "message #{} (event {event}, attempt {attempt}, from {via}): {}",
                m.position,
                wrong.join("; ")
            ));
        }
        let at = m.at.unwrap_or(0);
        out.push(Processing {
            event,
            attempt,
            via,
            received: at,
            answered: at,
            status: 200,
            stored: Some(Stored {
                position: m.position,
                timed: m.at.is_some(),
            }),
        });
    }
    (out, problems)
}

/// `kill -SIGNAL pid`: a broker frozen (`STOP`) and thawed (`CONT`) by a scenario.
pub async fn signal(pid: u32, signal: &str) {
    let _ = tokio::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(position: u64, event: u32, attempt: u32, key: &str) -> Message {
        let id = format!("chaos:evt_t1_{event}");
        let headers = [
            ("Idempotency-Key", id.clone()),
            ("Idemgate-Source", "chaos".to_owned()),
            ("Idemgate-Event-Id", format!("evt_t1_{event}")),
            ("Idemgate-Attempt", attempt.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Message {
            key: key.to_owned(),
            id: Some(id),
            headers,
            body: format!("body {event}").into_bytes(),
            content_type: Some("application/json".to_owned()),
            position,
            at: None,
            persistent: Some(true),
        }
    }

    fn body(event: u32) -> Bytes {
        Bytes::from(format!("body {event}"))
    }

    #[test]
    fn keys_name_the_publishing_process() {
        assert_eq!(
            via_of("chaos.t1.g2.r13", "chaos.t1"),
            Some(Via {
                gateway: 2,
                incarnation: 13
            })
        );
        assert_eq!(via_of("chaos.t2.g2.r13", "chaos.t1"), None);
        assert_eq!(via_of("chaos.t1.g2", "chaos.t1"), None);
        assert_eq!(via_of("chaos.t1.gx.r1", "chaos.t1"), None);
    }

    #[test]
    fn messages_become_processings_in_queue_order() {
        let (p, problems) = processings(
            &[
                message(1, 4, 1, "chaos.t1.g1.r1"),
                message(2, 4, 2, "chaos.t1.g1.r2"),
            ],
            "t1",
            body,
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].event, p[0].attempt, p[0].via.incarnation), (4, 1, 1));
        assert_eq!((p[1].attempt, p[1].via.incarnation), (2, 2));
        assert_eq!(
            p[1].stored,
            Some(Stored {
                position: 2,
                timed: false
            })
        );
        assert_eq!(p[1].received, 0);
    }

    #[test]
    fn what_a_message_lacks_is_said() {
        let mut m = message(7, 3, 1, "chaos.t1.g1.r1");
        m.id = Some("other".to_owned());
        m.body = b"x".to_vec();
        m.persistent = Some(false);
        m.at = Some(1_234);
        let (p, problems) = processings(&[m], "t1", body);
        assert_eq!(p.len(), 1, "still a processing");
        assert_eq!(p[0].received, 1_234);
        assert_eq!(problems.len(), 1);
        for says in ["#7", "message id", "body", "persistent"] {
            assert!(problems[0].contains(says), "{says}: {}", problems[0]);
        }
        let (p, problems) = processings(&[message(1, 3, 1, "elsewhere")], "t1", body);
        assert!(p.is_empty());
        assert!(problems[0].contains("names no event"), "{}", problems[0]);
    }
}
