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
