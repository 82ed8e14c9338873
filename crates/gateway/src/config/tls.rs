//! `[source.tls]`: how a source's `https://` downstream is trusted, and the client certificate
//! shown to it.

use std::path::PathBuf;

use idemgate_tls::{ClientTls, TlsError};
use serde::Deserialize;

use super::{ConfigError, SourceConfig};

/// `[source.tls]`, for an `https://` `forward_url`. Without it, such a URL is trusted through
/// the system's certificate authorities and no client certificate is shown.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceTls {
    /// A PEM file of certificate authorities trusted for the downstream (a private CA), besides
    /// the system's.
    pub ca_file: Option<PathBuf>,
    /// Whether the system's certificate authorities are trusted too. Default true; `false`
    /// trusts `ca_file` alone.
    #[serde(default = "yes")]
    pub system_roots: bool,
    /// A PEM certificate chain shown to a downstream that asks for one (mutual TLS); needs
    /// `client_key`.
    pub client_cert: Option<PathBuf>,
    /// The PEM private key (PKCS#8, PKCS#1 or SEC1) of `client_cert`.
    pub client_key: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

impl SourceTls {
    /// The client settings: full verification of the downstream's certificate (chain and host
    /// name) against the authorities named here.
    pub fn client_tls(&self) -> ClientTls {
        ClientTls {
            ca_file: self.ca_file.clone(),
            system_roots: self.system_roots,
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
            ..ClientTls::default()
        }
    }
}

/// The peer a TLS setting is for: the key of its URL and what it is called in messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    /// The key of the URL that speaks TLS (`forward_url`, `upstream`).
    pub url_key: &'static str,
    /// What the peer is (`destination`, `upstream`).
    pub noun: &'static str,
}

impl Peer {
    /// The client settings of a TLS peer reached with `tls` (`None`: the system's authorities
    /// alone), checked by reading every file they name. `invalid` makes the error of a key.
    ///
    /// # Errors
    /// Half a client identity, nothing trusted, or a file that cannot be used (the file and
    /// why), each naming its key.
    pub(crate) fn settings(
        self,
        tls: Option<&SourceTls>,
        invalid: impl Fn(&'static str, String) -> ConfigError,
    ) -> Result<ClientTls, ConfigError> {
        let settings = match tls {
            Some(t) => {
                match (&t.client_cert, &t.client_key) {
                    (Some(_), None) => {
                        return Err(invalid(
                            "tls.client_key",
                            "is needed with tls.client_cert: the private key of the client certificate".to_owned(),
                        ));
                    }
                    (None, Some(_)) => {
                        return Err(invalid(
                            "tls.client_cert",
                            "is needed with tls.client_key: the certificate the key belongs to"
                                .to_owned(),
                        ));
                    }
                    _ => {}
                }
                if !t.system_roots && t.ca_file.is_none() {
                    return Err(invalid(
                        "tls.ca_file",
                        "is needed with tls.system_roots = false, or nothing would be trusted"
                            .to_owned(),
                    ));
                }
                t.client_tls()
            }
            None => ClientTls::default(),
        };
        // Every file is read now, so a bad one stops the gateway at start, not at a request.
        settings
            .config()
            .map_err(|e| self.error(tls.is_some(), &e, invalid))?;
        Ok(settings)
    }

    /// `e` as the error of the key at fault: the `tls.*` key of the file, or the URL's when
    /// nothing is trusted and no `tls` was set.
    pub(crate) fn error(
        self,
        tls_set: bool,
        e: &TlsError,
        invalid: impl Fn(&'static str, String) -> ConfigError,
    ) -> ConfigError {
        let key = match e {
            TlsError::Read { what, .. } | TlsError::Pem { what, .. } => match *what {
                "client certificate" => "tls.client_cert",
                "client key" => "tls.client_key",
                _ => "tls.ca_file",
            },
            TlsError::Identity { .. } => "tls.client_cert",
            TlsError::HalfIdentity {
                given: "certificate",
            } => "tls.client_key",
            TlsError::HalfIdentity { .. } => "tls.client_cert",
            TlsError::NoRoots if !tls_set => {
                return invalid(
                    self.url_key,
                    format!(
                        "speaks TLS but this machine trusts no certificate authority: set tls.ca_file to the {}'s CA",
                        self.noun
                    ),
                );
            }
            _ => "tls.ca_file",
        };
        invalid(key, e.to_string())
    }
}

/// A source's destination.
const DESTINATION: Peer = Peer {
    url_key: "forward_url",
    noun: "destination",
};

impl SourceConfig {
    /// The TLS settings of an `https://` `forward_url` (`[source.tls]`, or the system's
    /// authorities without it), checked by reading every file they name; `None` for an
    /// `http://` URL or none, which speak no TLS.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the source and the key: `tls` set where no TLS is spoken, half a
    /// client identity, nothing trusted, or a file that cannot be used (the file and why).
    pub(crate) fn client_tls(
        &self,
        target: Option<&crate::target::Target>,
    ) -> Result<Option<ClientTls>, ConfigError> {
        let tls_spoken = target.is_some_and(|t| t.tls());
        if !tls_spoken {
            if self.tls.is_some() {
                let why = match target {
                    Some(t) => format!(
                        "is set but forward_url is {}, which speaks no TLS: use https://, tls:// or amqps://, or remove [source.tls]",
                        t.scheme()
                    ),
                    None => "is set but there is no forward_url to speak TLS to: set a TLS forward_url, or remove [source.tls]".to_owned(),
                };
                return Err(self.invalid("tls", why));
            }
            return Ok(None);
        }
        DESTINATION
            .settings(self.tls.as_ref(), |key, why| self.invalid(key, why))
            .map(Some)
    }

    /// `e` as a [`ConfigError`] naming the `[source.tls]` key of the file at fault.
    pub(crate) fn tls_invalid(&self, e: &TlsError) -> ConfigError {
        DESTINATION.error(self.tls.is_some(), e, |key, why| self.invalid(key, why))
    }
}
