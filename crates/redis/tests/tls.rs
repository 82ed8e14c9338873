//! Redis over TLS (`rediss://`) on private redis-servers that serve TLS only (`--port 0
//! --tls-port ...`), on free loopback ports, with certificates made on the spot
//! (`idemgate_tls::testing::TestCa`): store mode and the tier with the CA file; the wrong
//! authority, a certificate for another host, no CA file (the system's authorities); a server
//! that asks for a client certificate, with and without one; and a 3-master Cluster whose nodes
//! and bus speak TLS only.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use common::{ServerTls, TestCluster, TestServer, WHAT_TO_INSTALL, redis_server_available};
use idemgate_core::testkit::require_service;
use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key, MemoryStore};
use idemgate_redis::{RedisConfig, RedisError, RedisStore, RedisTls, TierConfig, TieredStore};
use idemgate_tls::testing::TestCa;

/// An authority, a server certificate it signed and a client certificate it signed, in a
/// directory removed on drop.
#[derive(Debug)]
struct Pki {
    dir: tempfile::TempDir,
    tls: ServerTls,
}

impl Pki {
    /// The server's certificate names `names`; `auth_clients` makes the server ask clients for
    /// a certificate.
    fn new(names: &[&str], auth_clients: bool) -> Self {
        let dir = tempfile::tempdir().expect("a temp dir for the certificates");
        let ca = TestCa::new("idemgate test CA");
        let ca_file = ca.write(dir.path(), "ca");
        let (cert_file, key_file) = ca.issue(names).write(dir.path(), "server");
        let (client_cert, client_key) = ca.issue(&["idemgate-client"]).write(dir.path(), "client");
        Self {
            dir,
            tls: ServerTls {
                ca_file,
                cert_file,
                key_file,
                auth_clients,
                host: names[0].to_owned(),
                client_cert,
                client_key,
            },
        }
    }

    /// A redis-server with these certificates; `None` (skip) when redis-server cannot run here
    /// outside CI.
    fn server(&self) -> Option<TestServer> {
        require_service(redis_server_available(), WHAT_TO_INSTALL)?;
        Some(TestServer::start_tls(&self.tls, &[]).expect("start a TLS redis-server"))
    }

    /// Trusting this authority, presenting no certificate.
    fn trusting(&self) -> RedisTls {
        RedisTls {
            ca_file: Some(self.tls.ca_file.clone()),
            ..RedisTls::default()
        }
    }

    /// Trusting this authority and presenting the client certificate.
    fn with_client_cert(&self) -> RedisTls {
        RedisTls {
            client_cert: Some(self.tls.client_cert.clone()),
            client_key: Some(self.tls.client_key.clone()),
            ..self.trusting()
        }
    }

    /// The certificate of another authority, which signed nothing here.
    fn other_ca(&self) -> PathBuf {
        TestCa::new("another CA").write(self.dir.path(), "other-ca")
    }
}

fn store_config(url: String, tls: RedisTls) -> RedisConfig {
    let mut cfg = RedisConfig::new(url);
    cfg.key_prefix = common::unique_prefix();
    cfg.tls = tls;
    cfg.connect_timeout = Duration::from_secs(2);
    cfg
}

fn claim_request(id: &str) -> ClaimRequest {
    let key = Key::parse("tls", id).unwrap();
    ClaimRequest::new(key, Duration::from_secs(60), Duration::from_secs(600))
}

/// The TLS error a connection with `cfg` fails with: its target and its reason.
async fn tls_error(cfg: RedisConfig) -> (String, String, String) {
    match RedisStore::connect(cfg).await {
        Err(e @ RedisError::Tls { .. }) => {
            let text = e.to_string();
            let RedisError::Tls { target, reason, .. } = e else {
                unreachable!()
            };
            (target, reason, text)
        }
        Err(other) => panic!("expected a TLS error, got {other:?}"),
        Ok(_) => panic!("connected, though TLS should have failed"),
    }
}

/// Store mode over `rediss://` with the server's authority as the CA file: a claim is claimed,
/// then in flight, and the record is on the TLS server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_mode_claims_over_tls_with_the_ca_file() {
    let pki = Pki::new(&["127.0.0.1", "localhost"], false);
    let Some(server) = pki.server() else {
        return;
    };
    let cfg = store_config(server.url(), pki.trusting());
    let prefix = cfg.key_prefix.clone();
    let store = RedisStore::connect(cfg).await.expect("connect over TLS");
    let first = store.claim(claim_request("evt-1")).await.unwrap();
    assert!(matches!(first, ClaimOutcome::Claimed { .. }), "{first:?}");
    let again = store.claim(claim_request("evt-1")).await.unwrap();
    assert!(matches!(again, ClaimOutcome::InFlight { .. }), "{again:?}");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut server.sync_conn())
        .unwrap();
    assert!(
        keys.iter().any(|k| k.contains("{tls/evt-1}")),
        "the event's key is on the TLS server: {keys:?}"
    );
}

/// The tier over `rediss://`: the first duplicate fills the cache, the next is answered from
/// Redis; its health check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_answers_duplicates_over_tls() {
    let pki = Pki::new(&["127.0.0.1", "localhost"], false);
    let Some(server) = pki.server() else {
        return;
    };
    let mut cfg = TierConfig::new(server.url());
    cfg.key_prefix = common::unique_prefix();
    cfg.tls = pki.trusting();
    cfg.connect_timeout = Duration::from_secs(2);
    cfg.response_timeout = Duration::from_secs(2);
    let tier = TieredStore::new(MemoryStore::new(), cfg).expect("tier config");
    tier.ping_tier().await.expect("PING over TLS");
    let ClaimOutcome::Claimed { token, .. } = tier.claim(claim_request("evt-t")).await.unwrap()
    else {
        panic!("the first claim is claimed");
    };
    tier.complete(&token).await.unwrap();
    for _ in 0..2 {
        let dup = tier.claim(claim_request("evt-t")).await.unwrap();
        assert!(matches!(dup, ClaimOutcome::Duplicate { .. }), "{dup:?}");
    }
    let c = tier.counters();
    assert_eq!((c.hits, c.errors), (1, 0), "{c:?}");
}

/// A server whose certificate another authority signed: the error names Redis, the target and
/// the unknown issuer, in store mode and in the tier's health check (whose claims still go to
/// the inner store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_ca_fails_naming_the_unknown_issuer() {
    let pki = Pki::new(&["127.0.0.1", "localhost"], false);
    let Some(server) = pki.server() else {
        return;
    };
    let wrong = RedisTls {
        ca_file: Some(pki.other_ca()),
        ..RedisTls::default()
    };
    let target = format!("127.0.0.1:{}", server.port);
    let (named, reason, text) = tls_error(store_config(server.url(), wrong.clone())).await;
    assert_eq!(named, target);
    assert!(reason.contains("unknown issuer"), "{reason}");
    assert!(
        text.starts_with(&format!("TLS with Redis at {target} failed: ")),
        "{text}"
    );

    let mut cfg = TierConfig::new(server.url());
    cfg.tls = wrong;
    let tier = TieredStore::new(MemoryStore::new(), cfg).expect("tier config");
    match tier.ping_tier().await {
        Err(RedisError::Tls {
            target: t, reason, ..
        }) => {
            assert_eq!(t, target);
            assert!(reason.contains("unknown issuer"), "{reason}");
        }
        other => panic!("expected a TLS error, got {other:?}"),
    }
    let outcome = tier.claim(claim_request("evt-w")).await.unwrap();
    assert!(
        matches!(outcome, ClaimOutcome::Claimed { .. }),
        "{outcome:?}"
    );
    assert!(tier.counters().errors >= 1);
}

/// Without a CA file the system's authorities are trusted, and only they: the test authority is
/// not one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ca_file_only_the_system_authorities_are_trusted() {
    let pki = Pki::new(&["127.0.0.1", "localhost"], false);
    let Some(server) = pki.server() else {
        return;
    };
    let (_, reason, _) = tls_error(store_config(server.url(), RedisTls::default())).await;
    assert!(reason.contains("unknown issuer"), "{reason}");
}

/// A certificate for `localhost` only, reached as 127.0.0.1: refused, naming the address
/// connected to and the names the certificate holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_not_in_the_certificate_fails_naming_it() {
    let pki = Pki::new(&["localhost"], false);
    let Some(server) = pki.server() else {
        return;
    };
    let (target, reason, text) = tls_error(store_config(server.url(), pki.trusting())).await;
    assert_eq!(target, format!("127.0.0.1:{}", server.port));
    assert!(reason.contains("not valid for the host name"), "{reason}");
    assert!(reason.contains("localhost"), "the names it holds: {reason}");
    assert!(text.contains(&target), "{text}");
}

/// `--tls-auth-clients yes`: the client certificate gets in; without one, or with one another
/// authority signed, the server refuses the connection, and the error says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_asking_for_a_client_certificate() {
    let pki = Pki::new(&["127.0.0.1", "localhost"], true);
    let Some(server) = pki.server() else {
        return;
    };
    let store = RedisStore::connect(store_config(server.url(), pki.with_client_cert()))
        .await
        .expect("connect with the client certificate");
    let outcome = store.claim(claim_request("evt-c")).await.unwrap();
    assert!(
        matches!(outcome, ClaimOutcome::Claimed { .. }),
        "{outcome:?}"
    );

    let (_, reason, _) = tls_error(store_config(server.url(), pki.trusting())).await;
    assert!(
        reason.contains("requires a client certificate, and none was presented"),
        "{reason}"
    );

    let stranger = TestCa::new("another CA")
        .issue(&["idemgate-client"])
        .write(pki.dir.path(), "stranger");
    let foreign = RedisTls {
        client_cert: Some(stranger.0),
        client_key: Some(stranger.1),
        ..pki.trusting()
    };
    let (_, reason, _) = tls_error(store_config(server.url(), foreign)).await;
    assert!(
        reason.contains("refused the client certificate"),
        "{reason}"
    );
}

/// The TLS Cluster and its certificates, started by the first case that needs it; its servers'
/// watchdogs stop them when this process exits.
fn tls_cluster() -> Result<&'static (Pki, TestCluster), String> {
    static CLUSTER: OnceLock<Result<(Pki, TestCluster), String>> = OnceLock::new();
    CLUSTER
        .get_or_init(|| {
            redis_server_available()?;
            let pki = Pki::new(&["127.0.0.1", "localhost"], false);
            let cluster = TestCluster::start_tls(&pki.tls).expect("start a TLS cluster");
            Ok((pki, cluster))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Store mode on a Cluster whose nodes serve TLS only: claims spread over every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_mode_claims_on_a_tls_cluster() {
    let Some((pki, cluster)) = require_service(tls_cluster(), WHAT_TO_INSTALL) else {
        return;
    };
    let urls = cluster.urls();
    assert!(urls.iter().all(|u| u.starts_with("rediss://")), "{urls:?}");
    let mut cfg = RedisConfig::cluster(urls);
    cfg.key_prefix = common::unique_prefix();
    cfg.tls = pki.trusting();
    let store = RedisStore::connect(cfg)
        .await
        .expect("connect to the TLS cluster");
    for i in 0..32 {
        let outcome = store
            .claim(claim_request(&format!("evt-{i}")))
            .await
            .unwrap();
        assert!(
            matches!(outcome, ClaimOutcome::Claimed { .. }),
            "{outcome:?}"
        );
    }
    let again = store.claim(claim_request("evt-0")).await.unwrap();
    assert!(matches!(again, ClaimOutcome::InFlight { .. }), "{again:?}");
    for node in &cluster.nodes {
        let n: u64 = redis::cmd("DBSIZE").query(&mut node.sync_conn()).unwrap();
        assert!(n > 0, "node {} holds no key", node.port);
    }
}

/// The wrong CA on a Cluster: the reason is told as for one server (the Cluster client keeps
/// only its nodes' error text, so the store asks the first seed node alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_ca_on_a_cluster_names_the_unknown_issuer() {
    let Some((pki, cluster)) = require_service(tls_cluster(), WHAT_TO_INSTALL) else {
        return;
    };
    let mut cfg = RedisConfig::cluster(cluster.urls());
    cfg.tls = RedisTls {
        ca_file: Some(pki.other_ca()),
        ..RedisTls::default()
    };
    let (target, reason, _) = tls_error(cfg).await;
    assert!(target.starts_with("cluster 127.0.0.1:"), "{target}");
    assert!(reason.contains("unknown issuer"), "{reason}");
}
