//! A destination URL ([`Target`]), parsed and checked at load, before anything is opened: what
//! `forward_url` names (`http(s)://`, `nats://` / `tls://`, `amqp(s)://`), and how it is shown
//! with its credentials left out. What opens and sends to it is `destination.rs`.

use std::fmt;

/// A destination URL, parsed and checked: what the config says, before anything is opened.
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    /// `http://` or `https://`.
    Http(hyper::Uri),
    /// `nats://` or `tls://`.
    Nats(NatsTarget),
    /// `amqp://` or `amqps://`.
    Amqp(AmqpTarget),
}

/// A JetStream destination.
#[derive(Clone, PartialEq, Eq)]
pub struct NatsTarget {
    /// `host:port`.
    pub server: String,
    /// Whether the connection speaks TLS (`tls://`).
    pub tls: bool,
    /// The subject published to.
    pub subject: String,
    pub(crate) user: Option<(String, String)>,
}

/// A RabbitMQ destination.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpTarget {
    /// Whether the connection speaks TLS (`amqps://`).
    pub tls: bool,
    /// `host:port`.
    pub server: String,
    /// The virtual host (`/` by default).
    pub vhost: String,
    /// The exchange published to (`""` is the default exchange, which routes by queue name).
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
    pub(crate) user: String,
    pub(crate) password: String,
}

impl Target {
    /// Parses a `forward_url`.
    ///
    /// # Errors
    /// What is wrong with it, in words (the URL in them has no credentials).
    pub fn parse(url: &str) -> Result<Self, String> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("http" | "https") => url
                .parse::<hyper::Uri>()
                .ok()
                .filter(|u| u.host().is_some_and(|h| !h.is_empty()))
                .map(Self::Http)
                .ok_or_else(|| {
                    format!(
                        "{:?} is not an http:// or https:// URL with a host",
                        redact(url)
                    )
                }),
            Some("nats" | "tls") => NatsTarget::parse(url).map(Self::Nats),
            Some("amqp" | "amqps") => AmqpTarget::parse(url).map(Self::Amqp),
            _ => Err(format!(
                "{:?} has no scheme idemgate delivers to: http://, https://, nats:// (tls:// with TLS) or amqp:// (amqps:// with TLS)",
                redact(url)
            )),
        }
    }

    /// Whether the destination speaks TLS (and so takes `[source.tls]`).
    pub fn tls(&self) -> bool {
        match self {
            Self::Http(u) => u.scheme_str() == Some("https"),
            Self::Nats(n) => n.tls,
            Self::Amqp(a) => a.tls,
        }
    }

    /// The scheme as written in the config's terms (`https://`, `nats://`, ...).
    pub fn scheme(&self) -> &'static str {
        match self {
            Self::Http(u) if u.scheme_str() == Some("https") => "https://",
            Self::Http(_) => "http://",
            Self::Nats(n) if n.tls => "tls://",
            Self::Nats(_) => "nats://",
            Self::Amqp(a) if a.tls => "amqps://",
            Self::Amqp(_) => "amqp://",
        }
    }

    /// Whether it is a broker (JetStream or RabbitMQ), whose own dedup window the audit judges.
    pub fn is_broker(&self) -> bool {
        !matches!(self, Self::Http(_))
    }
}

/// The URL without its credentials: `scheme://host:port/path?query`.
impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Http(u) => f.write_str(&redact(&u.to_string())),
            Self::Nats(n) => write!(f, "{}{}/{}", self.scheme(), n.server, n.subject),
            Self::Amqp(a) => write!(
                f,
                "{}{}/{}?exchange={}&routing_key={}",
                self.scheme(),
                a.server,
                percent(&a.vhost),
                percent(&a.exchange),
                percent(&a.routing_key)
            ),
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Target({self})")
    }
}

impl fmt::Debug for NatsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NatsTarget({}, {})", self.server, self.subject)
    }
}

impl fmt::Debug for AmqpTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AmqpTarget({}, {})", self.server, self.exchange)
    }
}

/// `url` with any `user:password@` left out.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// The authority of `rest` (after `scheme://`): `(user:password, host:port, the rest)`.
fn split_authority(rest: &str) -> (Option<&str>, &str, &str) {
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..], tail),
        None => (None, authority, tail),
    }
}

/// `host:port` with the port given or `default`; an error in words when it does not read.
fn host_port(authority: &str, default: u16, url: &str) -> Result<String, String> {
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => match p.parse::<u16>() {
            Ok(port) => (h, port),
            Err(_) => {
                return Err(format!("{:?}: the port {p:?} is not a number", redact(url)));
            }
        },
        _ => (authority, default),
    };
    if host.is_empty() {
        return Err(format!("{:?} has no host", redact(url)));
    }
    Ok(format!("{host}:{port}"))
}

/// Percent-decoding of a URL part.
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    format!("{text:?} has a % that is not followed by two hex digits")
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} does not decode to UTF-8"))
}

/// Percent-encoding of a URL part (everything but unreserved characters).
fn percent(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl NatsTarget {
    fn parse(url: &str) -> Result<Self, String> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("nats", url));
        let tls = scheme.eq_ignore_ascii_case("tls");
        let (userinfo, authority, tail) = split_authority(rest);
        let server = host_port(authority, 4222, url)?;
        if tail.contains(['?', '#']) {
            return Err(format!(
                "{:?}: a nats:// destination takes no query or fragment, only the subject as its path",
                redact(url)
            ));
        }
        let subject = decode(tail.trim_start_matches('/'))?;
        if subject.is_empty() {
            return Err(format!(
                "{:?} names no subject: write nats://HOST:PORT/SUBJECT (the stream that captures SUBJECT stores the events)",
                redact(url)
            ));
        }
        let valid_token =
            |t: &str| !t.is_empty() && !t.contains(|c: char| c.is_whitespace() || c.is_control());
        if subject.split('.').any(|t| t == "*" || t == ">") || subject.contains(['*', '>']) {
            return Err(format!(
                "{:?}: the subject {subject:?} has a wildcard; a publish goes to one subject",
                redact(url)
            ));
        }
        if !subject.split('.').all(valid_token) {
            return Err(format!(
                "{:?}: the subject {subject:?} is not a NATS subject (tokens separated by dots, none empty, no spaces)",
                redact(url)
            ));
        }
        let user = match userinfo {
            None => None,
            Some(info) => {
                let (u, p) = info.split_once(':').unwrap_or((info, ""));
                Some((decode(u)?, decode(p)?))
            }
        };
        Ok(Self {
            server,
            tls,
            subject,
            user,
        })
    }
}

impl AmqpTarget {
    fn parse(url: &str) -> Result<Self, String> {
        let (scheme, rest) = url.split_once("://").unwrap_or(("amqp", url));
        let tls = scheme.eq_ignore_ascii_case("amqps");
        let (userinfo, authority, tail) = split_authority(rest);
        let server = host_port(authority, if tls { 5671 } else { 5672 }, url)?;
        let (path, query) = match tail.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (tail, None),
        };
        let vhost = match path.strip_prefix('/') {
            None | Some("") => "/".to_owned(),
            Some(v) => decode(v)?,
        };
        let mut exchange = None;
        let mut routing_key = None;
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "exchange" => exchange = Some(decode(v)?),
                "routing_key" => routing_key = Some(decode(v)?),
                other => {
                    return Err(format!(
                        "{:?}: {other:?} is not a parameter of an amqp:// destination (exchange, routing_key)",
                        redact(url)
                    ));
                }
            }
        }
        let exchange = exchange.ok_or_else(|| {
            format!(
                "{:?} names no exchange: add ?exchange=NAME&routing_key=KEY (exchange= empty is the default exchange, which routes to the queue named by the routing key)",
                redact(url)
            )
        })?;
        let routing_key = routing_key.ok_or_else(|| {
            format!(
                "{:?} names no routing_key: add &routing_key=KEY",
                redact(url)
            )
        })?;
        let (user, password) = match userinfo {
            None => ("guest".to_owned(), "guest".to_owned()),
            Some(info) => {
                let (u, p) = info.split_once(':').unwrap_or((info, ""));
                (decode(u)?, decode(p)?)
            }
        };
        Ok(Self {
            tls,
            server,
            vhost,
            exchange,
            routing_key,
            user,
            password,
        })
    }

    /// The URI lapin connects to: credentials and vhost, no query.
    pub(crate) fn uri(&self) -> String {
        format!(
            "{}://{}:{}@{}/{}",
            if self.tls { "amqps" } else { "amqp" },
            percent(&self.user),
            percent(&self.password),
            self.server,
            percent(&self.vhost)
        )
    }
}
