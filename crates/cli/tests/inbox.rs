//! `idemgate inbox`, `dead-letters` and `replay` against a real SQLite store.

use std::process::{Command, Output};

use serde_json::Value;

fn idemgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env_remove("IDEMGATE_CONFIG")
        .env_remove("IDEMGATE_DATA_DIR")
        .output()
        .expect("run idemgate")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn usage(out: &Output, says: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", text(out));
    assert!(text(out).contains(says), "{}", text(out));
}

#[test]
fn captured_events_are_replayed_through_dedup_and_forced_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\npath = {:?}\n[[source]]\nname = \"shop\"\nprovider = \"stripe\"\n\
             secrets = [\"whsec_x\"]\nmode = \"inbox\"\nforward_url = \"http://127.0.0.1:9/hook\"\n\
             [[source]]\nname = \"direct\"\nprovider = \"stripe\"\nsecrets = [\"whsec_y\"]\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let file = dir.path().join("captured.jsonl");
    std::fs::write(
        &file,
        "{\"event_id\": \"evt_1\", \"body\": {\"id\": \"evt_1\"}}\n\
         {\"event_id\": \"evt_2\", \"body\": \"raw\", \"headers\": {\"content-type\": \"text/plain\"}}\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    assert!(idemgate(&["migrate", "--config", config]).status.success());

    let out = idemgate(&["replay", file, "--config", config, "--source", "shop"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("2 queued, 0 skipped"), "{}", text(&out));
    let out = idemgate(&["replay", file, "--config", config, "--source", "shop"]);
    assert!(
        text(&out).contains("0 queued, 2 skipped as duplicates"),
        "{}",
        text(&out)
    );

    usage(
        &idemgate(&[
            "replay", file, "--config", config, "--source", "shop", "--force",
        ]),
        "--force needs --reason",
    );
    let out = idemgate(&[
        "replay",
        file,
        "--config",
        config,
        "--source",
        "shop",
        "--force",
        "--reason",
        "re-run for finance",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("0 queued, 2 processed before and queued again"),
        "{}",
        text(&out)
    );

    let out = idemgate(&["inbox", "--config", config, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sources"][0]["source"], "shop");
    assert_eq!(v["sources"][0]["pending"], 4, "{v}");
    assert_eq!(
        v["sources"][0]["delivered_per_min"], 0.0,
        "nothing delivered yet: {v}"
    );
    let out = idemgate(&["inbox", "--config", config]);
    assert!(text(&out).contains("DELIVERED/MIN"), "{}", text(&out));

    let out = idemgate(&["dead-letters", "--config", config]);
    assert!(text(&out).contains("no dead letters"), "{}", text(&out));
    usage(
        &idemgate(&["replay", "--dead-letters", "--config", config]),
        "--reason is required",
    );
    let out = idemgate(&[
        "replay",
        "--dead-letters",
        "--config",
        config,
        "--reason",
        "fixed",
    ]);
    assert!(
        text(&out).contains("0 dead letters moved"),
        "{}",
        text(&out)
    );

    // Bad input: named by line, nothing queued; a source that is not an inbox is refused.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"event_id\": \"evt_9\", \"body\": 1}\nnot json\n").unwrap();
    usage(
        &idemgate(&[
            "replay",
            bad.to_str().unwrap(),
            "--config",
            config,
            "--source",
            "shop",
        ]),
        "line 2: not JSON",
    );
    let v: Value =
        serde_json::from_slice(&idemgate(&["inbox", "--config", config, "--json"]).stdout).unwrap();
    assert_eq!(v["sources"][0]["pending"], 4, "nothing half-written: {v}");
    usage(
        &idemgate(&["replay", file, "--config", config, "--source", "direct"]),
        "re-drives events through an inbox source",
    );
    usage(
        &idemgate(&["replay", file, "--config", config]),
        "needs --source",
    );
}

/// A store with three events of the inbox source `shop`: `evt_1` failed once (503) and waits
/// for a retry, `evt_2` and then `evt_3` died (a timeout; a 500).
async fn failing_inbox(dir: &std::path::Path) {
    use idemgate_core::inbox::{Failure, Inbox, QueuedItem};
    use idemgate_core::{ClaimRequest, Key, SourceName};
    use std::num::NonZeroU32;
    use std::time::Duration;
    let store = idemgate_sqlite::SqliteStore::open(dir).unwrap();
    let source = SourceName::new("shop").unwrap();
    let day = Duration::from_secs(86_400);
    for id in ["evt_1", "evt_2", "evt_3"] {
        let key = Key::parse("shop", id).unwrap();
        let item = QueuedItem {
            body: format!("{{\"id\":\"{id}\"}}").into_bytes(),
            content_type: Some("application/json".into()),
            headers: Vec::new(),
        };
        store
            .enqueue(ClaimRequest::new(key, day, day), item)
            .await
            .unwrap();
    }
    let taken = store
        .take(&source, NonZeroU32::new(10).unwrap(), day, None)
        .await
        .unwrap();
    let of = |id: &str| {
        taken
            .iter()
            .find(|t| t.key.event_id.as_str() == id)
            .unwrap()
            .item
            .clone()
    };
    let failure = |status: Option<u16>, error: &str| Failure {
        status,
        error: error.into(),
    };
    store
        .retry_later(
            of("evt_1"),
            &failure(Some(503), "downstream answered 503"),
            day,
        )
        .await
        .unwrap();
    store
        .dead_letter(of("evt_2"), &failure(None, "timed out after 10s"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store
        .dead_letter(of("evt_3"), &failure(Some(500), "downstream answered 500"))
        .await
        .unwrap();
}

#[test]
fn an_operator_sees_what_fails_and_replays_one_event_after_a_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(failing_inbox(dir.path()));
    let data = dir.path().to_str().unwrap();

    // Per source: how many items the downstream is failing, and the last error.
    let out = idemgate(&["inbox", "--data-dir", data, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let shop = &v["sources"][0];
    assert_eq!(
        (&shop["pending"], &shop["dead"], &shop["failing"]),
        (&Value::from(1), &Value::from(2), &Value::from(1)),
        "{v}"
    );
    assert_eq!(shop["last_failure"]["event_id"], "evt_3", "{v}");
    assert_eq!(shop["last_failure"]["status"], 500, "{v}");
    let out = text(&idemgate(&["inbox", "--data-dir", data]));
    assert!(out.contains("FAILING"), "{out}");
    assert!(
        out.contains("shop: downstream answered 500 (event evt_3, attempt 1"),
        "{out}"
    );

    // Every attempt on request; one event's dead letter.
    let out = text(&idemgate(&[
        "dead-letters",
        "--data-dir",
        data,
        "--attempts",
    ]));
    assert!(out.contains("evt_2") && out.contains("evt_3"), "{out}");
    assert!(
        out.contains("attempt 1 at ") && out.contains(": HTTP 500, downstream answered 500"),
        "{out}"
    );
    assert!(out.contains(": timed out after 10s"), "{out}");
    let out = idemgate(&[
        "dead-letters",
        "--data-dir",
        data,
        "--source",
        "shop",
        "--event-id",
        "evt_2",
        "--json",
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = v["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["evt_2"]);

    // A dry run lists what a replay would move, and moves nothing.
    let out = idemgate(&["replay", "--dead-letters", "--data-dir", data, "--dry-run"]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("would move 2 dead letters"), "{said}");
    assert!(
        said.contains("shop evt_2") && said.contains("shop evt_3"),
        "{said}"
    );
    let out = idemgate(&[
        "replay",
        "--dead-letters",
        "--data-dir",
        data,
        "--dry-run",
        "--source",
        "shop",
        "--event-id",
        "evt_3",
    ]);
    assert!(
        text(&out).contains("would move 1 dead letter "),
        "{}",
        text(&out)
    );
    let v: Value =
        serde_json::from_slice(&idemgate(&["inbox", "--data-dir", data, "--json"]).stdout).unwrap();
    assert_eq!(v["sources"][0]["dead"], 2, "a dry run moves nothing: {v}");

    // One event, by id; an id with no dead letter is refused, naming it.
    usage(
        &idemgate(&[
            "replay",
            "--dead-letters",
            "--data-dir",
            data,
            "--source",
            "shop",
            "--event-id",
            "evt_9",
            "--reason",
            "x",
        ]),
        "no dead letter of event \"evt_9\" of source \"shop\"",
    );
    usage(
        &idemgate(&[
            "replay",
            "--dead-letters",
            "--data-dir",
            data,
            "--event-id",
            "evt_2",
        ]),
        "--source",
    );
    let out = idemgate(&[
        "replay",
        "--dead-letters",
        "--data-dir",
        data,
        "--source",
        "shop",
        "--event-id",
        "evt_2",
        "--reason",
        "downstream fixed",
    ]);
    assert!(text(&out).contains("1 dead letter moved"), "{}", text(&out));
    let v: Value =
        serde_json::from_slice(&idemgate(&["inbox", "--data-dir", data, "--json"]).stdout).unwrap();
    assert_eq!(
        (&v["sources"][0]["pending"], &v["sources"][0]["dead"]),
        (&Value::from(2), &Value::from(1)),
        "{v}"
    );

    // lookup tells each event's story: attempts with their errors, the dead letter, the replay
    // and its reason; not processed until delivered.
    let out = idemgate(&["lookup", "shop", "evt_2", "--data-dir", data]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    for part in [
        "processed  not yet: the downstream has not taken it",
        "inbox      retrying",
        "timed out after 10s",
        "dead-lettered",
        "replayed",
        "(reason: downstream fixed)",
    ] {
        assert!(said.contains(part), "no {part:?} in\n{said}");
    }
    let out = idemgate(&["lookup", "shop", "evt_1", "--data-dir", data, "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["processed_at"], Value::Null, "{v}");
    assert_eq!(v["inbox"]["state"], "retrying", "{v}");
    assert_eq!(v["inbox"]["attempts"][0]["status"], 503, "{v}");
    assert!(v["inbox"]["next_attempt_at"].is_string(), "{v}");
    let v: Value = serde_json::from_slice(
        &idemgate(&["lookup", "shop", "evt_3", "--data-dir", data, "--json"]).stdout,
    )
    .unwrap();
    assert_eq!(v["inbox"]["state"], "dead", "{v}");
}
