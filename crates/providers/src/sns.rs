//! Amazon SNS HTTP(S) subscriptions: the body is a JSON message whose `Signature` is an RSA
//! signature (`SignatureVersion` 1: SHA1withRSA, 2: SHA256withRSA) over a canonical
//! `Key\nValue\n` list of some of its fields, with the key of the X.509 certificate at
//! `SigningCertURL`.
//!
//! The certificate is fetched by the caller, and only from an `https` URL on a host matching one
//! of the source's patterns (by default `sns.*.amazonaws.com` and `sns.*.amazonaws.com.cn`, `*`
//! standing for one DNS label): [`Verifier::needs`](crate::Verifier::needs) checks the URL and
//! names it, the caller passes the PEM in with
//! [`Delivery::with_document`](crate::Delivery::with_document). As AWS's own validators do, the
//! certificate is trusted for being served over HTTPS by an AWS host; its chain is not walked.
//!
//! The event id is `MessageId`. A `SubscriptionConfirmation` or `UnsubscribeConfirmation` is a
//! [`Control`] message for the receiver, not an event: its `SubscribeURL` passes
//! the same host check before it is handed out.
//!
//! **The timestamp.** `Timestamp` is signed, but it is the time SNS accepted the message, not the
//! time of the attempt: every retry re-sends the same signed bytes, for up to an hour (SNS's
//! longest HTTP delivery policy). A message is therefore stale only when it is older than
//! [`RETRY_PERIOD`] plus the tolerance; in the future, the tolerance alone applies. A captured
//! message can so be replayed for about an hour, but only as itself: its `MessageId` is claimed,
//! so a replay is a duplicate.

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::asym::{RsaHash, RsaSigner, rsa_verifies};
use crate::der::{self, SpkiKey};
use crate::error::{ConfigError, SignError, VerifyError};
use crate::util::{base64_decode, base64_encode, check_fresh};
use crate::{Control, EventId};

/// The host patterns trusted when none is configured.
pub const DEFAULT_CERT_HOSTS: [&str; 2] = ["sns.*.amazonaws.com", "sns.*.amazonaws.com.cn"];
/// How long SNS may re-send one signed message: the longest delivery policy's hour.
pub const RETRY_PERIOD: Duration = Duration::from_secs(3600);
/// Where the event id is in the body.
pub const EVENT_ID_POINTER: &str = "/MessageId";

/// The settings of the `sns` scheme.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Sns {
    /// Host patterns (`sns.*.amazonaws.com`; `*` is one DNS label; `host:port` to allow a port)
    /// that `SigningCertURL` and `SubscribeURL` must match; empty means [`DEFAULT_CERT_HOSTS`].
    pub cert_hosts: Vec<String>,
    /// The topics (`TopicArn`) whose messages are accepted: any other verified message is
    /// refused ([`VerifyError::UntrustedTopic`]). Empty accepts every topic: any AWS account
    /// can make SNS sign a message to any endpoint, so leave it empty only on purpose.
    pub topic_arns: Vec<String>,
}

impl TryFrom<&crate::Keys> for Sns {
    type Error = crate::SettingError;

    /// `cert_hosts` and `topic_arns`, required (each an ARN) unless `allow_any_topic = true`.
    fn try_from(keys: &crate::Keys) -> Result<Self, crate::SettingError> {
        use crate::SettingError;
        let topics = keys.topic_arns.clone().unwrap_or_default();
        if topics.is_empty() && keys.allow_any_topic != Some(true) {
            return Err(SettingError {
                key: "topic_arns",
                why: "required for provider \"sns\": the topics (TopicArn) whose messages are accepted, since any AWS account can make SNS sign a message to this endpoint. Set allow_any_topic = true to accept every topic (warned at start)".to_owned(),
            });
        }
        if let Some(bad) = topics.iter().find(|t| !t.starts_with("arn:")) {
            return Err(SettingError {
                key: "topic_arns",
                why: format!("{bad:?} is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)"),
            });
        }
        Ok(Self {
            cert_hosts: keys.cert_hosts.clone().unwrap_or_default(),
            topic_arns: topics,
        })
    }
}

/// `sns`, validated.
#[derive(Debug)]
pub(crate) struct Compiled {
    hosts: Vec<Pattern>,
    topics: Vec<String>,
}

#[derive(Debug)]
struct Pattern {
    labels: Vec<String>,
    port: Option<u16>,
    text: String,
}

impl Pattern {
    fn parse(text: &str) -> Result<Self, &'static str> {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (
                host,
                Some(
                    port.parse::<u16>()
                        .map_err(|_| "the port after : is not a number")?,
                ),
            ),
            None => (text, None),
        };
        let labels: Vec<String> = host.split('.').map(str::to_ascii_lowercase).collect();
        let label_ok = |l: &String| {
            l == "*" || (!l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        };
        if !labels.iter().all(label_ok) {
            return Err("expected a host name of letters, digits and -, with * for a whole label");
        }
        let literal = labels.iter().filter(|l| *l != "*").count();
        if literal < labels.len() && literal < 2 {
            return Err("a pattern with * must name at least two labels besides it");
        }
        Ok(Self {
            labels,
            port,
            text: text.to_owned(),
        })
    }

    fn matches(&self, host: &str, port: Option<u16>) -> bool {
        let host = host.to_ascii_lowercase();
        let labels: Vec<&str> = host.split('.').collect();
        let port_ok = match (self.port, port) {
            (None, None | Some(443)) => true,
            (Some(want), Some(got)) => want == got,
            (Some(443), None) => true,
            _ => false,
        };
        port_ok
            && labels.len() == self.labels.len()
            && labels.iter().zip(&self.labels).all(|(got, want)| {
                if want == "*" {
                    !got.is_empty() && got.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                } else {
                    got == want
                }
            })
    }
}

/// The fields signed for each message type, in the order they are signed.
fn signed_fields(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "Notification" => Some(&[
            "Message",
            "MessageId",
            "Subject",
            "Timestamp",
            "TopicArn",
            "Type",
        ]),
        "SubscriptionConfirmation" | "UnsubscribeConfirmation" => Some(&[
            "Message",
            "MessageId",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ]),
        _ => None,
    }
}

fn bad(why: &'static str) -> VerifyError {
    VerifyError::MalformedBody { why }
}

fn message(body: &[u8]) -> Result<Map<String, Value>, VerifyError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(bad("an SNS message is a JSON object")),
        Err(_) => Err(bad("an SNS message is JSON")),
    }
}

fn text<'a>(m: &'a Map<String, Value>, field: &'static str) -> Result<&'a str, VerifyError> {
    m.get(field)
        .and_then(Value::as_str)
        .ok_or(VerifyError::MalformedBody {
            why: match field {
                "Type" => "no Type",
                "SigningCertURL" => "no SigningCertURL",
                "Signature" => "no Signature",
                "SignatureVersion" => "no SignatureVersion",
                "Timestamp" => "no Timestamp",
                "SubscribeURL" => "no SubscribeURL",
                _ => "a signed field is missing or not a string",
            },
        })
}

/// The string SNS signs for `message`: `Key\nValue\n` for each signed field it holds, in order
/// (`Subject` only when present).
///
/// # Errors
/// [`VerifyError::MalformedBody`] for an unknown `Type` or a signed field that is missing.
pub fn string_to_sign(message: &Map<String, Value>) -> Result<String, VerifyError> {
    let kind = text(message, "Type")?;
    let fields = signed_fields(kind).ok_or(bad(
        "Type is not Notification, SubscriptionConfirmation or UnsubscribeConfirmation",
    ))?;
    let mut out = String::new();
    for &field in fields {
        let value = match message.get(field) {
            None | Some(Value::Null) if field == "Subject" => continue,
            _ => text(message, field)?,
        };
        out.push_str(field);
        out.push('\n');
        out.push_str(value);
        out.push('\n');
    }
    Ok(out)
}

impl Compiled {
    pub(crate) fn new(config: &Sns) -> Result<Self, ConfigError> {
        let patterns: Vec<&str> = if config.cert_hosts.is_empty() {
            DEFAULT_CERT_HOSTS.to_vec()
        } else {
            config.cert_hosts.iter().map(String::as_str).collect()
        };
        let hosts = patterns
            .into_iter()
            .map(|p| {
                Pattern::parse(p).map_err(|why| ConfigError::Setting {
                    scheme: "sns",
                    field: "cert_hosts",
                    why,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            hosts,
            topics: config.topic_arns.clone(),
        })
    }

    /// `url`, if it is `https` on an allowed host.
    ///
    /// # Errors
    /// [`VerifyError::UntrustedUrl`] naming `field`.
    pub(crate) fn trusted(&self, field: &'static str, url: &str) -> Result<String, VerifyError> {
        let untrusted = |why: String| VerifyError::UntrustedUrl { field, why };
        let shown: String = url.chars().take(200).collect();
        let uri: http::Uri = url
            .parse()
            .map_err(|_| untrusted(format!("{shown:?} is not a URL")))?;
        if uri.scheme_str() != Some("https") {
            return Err(untrusted(format!("{shown:?} is not https")));
        }
        let host = uri
            .host()
            .ok_or_else(|| untrusted(format!("{shown:?} has no host")))?;
        let port = uri.port_u16();
        if self.hosts.iter().any(|p| p.matches(host, port)) {
            Ok(url.to_owned())
        } else {
            let allowed: Vec<&str> = self.hosts.iter().map(|p| p.text.as_str()).collect();
            Err(untrusted(format!(
                "{shown:?}: the host is not one of {}",
                allowed.join(", ")
            )))
        }
    }

    /// The signing certificate's URL, checked: trusted, and a `.pem` file (as AWS's validators
    /// require).
    pub(crate) fn certificate_url(&self, body: &[u8]) -> Result<String, VerifyError> {
        let m = message(body)?;
        self.certificate_url_of(&m)
    }

    fn certificate_url_of(&self, m: &Map<String, Value>) -> Result<String, VerifyError> {
        let url = self.trusted("SigningCertURL", text(m, "SigningCertURL")?)?;
        let path = url
            .parse::<http::Uri>()
            .map(|u| u.path().to_owned())
            .unwrap_or_default();
        if path.ends_with(".pem") {
            Ok(url)
        } else {
            Err(VerifyError::UntrustedUrl {
                field: "SigningCertURL",
                why: "the path is not a .pem file".to_owned(),
            })
        }
    }

    /// Checks the message's signature with the certificate at its `SigningCertURL`, and its
    /// timestamp.
    pub(crate) fn check(
        &self,
        body: &[u8],
        document: Option<(&str, &[u8])>,
        now: SystemTime,
        tolerance: Duration,
    ) -> Result<Checked, VerifyError> {
        let m = message(body)?;
        let url = self.certificate_url_of(&m)?;
        let Some((_, pem)) = document.filter(|(at, _)| *at == url) else {
            return Err(VerifyError::NeedsDocument { url });
        };
        let bad_document = |why| VerifyError::BadDocument {
            url: url.clone(),
            why,
        };
        let pem = std::str::from_utf8(pem).map_err(|_| bad_document("not PEM text"))?;
        let cert = der::pem(pem, "CERTIFICATE").ok_or(bad_document("no PEM certificate"))?;
        let spki = der::certificate_spki(&cert).ok_or(bad_document("not an X.509 certificate"))?;
        let SpkiKey::Rsa(key) = der::spki_key(&spki).map_err(bad_document)? else {
            return Err(bad_document("the certificate's key is not RSA"));
        };
        let hash = match text(&m, "SignatureVersion")? {
            "1" => RsaHash::Sha1,
            "2" => RsaHash::Sha256,
            _ => return Err(bad("SignatureVersion is not 1 or 2")),
        };
        let signature =
            base64_decode(text(&m, "Signature")?).ok_or(bad("Signature is not base64"))?;
        let signed = string_to_sign(&m)?;
        if !rsa_verifies(key, hash, &[signed.as_bytes()], &signature) {
            return Err(VerifyError::BadSignature);
        }
        let at = humantime::parse_rfc3339(text(&m, "Timestamp")?)
            .map_err(|_| bad("Timestamp is not an RFC 3339 UTC time"))?;
        // Retries re-send the same signature for up to RETRY_PERIOD: see the module's docs.
        match now.duration_since(at) {
            Ok(age) if age > RETRY_PERIOD => {
                check_fresh(at + RETRY_PERIOD, now, tolerance)?;
            }
            _ => check_fresh(at, now, tolerance)?,
        }
        // Signed by AWS, but for any account's topic: only the source's own topics count.
        let topic = text(&m, "TopicArn")?;
        if !self.topics.is_empty() && !self.topics.iter().any(|t| t == topic) {
            return Err(VerifyError::UntrustedTopic {
                topic_arn: topic.chars().take(256).collect(),
            });
        }
        let control = match text(&m, "Type")? {
            "SubscriptionConfirmation" => Some(Control::SnsSubscription {
                subscribe_url: self.trusted("SubscribeURL", text(&m, "SubscribeURL")?)?,
                topic_arn: text(&m, "TopicArn")?.to_owned(),
            }),
            "UnsubscribeConfirmation" => Some(Control::SnsUnsubscribed {
                topic_arn: text(&m, "TopicArn")?.to_owned(),
            }),
            _ => None,
        };
        Ok(Checked {
            signed_at: at,
            control,
        })
    }
}

/// A verified SNS message.
pub(crate) struct Checked {
    pub(crate) signed_at: SystemTime,
    pub(crate) control: Option<Control>,
}

/// `message` with `Signature` filled in, signed as SNS signs with a PKCS#8 RSA private key (DER
/// or PEM) whose certificate is served at the message's `SigningCertURL`. `SignatureVersion` must
/// be `"2"` (SHA256withRSA: *ring* does not sign with SHA-1, though it verifies version 1).
///
/// For tests and load generation.
///
/// # Errors
/// [`SignError::Key`] for a key that is not a PKCS#8 RSA key, [`SignError::Message`] for a
/// message that lacks a signed field or a `SignatureVersion` of 2.
pub fn sign(
    private_key: &[u8],
    message: &Map<String, Value>,
) -> Result<Map<String, Value>, SignError> {
    let key = RsaSigner::new(private_key).map_err(|why| SignError::Key { scheme: "sns", why })?;
    if message.get("SignatureVersion").and_then(Value::as_str) != Some("2") {
        return Err(SignError::Message {
            why: "SignatureVersion must be \"2\" (SHA256withRSA)".to_owned(),
        });
    }
    let signed = string_to_sign(message).map_err(|e| SignError::Message { why: e.to_string() })?;
    let mut out = message.clone();
    out.insert(
        "Signature".to_owned(),
        Value::String(base64_encode(&key.sign_sha256(signed.as_bytes()))),
    );
    Ok(out)
}

/// The event id of a verified message.
pub(crate) fn event_id(body: &[u8]) -> Result<EventId, VerifyError> {
    crate::util::event_id_from_body(body, EVENT_ID_POINTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(hosts: &[&str]) -> Compiled {
        Compiled::new(&Sns {
            cert_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            ..Sns::default()
        })
        .unwrap()
    }

    #[test]
    fn the_default_patterns_take_aws_hosts_only() {
        let c = compiled(&[]);
        for ok in [
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem",
            "https://sns.cn-north-1.amazonaws.com.cn/SimpleNotificationService-abc.pem",
            "https://SNS.eu-west-1.AmazonAWS.com:443/x.pem",
        ] {
            assert!(c.trusted("SigningCertURL", ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
            "https://sns.evil.example.amazonaws.com/x.pem",
            "https://evil.example/sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com:8443/x.pem",
            "https://sns..amazonaws.com/x.pem",
            "https://user@evil.example/x.pem",
            "sns.us-east-1.amazonaws.com/x.pem",
        ] {
            let e = c.trusted("SigningCertURL", bad).unwrap_err();
            assert_eq!(e.status(), 401, "{bad}");
            assert!(e.to_string().contains("SigningCertURL"), "{e}");
        }
    }

    #[test]
    fn a_pattern_may_name_a_port() {
        let c = compiled(&["127.0.0.1:8443", "localhost"]);
        assert!(c.trusted("f", "https://127.0.0.1:8443/c.pem").is_ok());
        assert!(c.trusted("f", "https://127.0.0.1:8444/c.pem").is_err());
        assert!(c.trusted("f", "https://localhost/c.pem").is_ok());
        assert!(c.trusted("f", "https://localhost:9/c.pem").is_err());
    }

    #[test]
    fn bad_patterns_are_refused_at_configuration() {
        for bad in ["*", "*.com", "sns.*.amazon aws.com", "host:port", "a..b"] {
            let e = Compiled::new(&Sns {
                cert_hosts: vec![bad.to_owned()],
                ..Sns::default()
            })
            .unwrap_err();
            assert!(e.to_string().contains("cert_hosts"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_string_to_sign_follows_the_type() {
        let m: Map<String, Value> = serde_json::from_str(
            r#"{"Type":"Notification","MessageId":"m","TopicArn":"t","Message":"hi","Timestamp":"ts","Subject":"s","SignatureVersion":"1"}"#,
        )
        .unwrap();
        assert_eq!(
            string_to_sign(&m).unwrap(),
            "Message\nhi\nMessageId\nm\nSubject\ns\nTimestamp\nts\nTopicArn\nt\nType\nNotification\n"
        );
        let mut no_subject = m.clone();
        no_subject.remove("Subject");
        assert!(!string_to_sign(&no_subject).unwrap().contains("Subject"));
        let mut confirm = m;
        confirm.insert("Type".into(), "SubscriptionConfirmation".into());
        assert!(
            string_to_sign(&confirm).is_err(),
            "no Token or SubscribeURL"
        );
    }
}
