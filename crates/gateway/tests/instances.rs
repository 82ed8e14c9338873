//! Instances: a second process under a live gateway's instance name is refused, naming it, and
//! frees nothing; a stopped gateway's name is free again at once; a crashed one's once its
//! liveness lease lapses.

mod support;

use std::time::{Duration, Instant, SystemTime};

use idemgate_core::store::ClaimStore;
use idemgate_core::{HistoryOutcome, Key};
use idemgate_gateway::StartError;
use support::{Behaviour, Downstream, Gateway, sign};

fn config(down: &Downstream, dir: &std::path::Path) -> String {
    format!(
        "instance = \"gw-1\"\ninstance_lease = \"3s\"\n[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = \"{}\"\nforward_timeout = \"20s\"\n[limits]\nrequest_timeout = \"25s\"\n[store]\npath = {:?}\n",
        down.url,
        dir.display().to_string()
    )
}

fn body(id: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"id": id, "object": "event"})).unwrap()
}

async fn history(dir: &std::path::Path, id: &str) -> Vec<HistoryOutcome> {
    let store = idemgate_sqlite::SqliteStore::open(dir).unwrap();
    let view = store
        .lookup(&Key::parse("stripe-live", id).unwrap())
        .await
        .unwrap();
    view.history.iter().map(|h| h.outcome).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_start_under_a_live_instance_name_is_refused_and_frees_nothing() {
    let down = Downstream::start(Behaviour::Slow(Duration::from_secs(6))).await;
    let dir = tempfile::tempdir().unwrap();
    let text = config(&down, dir.path());
    let live = Gateway::start_with(&text).await;
    // A forward in flight under the live gateway's claim.
    let b = body("evt_live");
    let signed = sign(&live, "stripe-live", "evt_live", SystemTime::now(), &b);
    let url = live.url("/hooks/stripe-live");
    let (s, bb) = (signed.clone(), b.clone());
    let sender =
        tokio::spawn(
            async move { support::send(axum::http::Method::POST, &url, s, bb.into()).await },
        );
    for _ in 0..300 {
        if !down.attempts("stripe-live:evt_live").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(down.attempts("stripe-live:evt_live"), [1]);

    // The same config started again (an operator's typo, a supervisor too eager): on SQLite,
    // the data directory's serve lock refuses it at once, naming the first process, before it
    // opens the store.
    let config = idemgate_gateway::Config::from_toml(&text).unwrap();
    let second = idemgate_gateway::open(&config).await;
    let Err(e @ StartError::DataDirInUse { .. }) = second else {
        panic!("the second start was not refused: {:?}", second.map(|_| ()));
    };
    let message = e.to_string();
    assert!(
        message.contains("is in use by another process")
            && message.contains(&format!("pid {}", std::process::id())),
        "{message}"
    );
    // Past the lock (a second gateway on the same store by another way in: the store's own
    // guard), the instance name is still refused while the first holds it.
    let started = Instant::now();
    let store = idemgate::AnyStore::open(&config.store).await.unwrap();
    let request = idemgate_core::BootRequest::new(
        config.instance_name(),
        config.instance_lease,
        "elsewhere".to_owned(),
    );
    let second = idemgate_core::Instances::register_boot(&store, &request).await;
    let Err(idemgate_core::StoreError::InstanceLive { live: holder }) = second else {
        panic!("the instance was not refused: {:?}", second.map(|_| ()));
    };
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refused once the lease was seen renewed: {:?}",
        started.elapsed()
    );
    assert_eq!(holder.holder.instance.as_str(), "gw-1");
    assert_eq!(holder.pid, std::process::id());
    let message = StartError::InstanceLive {
        live: holder.clone(),
    }
    .to_string();
    assert!(
        message.contains("instance gw-1 is held by a live process") && message.contains("pid"),
        "{message}"
    );
    // Nothing was freed: the sender's retry is in flight, never forwarded again.
    assert!(
        !history(dir.path(), "evt_live")
            .await
            .contains(&HistoryOutcome::Abandoned)
    );
    let r = live.post("/hooks/stripe-live", signed, b).await;
    assert_eq!((r.status, r.outcome()), (409, "in_flight"), "{:?}", r.body);
    let first = sender.await.unwrap().unwrap();
    assert_eq!(first.status, 200);
    assert_eq!(down.attempts("stripe-live:evt_live"), [1]);
    live.stop().await;

    // Stopped, the name is free at once.
    let started = Instant::now();
    let again = Gateway::start_with(&text).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    again.stop().await;
}

/// A boot left by a process that crashed: registered straight into the store, with a claim it
/// held and a liveness lease still running, as the crashed process left them.
async fn crashed_boot(dir: &std::path::Path, process: String) -> idemgate_core::Holder {
    use idemgate_core::{BootRequest, InstanceName, Instances};
    let store = idemgate_sqlite::SqliteStore::open(dir).unwrap();
    let boot = store
        .register_boot(&BootRequest {
            process,
            ..BootRequest::new(
                InstanceName::new("gw-1").unwrap(),
                Duration::from_secs(3),
                "a-host",
            )
        })
        .await
        .unwrap();
    let claim = idemgate_core::ClaimRequest::new(
        Key::parse("stripe-live", "evt_crash").unwrap(),
        Duration::from_secs(60),
        Duration::from_secs(3_600),
    )
    .holder(boot.holder.clone());
    let outcome = store.claim(claim).await.unwrap();
    assert!(
        matches!(outcome, idemgate_core::ClaimOutcome::Claimed { .. }),
        "{outcome:?}"
    );
    boot.holder
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_gateways_name_and_claims_are_free_at_once_on_its_machine() {
    let down = Downstream::start(Behaviour::Hang).await;
    let dir = tempfile::tempdir().unwrap();
    let text = config(&down, dir.path());
    let config = idemgate_gateway::Config::from_toml(&text).unwrap();
    // The crashed process ran here: its pid is gone (a child that exited).
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let process = format!("{}/{}/{pid}/1", kernel.trim(), ns.display());
    let holder = crashed_boot(dir.path(), process).await;
    let started = Instant::now();
    let restarted = idemgate_gateway::open(&config).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited {:?} for a lease whose process is provably gone",
        started.elapsed()
    );
    assert_eq!(restarted.holder().unwrap().boot, holder.boot + 1);
    assert_eq!(
        history(dir.path(), "evt_crash").await,
        [HistoryOutcome::Claimed, HistoryOutcome::Abandoned]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crashed_gateway_elsewhere_is_free_once_its_lease_lapses() {
    let down = Downstream::start(Behaviour::Hang).await;
    let dir = tempfile::tempdir().unwrap();
    let text = config(&down, dir.path());
    let config = idemgate_gateway::Config::from_toml(&text).unwrap();
    // Another machine's process: nothing to look up, so its lease (3 s) is waited for.
    let holder = crashed_boot(dir.path(), "another-kernel/pid:[1]/77/123".to_owned()).await;
    let started = Instant::now();
    let restarted = idemgate_gateway::open(&config).await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited > Duration::from_secs(2) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    assert_eq!(restarted.holder().unwrap().boot, holder.boot + 1);
    assert_eq!(
        history(dir.path(), "evt_crash").await,
        [HistoryOutcome::Claimed, HistoryOutcome::Abandoned]
    );
}
