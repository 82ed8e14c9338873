//! [`MakeRustls`]: tokio-postgres's TLS over tokio-rustls (rustls with *ring*), for the pool and
//! the migration connection alike; with `tls-server-end-point` channel binding, so that
//! `SCRAM-SHA-256-PLUS` ties the password exchange to the TLS session.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use idemgate_tls::rustls::ClientConfig;
use idemgate_tls::rustls::pki_types::{InvalidDnsNameError, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use x509_cert::Certificate;
use x509_cert::der::Decode as _;
use x509_cert::der::asn1::ObjectIdentifier;

/// The ALPN protocol PostgreSQL 17 expects (and requires with `sslnegotiation=direct`); earlier
/// servers ignore it.
const ALPN: &[u8] = b"postgresql";

/// Makes TLS connectors for tokio-postgres from one rustls configuration. Cloning is cheap.
#[derive(Clone)]
pub struct MakeRustls {
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for MakeRustls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MakeRustls").finish_non_exhaustive()
    }
}

impl MakeRustls {
    /// On `config` (ALPN set to `postgresql`).
    pub fn new(mut config: ClientConfig) -> Self {
        config.alpn_protocols = vec![ALPN.to_vec()];
        Self {
            config: Arc::new(config),
        }
    }
}

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnect, InvalidDnsNameError> {
        // A host name or an IP address, checked against the certificate's names.
        let name = ServerName::try_from(host)?.to_owned();
        Ok(RustlsConnect {
            config: self.config.clone(),
            name,
        })
    }
}

/// One TLS handshake with the server named `name`.
#[derive(Debug)]
pub struct RustlsConnect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config);
        Box::pin(async move {
            let stream = connector.connect(self.name, stream).await?;
            Ok(RustlsStream(stream))
        })
    }
}

/// A TLS session with the server.
#[derive(Debug)]
pub struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for RustlsStream<S> {
    fn channel_binding(&self) -> ChannelBinding {
        let (_, session) = self.0.get_ref();
        session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|cert| tls_server_end_point(cert))
            .map_or_else(ChannelBinding::none, ChannelBinding::tls_server_end_point)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// RFC 5929 `tls-server-end-point`: the server certificate hashed with its signature's hash
/// (SHA-256 for MD5 and SHA-1), as PostgreSQL computes it. `None` for a signature without one
/// such hash (Ed25519, RSA-PSS): the connection then goes without channel binding, and
/// `channel_binding=require` refuses it.
fn tls_server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    use ring::digest::{SHA256, SHA384, SHA512, digest};
    let algorithm = match signature_algorithm(cert)? {
        MD5_WITH_RSA | SHA1_WITH_RSA | SHA256_WITH_RSA | ECDSA_WITH_SHA1 | ECDSA_WITH_SHA256 => {
            &SHA256
        }
        SHA384_WITH_RSA | ECDSA_WITH_SHA384 => &SHA384,
        SHA512_WITH_RSA | ECDSA_WITH_SHA512 => &SHA512,
        _ => return None,
    };
    Some(digest(algorithm, cert).as_ref().to_vec())
}

// The signature algorithms whose hash channel binding uses (RFC 5929 §4.1; PKCS#1, RFC 5758).
const MD5_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.4");
const SHA1_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.5");
const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
const SHA384_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.12");
const SHA512_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.13");
const ECDSA_WITH_SHA1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.1");
const ECDSA_WITH_SHA256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");
const ECDSA_WITH_SHA384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.3");
const ECDSA_WITH_SHA512: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.4");

/// The OID of a DER certificate's `signatureAlgorithm`, the certificate decoded by `x509-cert`.
fn signature_algorithm(cert: &[u8]) -> Option<ObjectIdentifier> {
    Certificate::from_der(cert)
        .ok()
        .map(|cert| cert.signature_algorithm.oid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idemgate_tls::rustls::pki_types::CertificateDer;
    use idemgate_tls::rustls::pki_types::pem::PemObject;

    #[test]
    fn channel_binding_hashes_the_certificate_with_its_signature_hash() {
        // The test CA signs with ECDSA P-256 and SHA-256.
        let ca = idemgate_tls::testing::TestCa::new("binding test CA");
        let pair = ca.issue(&["localhost"]);
        let cert = CertificateDer::from_pem_slice(pair.cert_pem.as_bytes()).unwrap();
        assert_eq!(
            signature_algorithm(&cert)
                .as_ref()
                .map(ObjectIdentifier::as_bytes),
            Some(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02][..])
        );
        let binding = tls_server_end_point(&cert).unwrap();
        assert_eq!(
            binding,
            ring::digest::digest(&ring::digest::SHA256, &cert)
                .as_ref()
                .to_vec()
        );
    }

    #[test]
    fn what_is_not_a_certificate_has_no_binding() {
        assert_eq!(tls_server_end_point(&[]), None);
        assert_eq!(tls_server_end_point(&[0x30, 0x05, 0x30, 0x00]), None);
        assert_eq!(
            tls_server_end_point(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]),
            None
        );
        // A certificate cut short anywhere, or with a byte after it, is not one.
        let ca = idemgate_tls::testing::TestCa::new("binding test CA");
        let pair = ca.issue(&["localhost"]);
        let cert = CertificateDer::from_pem_slice(pair.cert_pem.as_bytes()).unwrap();
        for cut in 0..cert.len() {
            assert_eq!(tls_server_end_point(&cert[..cut]), None, "{cut}");
        }
        let mut longer = cert.to_vec();
        longer.push(0);
        assert_eq!(tls_server_end_point(&longer), None);
    }
}
