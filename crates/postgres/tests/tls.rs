//! The store over TLS against private PostgreSQL 15 servers (`ssl = on` with certificates from
//! a test CA), each test its own server: a copy of one initdb (kept in `CARGO_TARGET_TMPDIR`)
//! in a temporary directory in memory where there is `/dev/shm`, started with pg_ctl. Every
//! `sslmode`, the errors for a certificate refused, client certificate authentication and channel
//! binding. The shared server on 5432 is used only to show that a URL without `sslmode` works
//! as before (whether that server offers TLS or not: prefer takes it where it is offered, and
//! falls back to plaintext against a private server without TLS).
//!
//! Without initdb (`IDEMGATE_TEST_PG_BIN`, default `/usr/lib/postgresql/15/bin`), each test skips
//! saying so; with `CI` set, it fails.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use idemgate_core::testkit::require_service;
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};
use idemgate_postgres::testing::{PrivatePg, ServerError};
use idemgate_postgres::{Expiry, PgConfig, PgError, PgStore, SslMode};
use idemgate_tls::testing::TestCa;

const WHAT_TO_INSTALL: &str = "install PostgreSQL 15's server package (initdb, pg_ctl) or set IDEMGATE_TEST_PG_BIN to its bin directory";

/// The user whose client certificate is its authentication (`cert` in pg_hba.conf).
const CERT_USER: &str = "billing";
/// The user that authenticates with SCRAM (and channel binding) over TLS.
const SCRAM_USER: &str = "scrammer";
const SCRAM_PASSWORD: &str = "correct horse";

/// A private server with `ssl = on` whose certificate names `localhost` only, signed by `ca`;
/// TCP connections without TLS are rejected. Fields drop in order: the server stops before its
/// directory goes.
struct TlsServer {
    pg: PrivatePg,
    /// The CA file that signed the server's (and the client's) certificate.
    ca: PathBuf,
    /// A CA file of another authority.
    other_ca: PathBuf,
    /// A client certificate for [`CERT_USER`], and its key.
    client_cert: PathBuf,
    client_key: PathBuf,
    _dir: tempfile::TempDir,
}

const HBA: &str = "\
local     all all                  trust
hostnossl all all      127.0.0.1/32 reject
hostssl   all billing  127.0.0.1/32 cert
hostssl   all scrammer 127.0.0.1/32 scram-sha-256
hostssl   all all      127.0.0.1/32 trust
";

impl TlsServer {
    /// Starts one, or `None` (a skip; a failure under CI) when PostgreSQL is not installed.
    async fn start() -> Option<Self> {
        let dir = cluster_dir();
        let pg = private(dir.path()).await?;
        let ca = TestCa::new("idemgate test CA");
        let server = ca.issue(&["localhost"]);
        let cert = pg.install("server.crt", &server.cert_pem).unwrap();
        let key = pg.install("server.key", &server.key_pem).unwrap();
        let root = pg.install("clients-ca.crt", &ca.cert_pem()).unwrap();
        pg.configure(&format!(
            "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nssl_ca_file = '{}'",
            cert.display(),
            key.display(),
            root.display()
        ))
        .unwrap();
        pg.set_hba(HBA).unwrap();
        pg.start().await.expect("start the TLS server");
        pg.psql(&format!(
            "CREATE ROLE {CERT_USER} LOGIN; \
             CREATE ROLE {SCRAM_USER} LOGIN PASSWORD '{SCRAM_PASSWORD}'; \
             GRANT CREATE ON DATABASE postgres TO {CERT_USER}, {SCRAM_USER}"
        ))
        .await
        .unwrap();

        // The client's files beside the server's: the directory goes when the test ends.
        let (client_cert, client_key) = ca.issue(&[CERT_USER]).write(dir.path(), "client");
        Some(Self {
            ca: ca.write(dir.path(), "ca"),
            other_ca: TestCa::new("another CA").write(dir.path(), "other-ca"),
            client_cert,
            client_key,
            pg,
            _dir: dir,
        })
    }

    /// `postgres://{user}@{host}:{port}/postgres?{params}`; `localhost` always means 127.0.0.1
    /// (the server listens there only).
    fn config(&self, user: &str, host: &str, params: &str) -> PgConfig {
        let mut cfg = PgConfig::new(format!(
            "postgres://{user}@{host}:{}/postgres?hostaddr=127.0.0.1&{params}",
            self.pg.port()
        ));
        cfg.pool_size = std::num::NonZeroUsize::new(2).unwrap();
        cfg
    }

    fn trusting(&self, host: &str, sslmode: &str) -> PgConfig {
        self.config(
            "idemgate",
            host,
            &format!("sslmode={sslmode}&sslrootcert={}", self.ca.display()),
        )
    }
}

/// A directory for a private cluster, removed when dropped: in memory (`/dev/shm`) where there
/// is one, since writing a cluster's 40 MB to disk takes seconds on a slow one.
fn cluster_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let parent = if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    };
    tempfile::Builder::new()
        .prefix("idemgate-tls-test-")
        .tempdir_in(parent)
        .expect("a temporary directory")
}

/// A private cluster in `dir` (initdb'd, not started), or `None` (a skip; a failure under CI)
/// when PostgreSQL is not installed.
async fn private(dir: &std::path::Path) -> Option<PrivatePg> {
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    match PrivatePg::init_cached(&PrivatePg::bin_dir(), dir, "idemgate", cache).await {
        Err(e @ ServerError::NoBinaries { .. }) => require_service(Err(e), WHAT_TO_INSTALL),
        other => Some(other.expect("initdb")),
    }
}

/// One claim through the store, which must be the first of its key.
async fn claims(store: &PgStore) {
    let key = Key::parse("tls", "evt_1").unwrap();
    let outcome = store
        .claim(ClaimRequest::new(
            key,
            Duration::from_secs(60),
            Duration::from_secs(3_600),
        ))
        .await
        .expect("claim over TLS");
    assert!(
        matches!(outcome, ClaimOutcome::Claimed { .. }),
        "{outcome:?}"
    );
}

/// Whether a connection made with `cfg` is encrypted, as the server sees it.
async fn encrypted(cfg: &PgConfig) -> bool {
    let (client, conn) = cfg
        .connection_config()
        .unwrap()
        .connect(cfg.tls_connector().unwrap())
        .await
        .expect("connect");
    tokio::spawn(conn);
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// An error with its causes, as the CLI and the gateway print it.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

#[tokio::test]
async fn verify_full_with_the_right_ca_connects_and_claims() {
    let Some(server) = TlsServer::start().await else {
        return;
    };
    let cfg = server.trusting("localhost", "verify-full");
    assert_eq!(cfg.sslmode().unwrap(), SslMode::VerifyFull);
    assert!(encrypted(&cfg).await);
    // The pool's connections and the migration's alike.
    let store = PgStore::connect(cfg).await.expect("connect over TLS");
    claims(&store).await;
}

#[tokio::test]
async fn the_same_settings_from_the_store_section_work_as_from_the_url() {
    let Some(server) = TlsServer::start().await else {
        return;
    };
    let mut cfg = server.config("idemgate", "localhost", "");
    cfg.tls.sslmode = Some(SslMode::VerifyFull);
    cfg.tls.ca_file = Some(server.ca.clone());
    assert!(encrypted(&cfg).await);
    let store = PgStore::connect(cfg).await.expect("connect over TLS");
    claims(&store).await;
}

#[tokio::test]
async fn verify_full_with_a_wrong_ca_names_the_unknown_issuer() {
    let Some(server) = TlsServer::start().await else {
        return;
    };
    let cfg = server.config(
        "idemgate",
        "localhost",
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            server.other_ca.display()
        ),
    );
    let err = PgStore::connect(cfg).await.unwrap_err();
    assert!(matches!(err, PgError::Tls { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("PostgreSQL"), "{text}");
    assert!(
        text.contains(&format!("localhost:{}", server.pg.port())),
        "names the host: {text}"
    );
    assert!(text.contains("sslmode=verify-full"), "{text}");
    assert!(text.contains("unknown issuer"), "{text}");
}

#[tokio::test]
async fn verify_full_refuses_a_host_name_the_certificate_lacks_and_verify_ca_accepts_it() {
    let Some(server) = TlsServer::start().await else {
        return;
    };
    // The certificate names localhost; 127.0.0.1 is the same server under another name.
    let err = PgStore::connect(server.trusting("127.0.0.1", "verify-full"))
        .await
        .unwrap_err();
    assert!(matches!(err, PgError::Tls { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("not valid for the host name") && text.contains("127.0.0.1"),
        "{text}"
    );

    // verify-ca checks the chain only.
    let cfg = server.trusting("127.0.0.1", "verify-ca");
    assert!(encrypted(&cfg).await);
    claims(&PgStore::connect(cfg).await.expect("verify-ca")).await;
    // And a wrong CA is still refused by it.
    let cfg = server.config(
        "idemgate",
        "127.0.0.1",
        &format!(
            "sslmode=verify-ca&sslrootcert={}",
            server.other_ca.display()
        ),
    );
    let err = PgStore::connect(cfg).await.unwrap_err();
    assert!(err.to_string().contains("unknown issuer"), "{err}");
}

#[tokio::test]
async fn require_without_a_ca_encrypts_without_checking() {
    let Some(server) = TlsServer::start().await else {
        return;
    };
    // No CA file: any certificate, any name.
    let cfg = server.config("idemgate", "127.0.0.1", "sslmode=require");
    assert!(encrypted(&cfg).await);
    claims(&PgStore::connect(cfg).await.expect("require")).await;
    // prefer takes TLS where it is offered.
    let cfg = server.config("idemgate", "127.0.0.1", "");
    assert!(encrypted(&cfg).await);
    // require with a CA file checks the chain, as libpq does.
    let cfg = server.config(
        "idemgate",
        "127.0.0.1",
        &format!("sslmode=require&sslrootcert={}", server.other_ca.display()),
    );
    let err = PgStore::connect(cfg).await.unwrap_err();
    assert!(err.to_string().contains("unknown issuer"), "{err}");
}

#[tokio::test]
async fn disable_is_refused_by_a_server_that_insists_on_tls() {
    let Some(server) = TlsServer::start().await else {
        return;
    };
    let cfg = server.config("idemgate", "127.0.0.1", "sslmode=disable");
    let err = PgStore::connect(cfg).await.unwrap_err();
    assert!(matches!(err, PgError::Connect { .. }), "{err:?}");
    // The server's reason is in the chain, not lost.
    let text = chain(&err);
    assert!(
        text.contains("pg_hba.conf rejects connection") && text.contains("no encryption"),
        "{text}"
    );
}

#[tokio::test]
async fn client_certificate_authenticates_and_its_absence_is_refused() {
    let Some(server) = TlsServer::start().await else {
        return;
    };
    let with_cert = server.config(
        CERT_USER,
        "localhost",
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            server.ca.display(),
            server.client_cert.display(),
            server.client_key.display()
        ),
    );
    let store = PgStore::connect(with_cert).await.expect("cert auth");
    claims(&store).await;

    let without = server.trusting("localhost", "verify-full");
    let mut without_cert = without.clone();
    without_cert.url = without.url.replace("idemgate@", &format!("{CERT_USER}@"));
    let err = PgStore::connect(without_cert).await.unwrap_err();
    assert!(matches!(err, PgError::Connect { .. }), "{err:?}");
    let text = chain(&err);
    assert!(text.contains("certificate"), "{text}");
}

#[tokio::test]
async fn channel_binding_ties_scram_to_the_tls_session() {
    let Some(server) = TlsServer::start().await else {
        return;
    };
    // channel_binding=require: the password exchange must be SCRAM-SHA-256-PLUS, bound to this
    // session's server certificate (tls-server-end-point), or the connection is refused.
    let cfg = server.config(
        SCRAM_USER,
        "localhost",
        &format!(
            "sslmode=verify-full&sslrootcert={}&channel_binding=require&password={}",
            server.ca.display(),
            SCRAM_PASSWORD.replace(' ', "%20")
        ),
    );
    assert!(encrypted(&cfg).await);
    claims(
        &PgStore::connect(cfg.clone())
            .await
            .expect("scram with channel binding"),
    )
    .await;
    let wrong = PgConfig {
        url: cfg.url.replace("correct%20horse", "wrong"),
        ..cfg
    };
    assert!(PgStore::connect(wrong).await.is_err(), "a wrong password");
}

#[tokio::test]
async fn require_against_a_server_without_tls_says_so() {
    let dir = cluster_dir();
    let Some(pg) = private(dir.path()).await else {
        return;
    };
    pg.start().await.expect("start");
    let cfg = PgConfig::new(format!("{}?sslmode=require", pg.url()));
    let err = PgStore::connect(cfg).await.unwrap_err();
    assert!(matches!(err, PgError::Tls { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{}", pg.port()))
            && text.contains("sslmode=require")
            && text.contains("server does not support TLS"),
        "{text}"
    );
    // prefer falls back to plaintext there.
    let cfg = PgConfig::new(pg.url());
    assert!(!encrypted(&cfg).await);
}

#[tokio::test]
async fn prefer_against_the_shared_server_still_works() {
    // The URL every existing configuration has: no sslmode, so prefer.
    let (cfg, _guard) = common::config(Expiry::batched());
    assert_eq!(cfg.sslmode().unwrap(), SslMode::Prefer);
    let Some(store) = common::connect(cfg.clone()).await else {
        return;
    };
    claims(&store).await;
    // Said in the settings, the same.
    let mut explicit = cfg;
    explicit.tls.sslmode = Some(SslMode::Prefer);
    PgStore::connect(explicit).await.expect("prefer, said");
}

#[tokio::test]
async fn a_refused_connection_shows_its_cause() {
    // A port nothing listens on.
    let port = idemgate_postgres::testing::free_port().unwrap();
    let cfg = PgConfig::new(format!("postgres://idemgate@127.0.0.1:{port}/postgres"));
    let err = PgStore::connect(cfg).await.unwrap_err();
    assert!(matches!(err, PgError::Connect { .. }), "{err:?}");
    let text = chain(&err);
    assert!(
        text.starts_with(&format!(
            "cannot connect to PostgreSQL at 127.0.0.1:{port}/postgres: "
        )) && text.to_lowercase().contains("connection refused"),
        "{text}"
    );
}
