//! `idemgate check` and `idemgate serve` with broker destinations: each reached, its dedup window
//! judged against what its source needs (the window audit), credentials never printed. Uses the
//! shared NATS with JetStream (`IDEMGATE_TEST_NATS`, default `nats://127.0.0.1:4222`) and the
//! shared RabbitMQ's `amq.direct` exchange (`IDEMGATE_TEST_AMQP_HOST`, default
//! `127.0.0.1:5672`, guest/guest); a stream of its own, deleted afterwards.

use std::process::Command;
use std::time::{Duration, SystemTime};

use async_nats::jetstream;

fn nats_url() -> String {
    std::env::var("IDEMGATE_TEST_NATS").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

fn amqp_host() -> String {
    std::env::var("IDEMGATE_TEST_AMQP_HOST").unwrap_or_else(|_| "127.0.0.1:5672".to_owned())
}

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env_remove("IDEMGATE_DATA_DIR")
        .env("IDEMGATE_LOG", "info")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_serve_judge_each_brokers_dedup_window() {
    let client = async_nats::connect(nats_url())
        .await
        .map_err(|e| format!("NATS at {} does not answer: {e}", nats_url()));
    let Some(client) = idemgate_core::testkit::require_service(
        client,
        "start nats-server with JetStream (nats-server -js), or set IDEMGATE_TEST_NATS",
    ) else {
        return;
    };
    let js = jetstream::new(client);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let prefix = format!("idgcheck{}x{nanos}", std::process::id());
    js.create_stream(jetstream::stream::Config {
        name: prefix.to_uppercase(),
        subjects: vec![format!("{prefix}.>")],
        duplicate_window: Duration::from_secs(120),
        storage: jetstream::stream::StorageType::Memory,
        ..Default::default()
    })
    .await
    .unwrap();
    let server = nats_url().trim_start_matches("nats://").to_owned();

    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, on_short_window: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "[store]\npath = {:?}\n[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_a\"]\nforward_url = \"nats://app:s3cret@{server}/{prefix}.stripe\"\n{on_short_window}\n[[source]]\nname = \"shop\"\nprovider = \"shopify\"\nsecrets = [\"shpss_a\"]\nforward_url = \"amqp://guest:guest@{}/%2F?exchange=amq.direct&routing_key=shop\"\n",
                dir.path().join("data").display().to_string(),
                amqp_host()
            ),
        )
        .unwrap();
        path
    };

    // warn (the default): check passes, and says what it found and what to do.
    let warn = write("warn.toml", "");
    let (code, text) = run(&["check", "--config", warn.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{text}");
    for part in [
        &format!("forward   nats://{server}/{prefix}.stripe (timeout 10s)"),
        &format!("window    stream {} dedups for 2m", prefix.to_uppercase()),
        "up to 3d after its first publish",
        "warning: source \"stripe-live\": on_short_window:",
        "--dupe-window 3d",
        "RabbitMQ keeps no dedup window",
        "warning: source \"shop\": forward_url:",
        "consumers must dedupe by message_id",
        "\nok",
    ] {
        assert!(text.contains(part), "{part:?} missing from:\n{text}");
    }
    assert!(
        !text.contains("s3cret") && !text.contains("guest:guest"),
        "credentials in:\n{text}"
    );
    assert!(!dir.path().join("data").exists(), "check created nothing");

    // refuse: a problem for check, and serve stops before listening.
    let refuse = write("refuse.toml", "on_short_window = \"refuse\"");
    let (code, text) = run(&["check", "--config", refuse.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("problem: source \"stripe-live\": on_short_window:"),
        "{text}"
    );
    let (code, text) = run(&[
        "serve",
        "--config",
        refuse.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("source \"stripe-live\": on_short_window: is \"refuse\""),
        "{text}"
    );
    assert!(!text.contains("listening"), "{text}");
    assert!(!text.contains("s3cret"), "credentials in:\n{text}");
    js.delete_stream(prefix.to_uppercase()).await.unwrap();
}
