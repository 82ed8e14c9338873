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
