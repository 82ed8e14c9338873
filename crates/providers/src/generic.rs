//! `generic-hmac`: an HMAC in a header of your choosing, configured by [`GenericHmac`]; and the
//! event-id sources shared with `none`.

use std::time::SystemTime;

use http::{HeaderMap, HeaderName};
use idemgate_core::EventId;

use crate::error::{ConfigError, VerifyError};
use crate::keyed::{Keyed, require_match};
use crate::scheme::{Algorithm, Encoding, GenericHmac, KeySource};
use crate::util::{
    base64_decode, base64_encode, check_json_pointer, event_id_from_body, event_id_from_form,
    event_id_from_header, header, hex_decode, hex_encode, malformed, parse_unix_seconds,
    value_text,
};

/// A validated [`KeySource`].
#[derive(Debug, Clone)]
pub(crate) enum IdSource {
    Header(HeaderName),
    Pointer(String),
    Form(String),
}

impl IdSource {
    pub(crate) fn compile(source: &KeySource, scheme: &'static str) -> Result<Self, ConfigError> {
        match source {
            KeySource::Header(name) if name.is_empty() => Err(ConfigError::Missing {
                scheme,
                field: "event_id",
            }),
            KeySource::Header(name) => Ok(Self::Header(header_name("event_id", name)?)),
            KeySource::JsonPointer(pointer) => match check_json_pointer(pointer) {
                Ok(()) => Ok(Self::Pointer(pointer.clone())),
                Err(why) => Err(ConfigError::JsonPointer {
                    field: "event_id",
                    pointer: pointer.clone(),
                    why,
                }),
            },
            KeySource::FormField(name) if name.is_empty() => Err(ConfigError::Missing {
                scheme,
                field: "event_id",
            }),
            KeySource::FormField(name) => Ok(Self::Form(name.clone())),
        }
    }

    pub(crate) fn extract(&self, headers: &HeaderMap, body: &[u8]) -> Result<EventId, VerifyError> {
        match self {
            Self::Header(name) => event_id_from_header(headers, name),
            Self::Pointer(pointer) => event_id_from_body(body, pointer),
            Self::Form(name) => event_id_from_form(body, name),
        }
    }

    pub(crate) fn header(&self) -> Option<&HeaderName> {
        match self {
            Self::Header(name) => Some(name),
            Self::Pointer(_) | Self::Form(_) => None,
        }
    }
}

fn header_name(field: &'static str, name: &str) -> Result<HeaderName, ConfigError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|source| ConfigError::HeaderName {
        field,
        name: name.to_owned(),
        source,
    })
}

/// One piece of the signed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Timestamp,
    Body,
}

/// Parses a `signed_payload` template: `{timestamp}` and `{body}` are replaced, other text is
/// literal, any other `{` is refused (a typo such as `{ts}` would otherwise be signed literally).
fn compile_template(template: &str, has_timestamp: bool) -> Result<Vec<Segment>, ConfigError> {
    let refuse = |why| ConfigError::Template {
        template: template.to_owned(),
        why,
    };
    let mut segments = Vec::new();
    let mut literal = String::new();
    let mut rest = template;
    while let Some(at) = rest.find('{') {
        literal.push_str(&rest[..at]);
        rest = &rest[at..];
        let (segment, after) = if let Some(after) = rest.strip_prefix("{body}") {
            (Segment::Body, after)
        } else if let Some(after) = rest.strip_prefix("{timestamp}") {
            (Segment::Timestamp, after)
        } else {
            return Err(refuse(
                "unknown placeholder (only {timestamp} and {body} are replaced)",
            ));
        };
        if !literal.is_empty() {
            segments.push(Segment::Literal(std::mem::take(&mut literal)));
        }
        segments.push(segment);
        rest = after;
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        segments.push(Segment::Literal(literal));
    }
    let count = |s: &Segment| segments.iter().filter(|x| *x == s).count();
    if count(&Segment::Body) != 1 {
        return Err(refuse("must contain {body} exactly once"));
    }
    match (has_timestamp, count(&Segment::Timestamp)) {
        (true, 1) | (false, 0) => Ok(segments),
        (true, _) => Err(refuse(
            "with a timestamp_header, must contain {timestamp} exactly once (or the timestamp is not signed)",
        )),
        (false, _) => Err(refuse("{timestamp} needs a timestamp_header")),
    }
}

/// A validated [`GenericHmac`].
#[derive(Debug, Clone)]
pub(crate) struct Compiled {
    header: HeaderName,
    encoding: Encoding,
    prefix: String,
    algorithm: Algorithm,
    timestamp_header: Option<HeaderName>,
    template: Vec<Segment>,
    pub(crate) event_id: IdSource,
}

const SCHEME: &str = "generic-hmac";

impl Compiled {
    /// The signature header and the timestamp header (when one is signed) are present.
    pub(crate) fn check_headers(&self, headers: &http::HeaderMap) -> Result<(), VerifyError> {
        for header in std::iter::once(&self.header).chain(self.timestamp_header.as_ref()) {
            if !headers.contains_key(header) {
                return Err(VerifyError::MissingHeader {
                    header: header.clone(),
                });
            }
        }
        Ok(())
    }

    pub(crate) fn new(config: &GenericHmac) -> Result<Self, ConfigError> {
        if config.header.is_empty() {
            return Err(ConfigError::Missing {
                scheme: SCHEME,
                field: "header",
            });
        }
        let header = header_name("header", &config.header)?;
        let timestamp_header = config
            .timestamp_header
            .as_deref()
            .map(|name| header_name("timestamp_header", name))
            .transpose()?;
        let default = if timestamp_header.is_some() {
            "{timestamp}.{body}"
        } else {
            "{body}"
        };
        let setting = |field, why| ConfigError::Setting {
            scheme: SCHEME,
            field,
            why,
        };
        let event_id = IdSource::compile(&config.event_id, SCHEME)?;
        // One header cannot carry two of the signature, the timestamp and the event id: the
        // delivery could never verify, or its id would change on every retry.
        if timestamp_header.as_ref() == Some(&header) {
            return Err(setting("timestamp_header", "must differ from header"));
        }
        if let Some(id) = event_id.header() {
            if *id == header {
                return Err(setting("event_id", "must differ from header"));
            }
            if timestamp_header.as_ref() == Some(id) {
                return Err(setting("event_id", "must differ from timestamp_header"));
            }
        }
        let prefix = config.prefix.clone().unwrap_or_default();
        if prefix.starts_with([' ', '\t']) {
            return Err(setting(
                "prefix",
                "must not start with a space or tab (HTTP strips them from header values)",
            ));
        }
        if http::HeaderValue::from_str(&prefix).is_err() {
            return Err(setting(
                "prefix",
                "holds a character a header value cannot carry",
            ));
        }
        let template = compile_template(
            config.signed_payload.as_deref().unwrap_or(default),
            timestamp_header.is_some(),
        )?;
        Ok(Self {
            header,
            encoding: config.encoding,
            prefix,
            algorithm: config.algorithm,
            timestamp_header,
            template,
            event_id,
        })
    }

    pub(crate) fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    pub(crate) fn header(&self) -> &HeaderName {
        &self.header
    }

    pub(crate) fn timestamp_header(&self) -> Option<&HeaderName> {
        self.timestamp_header.as_ref()
    }

    fn parts<'a>(&'a self, timestamp: &'a str, body: &'a [u8]) -> Vec<&'a [u8]> {
        self.template
            .iter()
            .map(|segment| match segment {
                Segment::Literal(text) => text.as_bytes(),
                Segment::Timestamp => timestamp.as_bytes(),
                Segment::Body => body,
            })
            .collect()
    }

    /// The signature header's value for `body` (and `timestamp`, when one is signed).
    pub(crate) fn sign_with(&self, key: &Keyed, timestamp: u64, body: &[u8]) -> String {
        let ts = timestamp.to_string();
        let mac = key.over(&self.parts(&ts, body)).finalize();
        let encoded = match self.encoding {
            Encoding::Hex => hex_encode(&mac),
            Encoding::Base64 => base64_encode(&mac),
        };
        format!("{}{encoded}", self.prefix)
    }

    pub(crate) fn check(
        &self,
        keys: &[Keyed],
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Option<SystemTime>, VerifyError> {
        let (ts, signed_at) = match &self.timestamp_header {
            Some(name) => {
                let ts = header(headers, name)?.trim();
                (ts, Some(parse_unix_seconds(ts, name)?))
            }
            None => ("", None),
        };
        // Every occurrence of the header is a candidate: a sender rotating secrets may send two.
        let mut signatures = Vec::new();
        for value in headers.get_all(&self.header) {
            let text = value_text(value, &self.header)?.trim();
            let encoded = text
                .strip_prefix(self.prefix.as_str())
                .ok_or_else(|| malformed(&self.header, "signature lacks the configured prefix"))?;
            let signature = match self.encoding {
                Encoding::Hex => hex_decode(encoded),
                Encoding::Base64 => base64_decode(encoded),
            }
            .ok_or_else(|| match self.encoding {
                Encoding::Hex => malformed(&self.header, "signature is not hex"),
                Encoding::Base64 => malformed(&self.header, "signature is not base64"),
            })?;
            signatures.push(signature);
        }
        if signatures.is_empty() {
            return Err(VerifyError::MissingHeader {
                header: self.header.clone(),
            });
        }
        require_match(keys, &self.parts(ts, body), &signatures)?;
        Ok(signed_at)
    }
}

impl GenericHmac {
    /// The signature header's value this configuration expects for `body`, signed with `secret`
    /// at `timestamp` (Unix seconds, ignored without a `timestamp_header`).
    ///
    /// For tests and load generation.
    ///
    /// # Errors
    /// The [`ConfigError`] a [`Verifier`](crate::Verifier) would give for this configuration.
    pub fn sign(&self, secret: &[u8], timestamp: u64, body: &[u8]) -> Result<String, ConfigError> {
        let compiled = Compiled::new(self)?;
        Ok(compiled.sign_with(&Keyed::new(compiled.algorithm, secret), timestamp, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        use Segment::*;
        assert_eq!(compile_template("{body}", false).ok(), Some(vec![Body]));
        assert_eq!(
            compile_template("v0:{timestamp}:{body}", true).ok(),
            Some(vec![
                Literal("v0:".into()),
                Timestamp,
                Literal(":".into()),
                Body
            ])
        );
        assert_eq!(
            compile_template("{body}}{", false).map_err(|e| e.to_string()).err(),
            Some("signed_payload template \"{body}}{\": unknown placeholder (only {timestamp} and {body} are replaced)".into())
        );
        for (bad, ts) in [
            ("{timestamp}.{body}", false),
            ("{body}", true),
            ("{ts}.{body}", true),
            ("{timestamp}", true),
            ("{body}{body}", false),
            ("{timestamp}{timestamp}{body}", true),
        ] {
            assert!(compile_template(bad, ts).is_err(), "{bad} {ts}");
        }
    }
}
