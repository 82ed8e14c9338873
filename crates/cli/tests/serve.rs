//! `idemgate serve` as a user starts it: it checks everything before it says it is listening,
//! and exits 2 for a configuration it cannot use, 1 for a store it cannot reach.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn serve(config: &str, extra: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.toml");
    std::fs::write(
        &path,
        format!(
            "{config}\n[store]\npath = {:?}\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let mut args = vec!["serve", "--config", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(&args)
        .env_remove("IDEMGATE_DATA_DIR")
        .env("IDEMGATE_LOG", "info")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

#[test]
fn a_source_that_cannot_be_built_exits_2_before_listening() {
    let (code, output) = serve(
        "[[source]]\nname = \"sv\"\nprovider = \"svix\"\nsecrets = [\"not-whsec\"]\n",
        &["--listen", "127.0.0.1:0"],
    );
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.contains("\"sv\"") && output.contains("secrets"),
        "{output}"
    );
    assert!(!output.contains("listening"), "{output}");
}

#[test]
fn a_store_that_cannot_be_reached_exits_1_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pg.toml");
    std::fs::write(
        &path,
        "[store]\nkind = \"postgres\"\nurl = \"postgres://root@127.0.0.1:1/test\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args([
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("IDEMGATE_LOG", "info")
        .output()
        .unwrap();
    let output = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{output}");
    assert!(output.contains("PostgreSQL"), "{output}");
    assert!(!output.contains("listening"), "{output}");
}

#[test]
fn a_bad_listen_is_a_usage_error_and_a_host_name_resolves() {
    let (code, output) = serve("", &["--listen", "localhost"]);
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.contains("--listen") && output.contains("host:port"),
        "{output}"
    );

    // The demo (no --config) on localhost:0: the banner names the address it bound.
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--listen", "localhost:0"])
        .current_dir(dir.path())
        .env_remove("IDEMGATE_DATA_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let started = Instant::now();
    let _ = child.kill();
    let _ = child.wait();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        first.starts_with("idemgate on http://127.0.0.1:")
            || first.starts_with("idemgate on http://[::1]:"),
        "{first}"
    );
}

#[test]
fn check_lists_every_source_and_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        format!(
            "api_tokens = [\"0123456789abcdef0123\"]\n[store]\npath = {:?}\n[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_a\", \"whsec_b\"]\nforward_url = \"http://127.0.0.1:3000/hook\"\n[[source]]\nname = \"bus\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_header = \"x-id\"\nmode = \"on_receipt\"\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "--config", good.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for part in [
        "source stripe-live",
        "ttl       7d 10m = retry_window 3d + queue_lag 1d + clock_skew 10m + replay_margin 3d",
        "verifier  stripe (2 secrets, tolerance 5m)",
        "forward   http://127.0.0.1:3000/hook (timeout 10s)",
        "source bus",
        "verifier  none (bearer token)",
        "mode      on_receipt",
        "not created yet",
        "ok",
    ] {
        assert!(text.contains(part), "{part:?} missing from:\n{text}");
    }
    // Checking created nothing.
    assert!(!dir.path().join("data").exists());

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "api_tokens = [\"change-me-to-a-long-random-token\"]\n[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_...\"]\n[[source]]\nname = \"sv\"\nprovider = \"svix\"\nsecrets = [\"nope\"]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_eq!(text.matches("problem: ").count(), 3, "{text}");
    assert!(text.contains("(line 1): api_tokens"), "{text}");
    assert!(
        text.contains("(line 5): source \"stripe-live\": secrets"),
        "{text}"
    );
    assert!(
        text.contains("source \"sv\": secrets: secrets[0]"),
        "{text}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 problems in"));
}

/// Starts `idemgate serve` with `args` in `dir`; waits for its "listening" (or the demo banner)
/// and returns the child.
fn start(dir: &std::path::Path, args: &[&str]) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .current_dir(dir)
        .env_remove("IDEMGATE_DATA_DIR")
        .env_remove("IDEMGATE_CONFIG")
        .env("IDEMGATE_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("idemgate on http://"), "{first}");
    child
}

#[test]
fn a_second_serve_on_the_same_sqlite_directory_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut first = start(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    // Another port, the same ./idemgate-data: refused before it opens the store.
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("IDEMGATE_DATA_DIR")
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("idemgate-data is in use by another process")
            && said.contains(&format!("pid {}", first.id())),
        "{said}"
    );
    let _ = first.kill();
    let _ = first.wait();
    // Its process gone (killed, not stopped), the directory is free again at once.
    let mut again = start(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    let _ = again.kill();
    let _ = again.wait();
}

#[test]
fn the_listener_is_bound_before_the_store_is_touched() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--listen", &addr])
        .current_dir(dir.path())
        .env_remove("IDEMGATE_DATA_DIR")
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(said.contains(&format!("cannot listen on {addr}")), "{said}");
    assert!(
        !dir.path().join("idemgate-data").exists(),
        "no store was created or migrated: {said}"
    );
}

#[test]
fn an_apis_listener_is_bound_before_the_store_is_touched() {
    // The public listener is free; the api's address is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\n[store]\npath = {:?}\n\n[[api]]\nname = \"payments\"\n\
             listen = \"{addr}\"\nupstream = \"http://127.0.0.1:9\"\n\
             routes = [\"POST /payments\"]\nretry_window = \"1d\"\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("IDEMGATE_DATA_DIR")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "cannot listen on api \"payments\"'s listen {addr}"
        )),
        "{said}"
    );
    // Nothing was opened: no store created, no boot registered whose lease would have to lapse
    // before the next start could free this instance's claims.
    assert!(!data.exists(), "no store was created: {said}");
}

#[test]
fn every_configuration_error_is_reported_at_once_and_the_environment_is_named() {
    // Two typos and a bad value: all three, each with its line.
    let (code, output) = serve(
        "listn = \"127.0.0.1:1\"\n[limits]\nbody_limt = 5\nrequest_timeout = \"soon\"\n",
        &[],
    );
    assert_eq!(code, Some(2), "{output}");
    for part in [
        "listn in ",
        "(line 1): unknown key; did you mean listen?",
        "limits.body_limt in ",
        "(line 3): unknown key; did you mean body_limit?",
        "limits.request_timeout in ",
        "(line 4): string \"soon\" is not a duration",
    ] {
        assert!(output.contains(part), "no {part:?} in\n{output}");
    }
    // Two invalid values past parsing: both.
    let (code, output) = serve(
        "instance = \"no spaces allowed\"\n[limits]\nbody_limit = 0\n",
        &[],
    );
    assert_eq!(code, Some(2), "{output}");
    assert!(
        output.contains("(line 1): instance") && output.contains("(line 3): limits.body_limit"),
        "{output}"
    );
    // A value from the environment names its variable, not a line of the file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idemgate.toml");
    std::fs::write(&path, "listen = \"127.0.0.1:8080\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .env("IDEMGATE_LISTEN", "nowhere")
        .env("IDEMGATE_LIMITS__BODY_LIMIT", "big")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("IDEMGATE_LIMITS__BODY_LIMIT"),
        "the variable is named: {said}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .env("IDEMGATE_LISTEN", "nowhere")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("IDEMGATE_LISTEN: listen: \"nowhere\" is not host:port"),
        "{said}"
    );
    assert!(!said.contains("(line 1)"), "not the file's line: {said}");
}

#[test]
fn a_config_without_sources_is_warned_of_at_start_and_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pg-like.toml");
    std::fs::write(
        &path,
        format!(
            "[store]\npath = {:?}\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("warning: no sources are configured"),
        "{text}"
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args([
            "serve",
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env("IDEMGATE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = String::new();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while let Some(Ok(line)) = lines.next() {
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("listening") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen.contains("no sources are configured"), "{seen}");
}

#[test]
fn advise_help_lists_no_migrate_only_options() {
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["advise", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--data-dir"), "{help}");
    assert!(
        !help.contains("--expiry") && !help.contains("--partition-width"),
        "{help}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["migrate", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--expiry") && help.contains("--partition-width"),
        "{help}"
    );
}

#[test]
fn sigterm_during_the_start_stops_it_before_it_serves() {
    use idemgate_core::{BootRequest, InstanceName, Instances};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // A boot of this instance elsewhere whose liveness lease runs: the start waits for it.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let store = idemgate_sqlite::SqliteStore::open(&data).unwrap();
        let request = BootRequest {
            process: "another-kernel/pid:[1]/77/1".to_owned(),
            ..BootRequest::new(
                InstanceName::new("gw-term").unwrap(),
                Duration::from_secs(60),
                "elsewhere",
            )
        };
        store.register_boot(&request).await.unwrap();
    });
    let path = dir.path().join("idemgate.toml");
    std::fs::write(
        &path,
        format!(
            "instance = \"gw-term\"\ninstance_lease = \"60s\"\nlisten = \"127.0.0.1:0\"\n[store]\npath = {:?}\n[[source]]\nname = \"s\"\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .env("IDEMGATE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until it says it waits for the other boot's lease.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("waiting for it to lapse") {
            break;
        }
    }
    assert!(seen.contains("waiting for it to lapse"), "{seen}");
    let sent = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    for line in lines {
        seen.push_str(&line.unwrap());
        seen.push('\n');
    }
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    assert!(status.success(), "{status:?}\n{seen}");
    assert!(seen.contains("stopped before serving"), "{seen}");
    assert!(!seen.contains("listening"), "{seen}");
}
