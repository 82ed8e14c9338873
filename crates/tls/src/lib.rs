//! TLS client settings for idemgate's outgoing connections: PostgreSQL, Redis and HTTPS
//! downstreams share one way to say which certificate authorities are trusted, whether a client
//! certificate is presented, and how much of the server's certificate is checked.
//!
//! - [`ClientTls`] is the settings; [`ClientTls::config`] turns them into a rustls
//!   [`ClientConfig`], reading every file once and naming the file and what is wrong with it when
//!   it cannot ([`TlsError`]).
//! - [`Verify`] is how much is checked: the whole certificate (chain and host name), the chain
//!   only (PostgreSQL's `verify-ca`), or nothing but the handshake (`sslmode=require`, encryption
//!   without authentication, as libpq does it).
//! - [`describe`] words a rustls error for a person ("the certificate is not valid for the name
//!   ..."), for the callers' own errors, which name the service; [`explain`] and [`find`] dig
//!   it out of a connection library's error chain.
//! - With the `test-certs` feature, `testing::TestCa` makes a certificate authority and server
//!   certificates on the spot, for tests that start their own TLS servers.
//!
//! The cryptography is *ring*'s, chosen here once ([`provider`]), so that no process-wide default
//! has to be installed.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use rustls;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore,
    SignatureScheme,
};

#[cfg(feature = "test-certs")]
pub mod testing;

/// The cryptography every idemgate TLS connection uses (*ring*).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// The chain up to a trusted authority, and that the certificate names the host connected to.
    #[default]
    Full,
    /// The chain only, whatever host the certificate names (PostgreSQL's `verify-ca`).
    Chain,
    /// Nothing but the handshake: the connection is encrypted, the server is not authenticated
    /// (PostgreSQL's `sslmode=require` without a root certificate, as libpq does it).
    EncryptOnly,
}

/// TLS settings for one kind of outgoing connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// A PEM file of certificate authorities to trust, besides (or instead of) the system's.
    pub ca_file: Option<PathBuf>,
    /// Whether the operating system's trusted authorities are trusted too. Default true.
    pub system_roots: bool,
    /// A PEM certificate chain to present (mutual TLS); needs [`client_key`](Self::client_key).
    pub client_cert: Option<PathBuf>,
    /// The PEM private key of [`client_cert`](Self::client_cert).
    pub client_key: Option<PathBuf>,
    /// How much of the server's certificate is checked.
    pub verify: Verify,
}

impl Default for ClientTls {
    fn default() -> Self {
        Self {
            ca_file: None,
            system_roots: true,
            client_cert: None,
            client_key: None,
            verify: Verify::Full,
        }
    }
}

/// Why TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read the {what} {}: {io}", path.display())]
    Read {
        /// What the file should hold ("CA file", "client certificate", ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why (in the message, not a source: an error chain would print it twice).
        io: std::io::Error,
    },
    /// A file holds no PEM block of the kind needed, or a broken one.
    #[error("the {what} {} holds no usable PEM {kind}: {why}", path.display())]
    Pem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The PEM block expected ("certificate", "private key").
        kind: &'static str,
        /// What was found instead.
        why: String,
    },
    /// A CA certificate was refused as a trust anchor.
    #[error("the CA file {} holds a certificate that cannot be trusted: {why}", path.display())]
    Anchor {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Nothing would be trusted.
    #[error("no certificate authority is trusted: set a CA file, or trust the system's")]
    NoRoots,
    /// Only half of a client identity is set.
    #[error(
        "a client certificate needs both a certificate file and a key file; only the {given} is set"
    )]
    HalfIdentity {
        /// The half that is set.
        given: &'static str,
    },
    /// The client certificate and key do not go together, or rustls refused them.
    #[error("the client certificate {} cannot be used with its key: {why}", path.display())]
    Identity {
        /// The certificate file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

impl ClientTls {
    /// The settings with `ca_file` trusted besides the system's authorities.
    pub fn with_ca(ca_file: impl Into<PathBuf>) -> Self {
        Self {
            ca_file: Some(ca_file.into()),
            ..Self::default()
        }
    }

    /// A rustls client configuration for these settings, with no ALPN protocols (an HTTP client
    /// sets its own).
    ///
    /// # Errors
    /// [`TlsError`], naming the file and what is wrong with it: unreadable, no PEM block of the
    /// kind needed, a certificate or key that does not parse, half a client identity, or nothing
    /// trusted at all.
    pub fn config(&self) -> Result<ClientConfig, TlsError> {
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions");
        let builder = match self.verify {
            Verify::EncryptOnly => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(EncryptOnly(
                    provider.signature_verification_algorithms,
                ))),
            Verify::Full | Verify::Chain => {
                let roots = Arc::new(self.roots()?);
                let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| TlsError::Anchor {
                        path: self.ca_file.clone().unwrap_or_default(),
                        why: e.to_string(),
                    })?;
                if self.verify == Verify::Chain {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
                } else {
                    builder.with_webpki_verifier(webpki)
                }
            }
        };
        match (&self.client_cert, &self.client_key) {
            (None, None) => Ok(builder.with_no_client_auth()),
            (Some(_), None) => Err(TlsError::HalfIdentity {
                given: "certificate",
            }),
            (None, Some(_)) => Err(TlsError::HalfIdentity { given: "key" }),
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "client certificate")?;
                let key = read_key(key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| TlsError::Identity {
                        path: cert.clone(),
                        why: describe(&e),
                    })
            }
        }
    }

    fn roots(&self) -> Result<RootCertStore, TlsError> {
        let mut roots = RootCertStore::empty();
        if self.system_roots {
            // Unreadable entries in the system store are skipped, as every TLS client does.
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
        if let Some(path) = &self.ca_file {
            for cert in read_certs(path, "CA file")? {
                roots.add(cert).map_err(|e| TlsError::Anchor {
                    path: path.clone(),
                    why: describe(&e),
                })?;
            }
        }
        if roots.is_empty() {
            return Err(TlsError::NoRoots);
        }
        Ok(roots)
    }
}

/// Every certificate in a PEM file (at least one).
///
/// # Errors
/// [`TlsError::Read`] or [`TlsError::Pem`], naming `what` the file is for.
pub fn read_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path, what)?;
    let pem = |why: String| TlsError::Pem {
        what,
        path: path.to_owned(),
        kind: "certificate",
        why,
    };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(pem("no \"BEGIN CERTIFICATE\" block".to_owned()));
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
///
/// # Errors
/// [`TlsError::Read`] or [`TlsError::Pem`].
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path, "client key")?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::Pem {
        what: "client key",
        path: path.to_owned(),
        kind: "private key",
        why: e.to_string(),
    })
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|io| TlsError::Read {
        what,
        path: path.to_owned(),
        io,
    })
}

/// A rustls error in words for a person: what about the peer's certificate was refused.
pub fn describe(err: &rustls::Error) -> String {
    match err {
        rustls::Error::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer => {
                "the server's certificate is not signed by a trusted authority (unknown issuer: \
                 is the CA file the right one?)"
                    .to_owned()
            }
            CertificateError::NotValidForNameContext {
                expected,
                presented,
            } => {
                let names: Vec<&str> = presented.iter().map(|p| presented_name(p)).collect();
                format!(
                    "the server's certificate is not valid for the host name connected to, {} (it \
                     names {})",
                    expected.to_str(),
                    if names.is_empty() {
                        "no host".to_owned()
                    } else {
                        names.join(", ")
                    }
                )
            }
            CertificateError::NotValidForName => {
                "the server's certificate is not valid for the host name connected to".to_owned()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the server's certificate has expired".to_owned()
            }
            other => format!("the server's certificate was refused: {other:?}"),
        },
        // The server's answer to our client certificate (mutual TLS).
        rustls::Error::AlertReceived(AlertDescription::CertificateRequired) => {
            "the server requires a client certificate, and none was presented".to_owned()
        }
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::CertificateExpired
            | AlertDescription::AccessDenied),
        ) => format!(
            "the server refused the client certificate ({alert:?}: is it signed by an authority \
             the server trusts, and still valid?)"
        ),
        other => other.to_string(),
    }
}

/// A name as rustls lists a certificate's names (`DnsName("db.test")`, `IpAddress(10.0.0.1)`),
/// without the wrapping.
fn presented_name(presented: &str) -> &str {
    presented
        .strip_prefix("DnsName(\"")
        .and_then(|n| n.strip_suffix("\")"))
        .or_else(|| {
            presented
                .strip_prefix("IpAddress(")
                .and_then(|n| n.strip_suffix(')'))
        })
        .unwrap_or(presented)
}

/// Walks `err` and its sources for a rustls error and words it with [`describe`]; otherwise
/// the error's own text. For errors from connection libraries that wrap the TLS failure.
pub fn explain(err: &(dyn std::error::Error + 'static)) -> String {
    find(err).map_or_else(|| err.to_string(), describe)
}

/// The rustls error in `err` or its sources, if there is one: also inside `std::io::Error`s,
/// however deeply nested (an I/O error's `source` skips the error it wraps).
pub fn find<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            cur = Some(inner);
            continue;
        }
        // Some clients (the redis crate) keep an I/O error as an `Arc<dyn Error>`, whose
        // `source` skips the error itself: look inside.
        if let Some(inner) = e.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>() {
            cur = Some(&**inner);
            continue;
        }
        cur = e.source();
    }
    None
}

/// `verify-ca`: the chain is checked, the name is not.
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl fmt::Debug for ChainOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChainOnly")
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `sslmode=require`: any certificate, but the handshake's signatures are still checked.
struct EncryptOnly(WebPkiSupportedAlgorithms);

impl fmt::Debug for EncryptOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EncryptOnly")
    }
}

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
