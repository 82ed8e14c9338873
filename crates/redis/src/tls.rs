//! TLS for `rediss://` targets: [`RedisTls`] (the CA file and client certificate) and TLS
//! failures in words. Its files are checked against the target in `config.rs`; a Cluster's
//! failure is heard again in `conn.rs`.

use std::error::Error;
use std::path::PathBuf;

/// TLS for `rediss://` targets, beyond the URL: whom to trust, and a client certificate.
///
/// Every server certificate is checked in full, its chain and the host name the URL gives (for a
/// Cluster, the addresses the nodes announce). Which authorities are trusted is the redis
/// crate's rule: **the system's** (the operating system's store, as `rustls-native-certs` finds
/// it; `SSL_CERT_FILE` and `SSL_CERT_DIR` point elsewhere), read at every connection, **or,
/// with [`ca_file`](Self::ca_file), only that file's**, never both. `rediss://...#insecure`,
/// the redis crate's way to skip the check, is refused: a server with its own certificate
/// authority is trusted by giving that authority's certificate as the CA file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedisTls {
    /// A PEM file of the certificate authorities that sign the servers' certificates, trusted
    /// instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// A PEM certificate (chain) to present, for a server that asks for one
    /// (`tls-auth-clients yes`); needs [`client_key`](Self::client_key).
    pub client_cert: Option<PathBuf>,
    /// The PEM private key of [`client_cert`](Self::client_cert).
    pub client_key: Option<PathBuf>,
}

/// What the errors about [`RedisTls`] call its fields.
#[derive(Debug)]
pub(crate) struct TlsKeys {
    pub(crate) ca_file: &'static str,
    pub(crate) client_cert: &'static str,
    pub(crate) client_key: &'static str,
}

/// The TLS failure in `err`'s chain, in words ([`idemgate_tls::describe`]).
pub(crate) fn tls_reason(err: &(dyn Error + 'static)) -> Option<String> {
    idemgate_tls::find(err).map(idemgate_tls::describe)
}

#[cfg(test)]
mod tests {
    use idemgate_tls::testing::TestCa;

    use crate::{ConfigError, RedisConfig, TierConfig};

    use super::*;

    /// A CA file, and a client certificate and key it signed, in a temp dir.
    struct Files {
        dir: tempfile::TempDir,
        ca: PathBuf,
        cert: PathBuf,
        key: PathBuf,
    }

    fn files() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("unit CA");
        let ca_file = ca.write(dir.path(), "ca");
        let (cert, key) = ca.issue(&["client"]).write(dir.path(), "client");
        Files {
            ca: ca_file,
            cert,
            key,
            dir,
        }
    }

    fn tier(url: &str, tls: RedisTls) -> TierConfig {
        let mut cfg = TierConfig::new(url);
        cfg.tls = tls;
        cfg
    }

    #[test]
    fn rediss_reads_the_files_and_redis_reads_none() {
        let f = files();
        let tls = RedisTls {
            ca_file: Some(f.ca.clone()),
            client_cert: Some(f.cert.clone()),
            client_key: Some(f.key.clone()),
        };
        let certs = tier("rediss://h:6380", tls.clone())
            .check()
            .unwrap()
            .unwrap();
        assert_eq!(certs.root_cert, Some(std::fs::read(&f.ca).unwrap()));
        let client = certs.client_tls.expect("the client certificate");
        assert_eq!(client.client_cert, std::fs::read(&f.cert).unwrap());
        assert_eq!(client.client_key, std::fs::read(&f.key).unwrap());
        // No file: the redis crate's defaults (the system's authorities), nothing to read.
        assert!(
            tier("rediss://h:6380", RedisTls::default())
                .check()
                .unwrap()
                .is_none()
        );
        let mut cluster = RedisConfig::cluster(["rediss://a:1", "rediss://b:2"]);
        cluster.tls = tls;
        cluster.validate().unwrap();
    }

    #[test]
    fn insecure_is_refused_naming_the_key() {
        let err = tier("rediss://h:6380/#insecure", RedisTls::default())
            .validate()
            .unwrap_err();
        assert_eq!(err.key(), "store.redis.url");
        assert!(
            err.problem()
                .contains("\"h:6380/#insecure\" asks (#insecure) not to check")
                && err.problem().contains("store.redis.tls_ca_file"),
            "{err}"
        );
        let err = RedisConfig::cluster(["rediss://a:1/#insecure"])
            .validate()
            .unwrap_err();
        assert!(matches!(err, ConfigError::Insecure { .. }), "{err}");
        assert_eq!(err.key(), "redis.cluster_nodes");
    }

    #[test]
    fn a_cluster_mixing_redis_and_rediss_names_the_node() {
        let cfg = TierConfig::cluster(["rediss://a:1", "rediss://b:2", "redis://user:pw@c:3"]);
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            "store.redis.cluster_nodes: node c:3 is redis:// but a:1 is rediss://: a Cluster's \
             nodes are all rediss:// (TLS) or none is"
        );
        let cfg = RedisConfig::cluster(["redis://a:1", "rediss://b:2"]);
        let err = cfg.validate().unwrap_err();
        assert_eq!(err.key(), "redis.cluster_nodes");
        assert!(
            err.problem().starts_with("node a:1 is redis:// but b:2"),
            "{err}"
        );
    }

    #[test]
    fn tls_files_need_a_rediss_target() {
        let f = files();
        let tls = RedisTls {
            ca_file: Some(f.ca.clone()),
            ..RedisTls::default()
        };
        let err = tier("redis://h:6379", tls).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "store.redis.tls_ca_file: set, but store.redis.url is not a rediss:// URL, so nothing \
             would use it (rediss:// connects over TLS)"
        );
        let tls = RedisTls {
            client_cert: Some(f.cert.clone()),
            client_key: Some(f.key.clone()),
            ..RedisTls::default()
        };
        let mut cfg = RedisConfig::new("redis://h:6379");
        cfg.tls = tls;
        assert_eq!(cfg.validate().unwrap_err().key(), "redis.tls.client_cert");
    }

    #[test]
    fn a_ca_file_that_is_missing_or_holds_no_certificate_names_the_key_and_the_file() {
        let f = files();
        let missing = f.dir.path().join("nope.pem");
        let err = tier(
            "rediss://h",
            RedisTls {
                ca_file: Some(missing.clone()),
                ..RedisTls::default()
            },
        )
        .validate()
        .unwrap_err();
        assert_eq!(err.key(), "store.redis.tls_ca_file");
        assert!(
            err.problem()
                .starts_with(&format!("cannot read the CA file {}", missing.display())),
            "{err}"
        );
        // A key is not a certificate.
        let err = tier(
            "rediss://h",
            RedisTls {
                ca_file: Some(f.key.clone()),
                ..RedisTls::default()
            },
        )
        .validate()
        .unwrap_err();
        assert_eq!(err.key(), "store.redis.tls_ca_file");
        assert_eq!(
            err.problem(),
            format!(
                "the CA file {} holds no usable PEM certificate: no \"BEGIN CERTIFICATE\" block",
                f.key.display()
            )
        );
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_they_must_match() {
        let f = files();
        let half = |cert: bool| RedisTls {
            client_cert: cert.then(|| f.cert.clone()),
            client_key: (!cert).then(|| f.key.clone()),
            ..RedisTls::default()
        };
        let err = tier("rediss://h", half(true)).validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "store.redis.tls_client_key: required with store.redis.tls_client_cert (a client \
             certificate is a certificate and its key)"
        );
        let err = tier("rediss://h", half(false)).validate().unwrap_err();
        assert_eq!(err.key(), "store.redis.tls_client_cert");
        // The key file holds no key.
        let err = tier(
            "rediss://h",
            RedisTls {
                client_cert: Some(f.cert.clone()),
                client_key: Some(f.ca.clone()),
                ..RedisTls::default()
            },
        )
        .validate()
        .unwrap_err();
        assert_eq!(err.key(), "store.redis.tls_client_key");
        assert!(err.problem().contains(&f.ca.display().to_string()), "{err}");
        // Another certificate's key.
        let (_, other_key) = TestCa::new("other")
            .issue(&["x"])
            .write(f.dir.path(), "other");
        let err = tier(
            "rediss://h",
            RedisTls {
                client_cert: Some(f.cert.clone()),
                client_key: Some(other_key),
                ..RedisTls::default()
            },
        )
        .validate()
        .unwrap_err();
        assert_eq!(err.key(), "store.redis.tls_client_cert");
        assert!(
            err.problem().starts_with(&format!(
                "the client certificate {} cannot be used with its key",
                f.cert.display()
            )),
            "{err}"
        );
    }
}
