//! Real rustls handshakes in memory against a server certificate from a test CA: what each
//! [`Verify`] accepts and refuses, and the errors for files that cannot be used.

use std::sync::Arc;

use idemgate_tls::rustls::pki_types::ServerName;
use idemgate_tls::rustls::{ClientConnection, ServerConfig, ServerConnection};
use idemgate_tls::testing::TestCa;
use idemgate_tls::{ClientTls, TlsError, Verify, describe, read_certs, read_key};

/// Runs a handshake between `client` and a server presenting a certificate for `cert_names`
/// signed by `ca`; `Ok` when both sides finish.
fn handshake(
    client: &ClientTls,
    ca: &TestCa,
    cert_names: &[&str],
    host: &str,
) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.issue(cert_names).write(dir.path(), "server");
    let server = ServerConfig::builder_with_provider(idemgate_tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            read_certs(&cert, "server").unwrap(),
            read_key(&key).unwrap(),
        )
        .unwrap();
    let config = client.config().map_err(|e| e.to_string())?;
    let name = ServerName::try_from(host.to_owned()).unwrap();
    let mut c = ClientConnection::new(Arc::new(config), name).unwrap();
    let mut s = ServerConnection::new(Arc::new(server)).unwrap();
    for _ in 0..10 {
        let mut buf = Vec::new();
        while c.wants_write() {
            c.write_tls(&mut buf).unwrap();
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).unwrap();
        }
        if let Err(e) = s.process_new_packets() {
            return Err(format!("server: {e}"));
        }
        let mut buf = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut buf).unwrap();
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
        }
        if let Err(e) = c.process_new_packets() {
            return Err(describe(&e));
        }
        if !c.is_handshaking() && !s.is_handshaking() {
            return Ok(());
        }
    }
    Err("the handshake did not finish".to_owned())
}

fn trusting(ca: &TestCa, dir: &std::path::Path, verify: Verify) -> ClientTls {
    ClientTls {
        ca_file: Some(ca.write(dir, "ca")),
        system_roots: false,
        verify,
        ..ClientTls::default()
    }
}

#[test]
fn full_verification_accepts_the_right_ca_and_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("idemgate test CA");
    let client = trusting(&ca, dir.path(), Verify::Full);
    handshake(&client, &ca, &["db.test"], "db.test").unwrap();
    handshake(&client, &ca, &["127.0.0.1"], "127.0.0.1").unwrap();

    let wrong_host = handshake(&client, &ca, &["db.test"], "other.test").unwrap_err();
    assert!(
        wrong_host.contains("not valid for the host name connected to, other.test (it names db.test)"),
        "{wrong_host}"
    );
    let wrong_ip = handshake(&client, &ca, &["db.test", "10.0.0.1"], "127.0.0.1").unwrap_err();
    assert!(
        wrong_ip.contains("127.0.0.1 (it names db.test, 10.0.0.1)"),
        "{wrong_ip}"
    );

    let stranger = TestCa::new("another CA");
    let wrong_ca = handshake(&client, &stranger, &["db.test"], "db.test").unwrap_err();
    assert!(
        wrong_ca.contains("not signed by a trusted authority"),
        "{wrong_ca}"
    );
}

#[test]
fn chain_verification_ignores_the_name_but_not_the_issuer() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("idemgate test CA");
    let client = trusting(&ca, dir.path(), Verify::Chain);
    handshake(&client, &ca, &["db.test"], "other.test").unwrap();
    let stranger = TestCa::new("another CA");
    let err = handshake(&client, &stranger, &["db.test"], "db.test").unwrap_err();
    assert!(err.contains("unknown issuer"), "{err}");
}

#[test]
fn encrypt_only_takes_any_certificate() {
    let stranger = TestCa::new("anyone");
    let client = ClientTls {
        system_roots: false,
        verify: Verify::EncryptOnly,
        ..ClientTls::default()
    };
    handshake(&client, &stranger, &["db.test"], "elsewhere.test").unwrap();
}

#[test]
fn unusable_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = ClientTls::with_ca(dir.path().join("nope.pem"));
    let err = missing.config().unwrap_err();
    assert!(
        matches!(
            err,
            TlsError::Read {
                what: "CA file",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("nope.pem"), "{err}");

    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let err = ClientTls::with_ca(&junk).config().unwrap_err();
    assert!(
        err.to_string().contains("holds no usable PEM certificate"),
        "{err}"
    );

    let none = ClientTls {
        system_roots: false,
        ..ClientTls::default()
    };
    assert!(matches!(none.config().unwrap_err(), TlsError::NoRoots));

    let ca = TestCa::new("ca");
    let (cert, _) = ca.issue(&["client"]).write(dir.path(), "client");
    let half = ClientTls {
        client_cert: Some(cert.clone()),
        ..trusting(&ca, dir.path(), Verify::Full)
    };
    let err = half.config().unwrap_err();
    assert!(
        err.to_string().contains("only the certificate is set"),
        "{err}"
    );

    let other_key = ca.issue(&["other"]).write(dir.path(), "other").1;
    let mismatched = ClientTls {
        client_cert: Some(cert),
        client_key: Some(other_key),
        ..trusting(&ca, dir.path(), Verify::Full)
    };
    let err = mismatched.config().unwrap_err();
    assert!(
        err.to_string().contains("cannot be used with its key"),
        "{err}"
    );
}

#[test]
fn explain_finds_the_tls_error_inside_nested_io_errors() {
    use idemgate_tls::rustls::{CertificateError, Error};
    // How an HTTP connector reports a refused handshake: tokio-rustls's I/O error, wrapped in
    // another (an I/O error's `source` skips what it wraps).
    let tls = Error::InvalidCertificate(CertificateError::UnknownIssuer);
    let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
    let outer = std::io::Error::other(inner);
    assert!(matches!(
        idemgate_tls::find(&outer),
        Some(Error::InvalidCertificate(CertificateError::UnknownIssuer))
    ));
    let worded = idemgate_tls::explain(&outer);
    assert!(worded.contains("unknown issuer"), "{worded}");

    let plain = std::io::Error::other("connection refused");
    assert!(idemgate_tls::find(&plain).is_none());
    assert_eq!(idemgate_tls::explain(&plain), "connection refused");
}
