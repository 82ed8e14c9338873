//! A certificate authority made on the spot, and server and client certificates it signs, for
//! tests that start their own TLS servers (PostgreSQL with `ssl = on`, `redis-server
//! --tls-port`, an HTTPS downstream).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

/// A certificate and its private key, in PEM.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl Pair {
    /// Writes `{stem}.crt` and `{stem}.key` into `dir` (the key readable by its owner only, as
    /// PostgreSQL insists) and returns both paths.
    ///
    /// # Panics
    /// When the files cannot be written: this is for tests.
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write the test certificate");
        std::fs::write(&key, &self.key_pem).expect("write the test key");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
                .expect("restrict the test key");
        }
        (cert, key)
    }
}

/// A self-signed certificate authority.
#[derive(Debug)]
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new authority whose certificate's common name is `name`.
    ///
    /// # Panics
    /// When rcgen cannot make it: this is for tests.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("self-sign the CA");
        Self { issuer }
    }

    /// The authority's certificate, in PEM: what a client trusts.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the authority's certificate to `dir/{stem}.crt` and returns the path.
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn write(&self, dir: &Path, stem: &str) -> PathBuf {
        let path = dir.join(format!("{stem}.crt"));
        std::fs::write(&path, self.cert_pem()).expect("write the test CA");
        path
    }

    /// A certificate for `names` (host names or IP addresses, as subject alternative names),
    /// signed by this authority; usable by a server and by a client.
    ///
    /// # Panics
    /// When a name cannot go in a certificate, or rcgen cannot sign.
    pub fn issue(&self, names: &[&str]) -> Pair {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("certificate names");
        if let Some(first) = names.first() {
            params
                .distinguished_name
                .push(DnType::CommonName, first.as_str());
        }
        let key = KeyPair::generate().expect("certificate key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("sign the certificate");
        Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}
