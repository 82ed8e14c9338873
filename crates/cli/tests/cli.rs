//! The binary, run as a user runs it.

use std::process::{Command, Output};
use std::time::Duration;

use idemgate_core::{ClaimOutcome, ClaimRequest, ClaimStore, Key};
use idemgate_sqlite::SqliteStore;
use serde_json::Value;

fn idemgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env_remove("IDEMGATE_DATA_DIR")
        .output()
        .expect("run idemgate")
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn usage_error(out: &Output, mentions: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code, stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains(mentions),
        "{stderr:?} should mention {mentions:?}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn stripe_ttl_is_a_three_day_window_and_at_least_seven_days() {
    let v = stdout_json(&idemgate(&["ttl", "--provider", "stripe", "--json"]));
    assert_eq!(v["retry_window_s"], 3 * 86_400);
    assert!(v["ttl_s"].as_u64().unwrap() >= 7 * 86_400, "{v}");
    let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys.len(), 5, "{keys:?}");
}

#[test]
fn ttl_from_flags_is_the_sum_of_the_terms() {
    let v = stdout_json(&idemgate(&[
        "ttl",
        "--retry-window",
        "3d",
        "--queue-lag",
        "1d",
        "--clock-skew",
        "10m",
        "--replay",
        "2d",
        "--json",
    ]));
    assert_eq!(v["retry_window_s"], 259_200);
    assert_eq!(v["queue_lag_s"], 86_400);
    assert_eq!(v["clock_skew_s"], 600);
    assert_eq!(v["replay_margin_s"], 172_800);
    assert_eq!(v["ttl_s"], 259_200 + 86_400 + 600 + 172_800);
    let text = idemgate(&[
        "ttl",
        "--retry-window",
        "3d",
        "--queue-lag",
        "1d",
        "--clock-skew",
        "10m",
        "--replay",
        "2d",
    ]);
    let text = String::from_utf8(text.stdout).unwrap();
    for term in [
        "retry_window",
        "queue_lag",
        "clock_skew",
        "replay_margin",
        "ttl",
        "6d 10m",
    ] {
        assert!(text.contains(term), "{text}");
    }
}

#[test]
fn provider_flags_override_the_preset() {
    let v = stdout_json(&idemgate(&[
        "ttl",
        "--provider",
        "github",
        "--retry-window",
        "7d",
        "--json",
    ]));
    assert_eq!(v["retry_window_s"], 7 * 86_400);
}

#[test]
fn bad_input_is_one_line_and_exit_code_two() {
    usage_error(
        &idemgate(&["ttl", "--retry-window", "3x"]),
        "--retry-window",
    );
    usage_error(
        &idemgate(&["ttl", "--provider", "stripe", "--queue-lag", "soon"]),
        "--queue-lag",
    );
    usage_error(
        &idemgate(&["ttl", "--provider", "nope"]),
        "unknown provider \"nope\"",
    );
    usage_error(
        &idemgate(&["ttl", "--provider", "custom"]),
        "--retry-window",
    );
    usage_error(&idemgate(&["ttl"]), "--retry-window");
    usage_error(&idemgate(&["ttl", "--retry-window", "0s"]), "retry_window");
    usage_error(
        &idemgate(&["ttl", "--retry-window", "3d", "--replay", "200d"]),
        "replay_margin",
    );
    usage_error(&idemgate(&["sweep", "--batch", "0"]), "--batch");
    usage_error(&idemgate(&["sweep", "--pause=-1s"]), "--pause");
    usage_error(
        &idemgate(&["lookup", "Not-A-Source", "evt"]),
        "invalid source name",
    );
    usage_error(&idemgate(&["frobnicate"]), "frobnicate");
}

#[test]
fn providers_lists_every_preset_with_its_source() {
    let v = stdout_json(&idemgate(&["providers", "--json"]));
    let list = v.as_array().unwrap();
    for name in [
        "stripe",
        "github",
        "shopify",
        "slack",
        "standard-webhooks",
        "svix",
        "paddle",
        "square",
        "twilio",
        "sendgrid",
        "mailgun",
        "postmark",
        "pubsub",
        "sns",
        "custom",
    ] {
        let p = list
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"));
        if name != "custom" {
            assert!(p["retry_window_s"].as_u64().unwrap() > 0, "{p}");
            assert!(p["ttl_s"].as_u64().unwrap() > p["retry_window_s"].as_u64().unwrap());
            assert!(
                p["source_url"].as_str().unwrap().starts_with("https://"),
                "{p}"
            );
            assert!(!p["checked"].as_str().unwrap().is_empty());
        }
        assert!(!p["dedup_key"].as_str().unwrap().is_empty());
        assert!(!p["signature"].as_str().unwrap().is_empty());
        assert_eq!(p["usable_as_source"], true, "{p}");
    }
    let text = String::from_utf8(idemgate(&["providers"]).stdout).unwrap();
    assert!(
        text.contains("https://docs.stripe.com/webhooks") && text.contains("checked 2026-11"),
        "{text}"
    );
}

#[test]
fn store_commands_refuse_a_directory_without_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nothing-here");
    usage_error(
        &idemgate(&["stats", "--data-dir", missing.to_str().unwrap()]),
        "no idemgate store",
    );
    assert!(!missing.exists(), "nothing was created");
    // From another directory, with the default data dir: says where it looked, whole, and how to
    // point it at the gateway's store; never suggests a migrate that would make an empty one.
    for command in [["lookup", "demo", "evt_1"].as_slice(), &["stats"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(command)
            .current_dir(dir.path())
            .env_remove("IDEMGATE_DATA_DIR")
            .env_remove("IDEMGATE_CONFIG")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let looked = dir.path().join("idemgate-data").join("idemgate.db");
        assert!(
            stderr.contains(&looked.display().to_string()),
            "names where it looked: {stderr}"
        );
        assert!(
            stderr.contains("--data-dir") && stderr.contains("--config"),
            "{stderr}"
        );
        assert!(!stderr.contains("migrate"), "{stderr}");
        assert!(!dir.path().join("idemgate-data").exists());
    }
}

/// Fills a store: `expired` records that expire at once, `live` ones that stay, one event with a
/// history.
async fn fill(dir: &std::path::Path, expired: usize, live: usize) {
    let store = SqliteStore::open(dir).unwrap();
    let day = Duration::from_secs(86_400);
    for i in 0..expired {
        let key = Key::parse("old-source", &format!("evt_{i}")).unwrap();
        let req = ClaimRequest::new(key, Duration::from_millis(1), Duration::from_millis(1));
        assert!(matches!(
            store.claim(req).await.unwrap(),
            ClaimOutcome::Claimed { .. }
        ));
    }
    for i in 0..live {
        let key = Key::parse("stripe-live", &format!("evt_{i}")).unwrap();
        let req = ClaimRequest::new(key, Duration::from_secs(60), day);
        let ClaimOutcome::Claimed { token, .. } = store.claim(req.clone()).await.unwrap() else {
            panic!("not claimed")
        };
        store.complete(&token).await.unwrap();
        if i == 0 {
            assert!(matches!(
                store.claim(req).await.unwrap(),
                ClaimOutcome::Duplicate { .. }
            ));
        }
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
}

#[tokio::test]
async fn stats_sweep_and_lookup_on_a_real_store() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 25, 3).await;
    let d = dir.path().to_str().unwrap();

    let s = stdout_json(&idemgate(&["stats", "--data-dir", d, "--json"]));
    assert_eq!(
        (s["live"].as_u64(), s["expired_unswept"].as_u64()),
        (Some(3), Some(25)),
        "{s}"
    );
    let sources: Vec<_> = s["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["source"].clone())
        .collect();
    assert_eq!(sources, ["old-source", "stripe-live"]);
    assert!(s["size_bytes"].as_u64().unwrap() > 0);

    let dry = idemgate(&["sweep", "--data-dir", d, "--dry-run"]);
    assert!(String::from_utf8_lossy(&dry.stdout).contains("would delete 25 expired records"));
    let s = stdout_json(&idemgate(&["stats", "--data-dir", d, "--json"]));
    assert_eq!(s["expired_unswept"], 25, "a dry run deletes nothing");

    let swept = idemgate(&["sweep", "--data-dir", d, "--batch", "10", "--pause", "1ms"]);
    assert!(
        swept.status.success(),
        "{}",
        String::from_utf8_lossy(&swept.stderr)
    );
    let text = String::from_utf8_lossy(&swept.stdout);
    assert!(
        text.contains("deleted 25 expired records in 3 batches"),
        "{text}"
    );
    // Not a terminal: plain log lines instead of a progress bar.
    assert!(String::from_utf8_lossy(&swept.stderr).contains("swept a batch"));
    let again = idemgate(&["sweep", "--data-dir", d]);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.contains("deleted 0 expired records in 1 batch in"),
        "{text}"
    );

    let s = stdout_json(&idemgate(&["stats", "--data-dir", d, "--json"]));
    assert_eq!(
        (s["live"].as_u64(), s["expired_unswept"].as_u64()),
        (Some(3), Some(0)),
        "{s}"
    );

    let v = stdout_json(&idemgate(&[
        "lookup",
        "stripe-live",
        "evt_0",
        "--data-dir",
        d,
        "--json",
    ]));
    assert_eq!(v["record"]["state"], "done");
    let outcomes: Vec<_> = v["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["outcome"].clone())
        .collect();
    assert_eq!(outcomes, ["claimed", "completed", "duplicate"]);
    // Swept records keep their history.
    let v = stdout_json(&idemgate(&[
        "lookup",
        "old-source",
        "evt_3",
        "--data-dir",
        d,
        "--json",
    ]));
    assert!(v["record"].is_null());
    assert_eq!(v["history"][0]["outcome"], "claimed");
    let text = idemgate(&["lookup", "stripe-live", "never-seen", "--data-dir", d]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("never received"));
    // A source this store never heard of is not "an event never received".
    usage_error(
        &idemgate(&["lookup", "strpe-live", "never-seen", "--data-dir", d]),
        "no source \"strpe-live\" in the SQLite store",
    );
    let v = stdout_json(&idemgate(&[
        "lookup",
        "strpe-live",
        "x",
        "--data-dir",
        d,
        "--json",
    ]));
    assert_eq!(v["source_known"], false);
    let v = stdout_json(&idemgate(&[
        "lookup",
        "stripe-live",
        "x",
        "--data-dir",
        d,
        "--json",
    ]));
    assert_eq!(v["source_known"], true);
}

/// `migrate`, `stats`, `sweep` and `lookup` on PostgreSQL, in a schema of this test's own.
#[test]
fn store_commands_on_postgres() {
    let url = std::env::var("IDEMGATE_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://root@localhost/test".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connected = rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio_postgres::connect(&url, tokio_postgres::NoTls),
        )
        .await
        .map_err(|_| "timed out".to_owned())
        .and_then(|r| r.map_err(|e| e.to_string()))
    });
    let Some((client, conn)) = idemgate_core::testkit::require_service(
        connected,
        "start PostgreSQL on 127.0.0.1:5432 (trust auth) or set IDEMGATE_TEST_POSTGRES",
    ) else {
        return;
    };
    rt.spawn(conn);
    let schema = format!("cli_test_{}", std::process::id());
    let pg = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--postgres", &url, "--schema", &schema]);
        idemgate(&all)
    };
    let out = pg(&["migrate"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = idemgate::engines::postgres::SCHEMA_VERSION;
    let all: Vec<i64> = (1..=version).collect();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("applied migrations {all:?}")),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&pg(&["migrate"]).stdout)
            .contains(&format!("already at schema version {version}"))
    );
    let s = stdout_json(&pg(&["stats", "--json"]));
    assert_eq!(s["live"], 0);
    let swept = pg(&["sweep", "--batch", "100", "--pause", "1ms"]);
    assert!(
        String::from_utf8_lossy(&swept.stdout).contains("deleted 0 expired records"),
        "{swept:?}"
    );
    let v = stdout_json(&pg(&["lookup", "stripe-live", "evt_1", "--json"]));
    assert!(v["record"].is_null() && v["history"].as_array().unwrap().is_empty());
    // Read-only commands take the mode off the schema (and have no --expiry: it is migrate's);
    // migrate refuses the other one, naming both.
    assert!(pg(&["stats"]).status.success());
    assert_eq!(
        pg(&["stats", "--expiry", "partitioned"]).status.code(),
        Some(2),
        "--expiry is migrate's alone"
    );
    let wrong = pg(&["migrate", "--expiry", "partitioned"]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("batched mode"),
        "{wrong:?}"
    );
    // Read-only commands never create a schema: a missing one is exit 2, and stays missing.
    let nosuch = format!("{schema}_nosuch");
    for command in ["stats", "lookup", "advise", "sweep"] {
        let mut args = vec![command];
        if command == "lookup" {
            args.extend(["stripe-live", "evt_1"]);
        }
        args.extend(["--postgres", &url, "--schema", &nosuch]);
        let out = idemgate(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(
            stderr.contains(&format!("no idemgate schema \"{nosuch}\""))
                && stderr.contains("run idemgate migrate"),
            "{command}: {stderr}"
        );
    }
    let created: bool = rt
        .block_on(client.query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&nosuch],
        ))
        .unwrap()
        .get(0);
    assert!(!created, "a read-only command created schema {nosuch}");
    // Which store: an explicit flag beside a --config naming another store is an error; the
    // environment never overrides a flag.
    let dir = tempfile::tempdir().unwrap();
    let sqlite_dir = dir.path().join("data");
    let sqlite = sqlite_dir.to_str().unwrap();
    assert!(
        idemgate(&["migrate", "--data-dir", sqlite])
            .status
            .success()
    );
    let pg_toml = dir.path().join("pg.toml");
    std::fs::write(
        &pg_toml,
        format!(
            "[store]\nkind = \"postgres\"\nurl = {url:?}\n[store.postgres]\nschema = {schema:?}\n"
        ),
    )
    .unwrap();
    let pg_toml = pg_toml.to_str().unwrap();
    let with_env = |args: &[&str], env: (&str, &str)| {
        Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(args)
            .env_remove("IDEMGATE_DATA_DIR")
            .env_remove("IDEMGATE_CONFIG")
            .env(env.0, env.1)
            .output()
            .unwrap()
    };
    let out = with_env(
        &["stats", "--config", pg_toml],
        ("IDEMGATE_DATA_DIR", sqlite),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("PostgreSQL schema \"{schema}\"")),
        "{text}"
    );
    let out = with_env(
        &["stats", "--data-dir", sqlite],
        ("IDEMGATE_CONFIG", pg_toml),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the SQLite store in"), "{text}");
    let out = idemgate(&["stats", "--data-dir", sqlite, "--config", pg_toml]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--data-dir") && stderr.contains("--config"),
        "{stderr}"
    );
    let out = idemgate(&["stats", "--config", pg_toml, "--schema", "other"]);
    assert_eq!(out.status.code(), Some(2));
    // A data dir that does not exist is not created.
    let missing = dir.path().join("typo");
    let out = idemgate(&["stats", "--data-dir", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no idemgate store in"));
    assert!(!missing.exists());

    rt.block_on(client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")))
        .unwrap();
    // Bad URLs and refused connections: one clear error each.
    let bad = idemgate(&["stats", "--postgres", "not a url"]);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("does not parse"),
        "{bad:?}"
    );
    let refused = idemgate(&["stats", "--postgres", "postgres://root@127.0.0.1:1/test"]);
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Connection refused"),
        "{refused:?}"
    );
}
