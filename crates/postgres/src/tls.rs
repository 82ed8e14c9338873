//! TLS settings for PostgreSQL connections, written the way libpq users write them: `sslmode`,
//! `sslrootcert`, `sslcert` and `sslkey` in the URL (either form), or the `tls` section of the
//! store's settings ([`PgTls`]); and what they settle to (a mode and idemgate-tls's
//! [`ClientTls`]).
//!
//! tokio-postgres knows only `disable`, `prefer` and `require`, and no certificate files, so
//! these four parameters are taken out of the URL here before it parses the rest.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use idemgate_tls::{ClientTls, TlsError, Verify};
use serde::Deserialize;

use crate::config_error::ConfigError;

/// How much TLS a connection insists on, as libpq's `sslmode` says it.
///
/// Where a CA file is given, `prefer` and `require` check the certificate's chain as
/// `verify-ca` does (libpq does the same). idemgate reads no default files
/// (`~/.postgresql/root.crt` and the like): a CA file or client certificate is used only when
/// it is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it, plaintext when it does not; the certificate is not
    /// checked unless a CA file is given. libpq's default, and idemgate's when nothing is set.
    Prefer,
    /// TLS or no connection; the certificate is not checked unless a CA file is given.
    /// Encryption without authentication: a man in the middle is not noticed.
    Require,
    /// TLS, with the certificate's chain checked against the CA file (which it needs); the host
    /// name is not checked.
    VerifyCa,
    /// TLS, with the chain checked (against the CA file, or the system's authorities when none
    /// is given) and the certificate required to name the host connected to. What a server
    /// reached over a network should use.
    VerifyFull,
}

impl SslMode {
    const ALL: [Self; 5] = [
        Self::Disable,
        Self::Prefer,
        Self::Require,
        Self::VerifyCa,
        Self::VerifyFull,
    ];

    /// The name libpq knows it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether TLS is tried, and whether it is insisted on.
    pub(crate) fn wire(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Wire;
        match self {
            Self::Disable => Wire::Disable,
            Self::Prefer => Wire::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => Wire::Require,
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SslMode {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| ConfigError::SslMode {
                value: s.to_owned(),
            })
    }
}

/// `[store.postgres.tls]`: TLS for the store's connections, as a configuration file writes it.
/// Each key may instead be given in the URL under libpq's name (in brackets); giving one in both
/// places with different values is an error naming both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PgTls {
    /// (`sslmode`) How much TLS is insisted on; `prefer` when not set.
    pub sslmode: Option<SslMode>,
    /// (`sslrootcert`) A PEM file of the certificate authorities trusted for the server's
    /// certificate, instead of the system's. The URL may say `sslrootcert=system` (with
    /// `verify-full`) for the system's, which is also what `verify-full` trusts without it.
    pub ca_file: Option<PathBuf>,
    /// (`sslcert`) A PEM client certificate to present (`cert` authentication); needs
    /// `client_key`.
    pub client_cert: Option<PathBuf>,
    /// (`sslkey`) The PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
}

/// Where the server's certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// `sslrootcert=system`: the operating system's authorities.
    System,
    /// A CA file.
    File(PathBuf),
}

impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => f.write_str("system"),
            Self::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The TLS parameters taken out of a URL.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct UrlTls {
    sslmode: Option<SslMode>,
    sslrootcert: Option<Roots>,
    sslcert: Option<PathBuf>,
    sslkey: Option<PathBuf>,
}

/// The parameters tokio-postgres does not understand (or not as libpq does).
const TAKEN: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

impl UrlTls {
    fn set(&mut self, key: &str, value: String) -> Result<(), ConfigError> {
        match key {
            "sslmode" => self.sslmode = Some(value.parse()?),
            "sslrootcert" if value == "system" => self.sslrootcert = Some(Roots::System),
            "sslrootcert" => self.sslrootcert = Some(Roots::File(value.into())),
            "sslcert" => self.sslcert = Some(value.into()),
            "sslkey" => self.sslkey = Some(value.into()),
            _ => unreachable!("only the keys in TAKEN are set"),
        }
        Ok(())
    }
}

/// A URL with its TLS parameters taken out: `rest` is for tokio-postgres.
#[derive(Debug)]
pub(crate) struct SplitUrl {
    pub(crate) rest: String,
    pub(crate) tls: UrlTls,
}

/// Takes `sslmode`, `sslrootcert`, `sslcert` and `sslkey` out of a URL
/// (`postgres://...?sslmode=verify-full`) or a key=value string (`host=db sslmode=require`).
/// When a key is given twice the last one counts, as in libpq.
///
/// # Errors
/// [`ConfigError::SslMode`] for an `sslmode` libpq does not know, [`ConfigError::UrlSyntax`]
/// for a value that does not decode.
pub(crate) fn split_url(url: &str) -> Result<SplitUrl, ConfigError> {
    let mut tls = UrlTls::default();
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_uri(url, &mut tls)?
    } else {
        split_key_values(url, &mut tls)?
    };
    Ok(SplitUrl { rest, tls })
}

fn split_uri(url: &str, tls: &mut UrlTls) -> Result<String, ConfigError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok(url.to_owned());
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let key = percent_decode(key)?;
        if TAKEN.contains(&key.as_str()) {
            tls.set(&key, percent_decode(value)?)?;
        } else if !pair.is_empty() {
            kept.push(pair);
        }
    }
    Ok(if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    })
}

fn percent_decode(s: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::UrlSyntax {
        what: format!("{s:?} is not valid percent-encoding"),
    };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// `key=value` pairs separated by spaces; a value may be single-quoted, and a backslash escapes
/// the next character (libpq's rules). The TLS pairs are cut out of the text, the rest is kept
/// as written.
fn split_key_values(text: &str, tls: &mut UrlTls) -> Result<String, ConfigError> {
    let mut rest = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    let mut kept_from = 0;
    let unfinished = |what: &str| ConfigError::UrlSyntax {
        what: what.to_owned(),
    };
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut key = String::new();
        while let Some((_, c)) = chars.next_if(|(_, c)| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        if chars.next_if(|(_, c)| *c == '=').is_none() {
            return Err(unfinished(&format!("{key:?} is not followed by =")));
        }
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if(|(_, c)| *c == '\'').is_some() {
            loop {
                match chars.next() {
                    Some((_, '\'')) => break,
                    Some((_, '\\')) => value.extend(chars.next().map(|(_, c)| c)),
                    Some((_, c)) => value.push(c),
                    None => {
                        return Err(unfinished(&format!(
                            "the value of {key:?} has no closing quote"
                        )));
                    }
                }
            }
        } else {
            while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next().map(|(_, c)| c));
                } else {
                    value.push(c);
                }
            }
        }
        // A pair cut out takes the spaces after it along.
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let end = chars.peek().map_or(text.len(), |&(i, _)| i);
        if TAKEN.contains(&key.as_str()) {
            rest.push_str(&text[kept_from..start]);
            kept_from = end;
            tls.set(&key, value)?;
        }
    }
    rest.push_str(&text[kept_from..]);
    Ok(rest.trim().to_owned())
}

/// What a connection does about TLS, settled from the URL and the settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsPlan {
    pub(crate) mode: SslMode,
    /// Whether `sslmode` was set (in the URL or the settings), rather than left at `prefer`.
    pub(crate) mode_given: bool,
    /// The client settings: what is trusted, how much is checked, the client certificate.
    pub(crate) client: ClientTls,
}

const CA_KEY: &str = "postgres.tls.ca_file (sslrootcert in the URL)";
const CERT_KEY: &str = "postgres.tls.client_cert (sslcert in the URL)";
const KEY_KEY: &str = "postgres.tls.client_key (sslkey in the URL)";

impl PgTls {
    /// These settings together with what the URL says.
    ///
    /// # Errors
    /// [`ConfigError`] naming the key: a value given differently in both places, a mode that
    /// cannot use what is given (`verify-ca` without a CA file, `sslrootcert=system` without
    /// `verify-full`, certificate files with `disable`), a client certificate without its key.
    pub(crate) fn plan(&self, url: UrlTls) -> Result<TlsPlan, ConfigError> {
        let mode = agree("sslmode", url.sslmode, "sslmode", self.sslmode)?;
        let roots = agree(
            "sslrootcert",
            url.sslrootcert,
            "ca_file",
            self.ca_file.clone().map(Roots::File),
        )?;
        let cert = agree(
            "sslcert",
            url.sslcert,
            "client_cert",
            self.client_cert.clone(),
        )?;
        let key = agree("sslkey", url.sslkey, "client_key", self.client_key.clone())?;
        let mode_given = mode.is_some();
        let mode = mode.unwrap_or(SslMode::Prefer);

        if mode == SslMode::Disable {
            let unused = [
                (roots.is_some(), CA_KEY),
                (cert.is_some(), CERT_KEY),
                (key.is_some(), KEY_KEY),
            ];
            if let Some((_, key)) = unused.into_iter().find(|(set, _)| *set) {
                return Err(ConfigError::TlsUnused { key });
            }
        }
        match (&cert, &key) {
            (Some(_), None) => {
                return Err(ConfigError::HalfIdentity {
                    key: KEY_KEY,
                    other: CERT_KEY,
                });
            }
            (None, Some(_)) => {
                return Err(ConfigError::HalfIdentity {
                    key: CERT_KEY,
                    other: KEY_KEY,
                });
            }
            _ => {}
        }
        let (verify, ca_file) = match (mode, roots) {
            (SslMode::Disable | SslMode::Prefer | SslMode::Require, None) => {
                (Verify::EncryptOnly, None)
            }
            (SslMode::VerifyFull, None | Some(Roots::System)) => (Verify::Full, None),
            (SslMode::VerifyFull, Some(Roots::File(path))) => (Verify::Full, Some(path)),
            (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, Some(Roots::File(path))) => {
                (Verify::Chain, Some(path))
            }
            (SslMode::VerifyCa, None) => return Err(ConfigError::NeedsCa { key: CA_KEY }),
            (mode, Some(Roots::System)) => {
                return Err(ConfigError::SystemRoots {
                    key: CA_KEY,
                    mode: mode.as_str(),
                });
            }
            (SslMode::Disable, Some(_)) => unreachable!("refused above"),
        };
        Ok(TlsPlan {
            mode,
            mode_given,
            client: ClientTls {
                system_roots: ca_file.is_none(),
                ca_file,
                client_cert: cert,
                client_key: key,
                verify,
            },
        })
    }
}

/// The value given in the URL or the settings; an error naming both when they differ.
fn agree<T: PartialEq + Shown>(
    url_key: &'static str,
    url: Option<T>,
    settings_key: &'static str,
    settings: Option<T>,
) -> Result<Option<T>, ConfigError> {
    match (url, settings) {
        (Some(u), Some(s)) if u != s => Err(ConfigError::TlsConflict {
            url_key,
            url_value: u.shown(),
            settings_key,
            settings_value: s.shown(),
        }),
        (u, s) => Ok(u.or(s)),
    }
}

/// A value as an error message shows it.
trait Shown {
    fn shown(&self) -> String;
}

impl Shown for SslMode {
    fn shown(&self) -> String {
        self.to_string()
    }
}

impl Shown for Roots {
    fn shown(&self) -> String {
        self.to_string()
    }
}

impl Shown for PathBuf {
    fn shown(&self) -> String {
        self.display().to_string()
    }
}

/// The key a file-reading failure of idemgate-tls is about.
pub(crate) fn key_of(err: &TlsError) -> &'static str {
    match err {
        TlsError::Read { what, .. } | TlsError::Pem { what, .. } => match *what {
            "client certificate" => CERT_KEY,
            "client key" => KEY_KEY,
            _ => CA_KEY,
        },
        TlsError::Identity { .. } | TlsError::HalfIdentity { .. } => CERT_KEY,
        _ => CA_KEY,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(url: &str) -> (String, UrlTls) {
        let s = split_url(url).unwrap();
        (s.rest, s.tls)
    }

    #[test]
    fn uri_parameters_are_taken_out_and_the_rest_kept() {
        let (rest, tls) = split(
            "postgres://u@db:5432/app?application_name=x&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20file.pem&connect_timeout=3&sslcert=/c.pem&sslkey=/k.pem",
        );
        assert_eq!(
            rest,
            "postgres://u@db:5432/app?application_name=x&connect_timeout=3"
        );
        assert_eq!(
            tls,
            UrlTls {
                sslmode: Some(SslMode::VerifyFull),
                sslrootcert: Some(Roots::File("/etc/ca file.pem".into())),
                sslcert: Some("/c.pem".into()),
                sslkey: Some("/k.pem".into()),
            }
        );
        let (rest, tls) = split("postgresql://u@db/app?sslmode=require");
        assert_eq!(rest, "postgresql://u@db/app");
        assert_eq!(tls.sslmode, Some(SslMode::Require));
        assert_eq!(split("postgres://u@db/app").0, "postgres://u@db/app");
    }

    #[test]
    fn key_value_parameters_are_taken_out_quoted_or_not() {
        let (rest, tls) = split(
            r"host=db sslmode = verify-ca user=app sslrootcert='/etc/my ca\'s.pem' dbname=app sslcert=/c\ d.pem",
        );
        assert_eq!(rest, "host=db user=app dbname=app");
        assert_eq!(tls.sslmode, Some(SslMode::VerifyCa));
        assert_eq!(
            tls.sslrootcert,
            Some(Roots::File("/etc/my ca's.pem".into()))
        );
        assert_eq!(tls.sslcert, Some("/c d.pem".into()));
        let (rest, tls) = split("sslrootcert=system host=db");
        assert_eq!(rest, "host=db");
        assert_eq!(tls.sslrootcert, Some(Roots::System));
    }

    #[test]
    fn an_unknown_sslmode_or_broken_syntax_is_refused() {
        for url in [
            "postgres://db/app?sslmode=verify_full",
            "host=db sslmode=verify_full",
        ] {
            let err = split_url(url).unwrap_err();
            assert!(matches!(err, ConfigError::SslMode { .. }), "{url}: {err}");
            let text = err.to_string();
            assert!(
                text.contains("sslmode") && text.contains("verify_full"),
                "{text}"
            );
            assert!(
                text.contains("verify-full"),
                "names what is accepted: {text}"
            );
        }
        for url in [
            "postgres://db/app?sslrootcert=%zz",
            "host=db sslrootcert='/unclosed",
            "host=db sslmode",
        ] {
            assert!(
                matches!(split_url(url), Err(ConfigError::UrlSyntax { .. })),
                "{url}"
            );
        }
    }

    fn plan(url: &str, settings: PgTls) -> Result<TlsPlan, ConfigError> {
        settings.plan(split_url(url)?.tls)
    }

    #[test]
    fn modes_settle_as_libpq_does() {
        let none = PgTls::default();
        let p = plan("postgres://db/app", none.clone()).unwrap();
        assert_eq!((p.mode, p.mode_given), (SslMode::Prefer, false));
        assert_eq!(p.client.verify, Verify::EncryptOnly);

        let p = plan("postgres://db/app?sslmode=require", none.clone()).unwrap();
        assert_eq!(p.client.verify, Verify::EncryptOnly);
        // require with a root certificate behaves as verify-ca.
        let p = plan(
            "postgres://db/app?sslmode=require&sslrootcert=/ca.pem",
            none.clone(),
        )
        .unwrap();
        assert_eq!(p.client.verify, Verify::Chain);
        assert_eq!(p.client.ca_file, Some("/ca.pem".into()));
        assert!(
            !p.client.system_roots,
            "a CA file replaces the system's authorities"
        );

        let p = plan("postgres://db/app?sslmode=verify-full", none.clone()).unwrap();
        assert_eq!(p.client.verify, Verify::Full);
        assert!(p.client.system_roots);
        let p = plan(
            "postgres://db/app?sslmode=verify-full&sslrootcert=system",
            none,
        )
        .unwrap();
        assert!(p.client.system_roots && p.client.ca_file.is_none());

        let settings = PgTls {
            sslmode: Some(SslMode::VerifyCa),
            ca_file: Some("/ca.pem".into()),
            client_cert: Some("/c.pem".into()),
            client_key: Some("/k.pem".into()),
        };
        let p = plan("postgres://db/app", settings).unwrap();
        assert_eq!((p.mode, p.mode_given), (SslMode::VerifyCa, true));
        assert_eq!(p.client.verify, Verify::Chain);
        assert_eq!(p.client.client_key, Some("/k.pem".into()));
    }

    #[test]
    fn impossible_combinations_name_the_key() {
        let err = plan("postgres://db/app?sslmode=verify-ca", PgTls::default()).unwrap_err();
        assert!(err.to_string().starts_with("postgres.tls.ca_file"), "{err}");

        let err = plan(
            "postgres://db/app?sslmode=require&sslrootcert=system",
            PgTls::default(),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::SystemRoots { .. }), "{err}");

        let err = plan("postgres://db/app?sslcert=/c.pem", PgTls::default()).unwrap_err();
        assert!(
            err.to_string().starts_with("postgres.tls.client_key"),
            "{err}"
        );
        let key_only = PgTls {
            client_key: Some("/k.pem".into()),
            ..PgTls::default()
        };
        let err = plan("postgres://db/app", key_only).unwrap_err();
        assert!(
            err.to_string().starts_with("postgres.tls.client_cert"),
            "{err}"
        );

        let err = plan(
            "host=db sslmode=disable sslrootcert=/ca.pem",
            PgTls::default(),
        )
        .unwrap_err();
        assert!(matches!(err, ConfigError::TlsUnused { .. }), "{err}");
    }

    #[test]
    fn url_and_settings_must_agree() {
        let settings = PgTls {
            sslmode: Some(SslMode::VerifyFull),
            ca_file: Some("/a.pem".into()),
            ..PgTls::default()
        };
        // Saying the same thing twice is fine.
        plan("postgres://db/app?sslmode=verify-full", settings.clone()).unwrap();
        let err = plan("postgres://db/app?sslmode=require", settings.clone()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("sslmode=require") && text.contains("postgres.tls.sslmode = verify-full"),
            "{text}"
        );
        let err = plan("postgres://db/app?sslrootcert=/b.pem", settings).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("sslrootcert=/b.pem") && text.contains("postgres.tls.ca_file = /a.pem"),
            "{text}"
        );
    }
}
