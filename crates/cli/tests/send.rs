//! `idemgate send` against a real `idemgate serve`: a delivery signed correctly for every scheme
//! the gateway verifies, and `idemgate completions`.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The providers' test fixtures: keys that sign as SendGrid, a Standard Webhooks `v1a` sender and
/// Pub/Sub's push service would (the last standing in for Google's).
const SENDGRID: &str = include_str!("../../providers/tests/fixtures/sendgrid/vectors.json");
const STANDARD: &str =
    include_str!("../../providers/tests/fixtures/standard-webhooks/vectors.json");
const PUBSUB: &str = include_str!("../../providers/tests/fixtures/pubsub/vectors.json");
const PUBSUB_KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../providers/tests/fixtures/pubsub/signing-key.pem"
);

fn fixture(text: &str, key: &str) -> serde_json::Value {
    serde_json::from_str::<serde_json::Value>(text).unwrap()[key].clone()
}

fn config(port: u16, data: &std::path::Path) -> String {
    let mut text = format!(
        "listen = \"127.0.0.1:{port}\"\napi_tokens = [\"worker-token-0123456789\"]\n[store]\npath = {:?}\n",
        data.display().to_string()
    );
    for (name, provider, secret, extra) in [
        ("stripe-live", "stripe", "whsec_stripe_test", ""),
        ("github-app", "github", "github-secret", ""),
        ("shop", "shopify", "shpss_secret", ""),
        ("slack-events", "slack", "slack-signing-secret", ""),
        ("std", "standard-webhooks", SW_SECRET, ""),
        ("clerk", "svix", SW_SECRET, ""),
        ("paddle", "paddle", "pdl_ntfset_secret", ""),
        (
            "bus-hmac",
            "generic-hmac",
            "bus-secret",
            "retry_window = \"6h\"\nsignature_header = \"X-Signature\"\ntimestamp_header = \"X-Timestamp\"\nevent_id_pointer = \"/data/id\"\n",
        ),
        (
            "bus-header",
            "generic-hmac",
            "bus-secret",
            "retry_window = \"6h\"\nsignature_header = \"X-Signature\"\nsignature_encoding = \"base64\"\nevent_id_header = \"X-Event-Id\"\n",
        ),
        (
            "square",
            "square",
            "square-signature-key",
            "signed_url = \"https://hooks.example.com/hooks/square\"\n",
        ),
        (
            "twilio",
            "twilio",
            "twilio-auth-token",
            "signed_url = \"https://hooks.example.com/hooks/twilio\"\n",
        ),
        ("mailgun", "mailgun", "key-mailgun-signing", ""),
        ("postmark", "postmark", "postmark:first-pass", ""),
    ] {
        // A second secret, as during a rotation: the first signs.
        let second = if secret.starts_with("whsec_") {
            "whsec_b2xkIHNlY3JldA=="
        } else if secret.contains(':') {
            "postmark:second-pass"
        } else {
            "second-secret-for-rotation"
        };
        text.push_str(&format!(
            "[[source]]\nname = \"{name}\"\nprovider = \"{provider}\"\nsecrets = [\"{secret}\", \"{second}\"]\n{extra}\n"
        ));
    }
    text.push_str(
        "[[source]]\nname = \"internal\"\nprovider = \"none\"\nretry_window = \"1h\"\nevent_id_header = \"X-Id\"\n",
    );
    // Public-key senders: the private key signs (and verifies by its public half).
    let sendgrid = fixture(SENDGRID, "signing_key");
    let v1a = fixture(STANDARD, "signing_key");
    let jwks = data.with_extension("jwks.json");
    std::fs::write(&jwks, fixture(PUBSUB, "jwks").to_string()).unwrap();
    text.push_str(&format!(
        "[[source]]\nname = \"sendgrid\"\nprovider = \"sendgrid\"\nsecrets = [{sendgrid}]\n\n\
         [[source]]\nname = \"std-v1a\"\nprovider = \"standard-webhooks\"\nsecrets = [{v1a}]\n\n\
         [[source]]\nname = \"pubsub\"\nprovider = \"pubsub\"\naudience = {}\nallow_any_service_account = true\njwks_file = {:?}\n",
        fixture(PUBSUB, "audience"),
        jwks.display().to_string()
    ));
    text
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn idemgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .unwrap()
}

#[test]
fn send_signs_for_every_scheme_and_the_gateway_accepts_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = dir.path().join("idemgate.toml");
    std::fs::write(&path, config(port, &dir.path().join("data"))).unwrap();
    let path = path.to_str().unwrap().to_owned();
    let _serve = Serve(
        Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--config", &path])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "serve did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for source in [
        "stripe-live",
        "github-app",
        "shop",
        "slack-events",
        "std",
        "clerk",
        "paddle",
        "bus-hmac",
        "bus-header",
        "square",
        "twilio",
        "mailgun",
        "postmark",
        "internal",
        "std-v1a",
        "pubsub",
    ] {
        let mut args = vec!["send", source, "--config", &path, "--repeat", "2", "--json"];
        if source == "pubsub" {
            args.extend(["--signing-key", PUBSUB_KEY]);
        }
        let out = idemgate(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{source}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let answers: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let outcomes: Vec<_> = answers
            .iter()
            .map(|a| a["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes, ["accepted", "duplicate"], "{source}: {stdout}");
        assert_eq!(answers[0]["event_id"], answers[1]["event_id"]);
    }
    // A SendGrid batch: one claim per event; sent twice, every event is a duplicate.
    let out = idemgate(&[
        "send", "sendgrid", "--config", &path, "--repeat", "2", "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{stdout}");
    assert!(answers.iter().all(|a| a["outcome"] == "batch"), "{stdout}");
    assert!(
        answers[0]["answer"]["processed"].as_u64().unwrap() >= 1,
        "{stdout}"
    );
    assert_eq!(answers[1]["answer"]["processed"], 0, "{stdout}");
    // Pub/Sub without a test key is refused before sending, saying what to give.
    let out = idemgate(&["send", "pubsub", "--config", &path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--signing-key"));
    // A body of the user's, with the id where the source reads it.
    let body = dir.path().join("event.json");
    std::fs::write(&body, r#"{"id":"evt_from_file","object":"event"}"#).unwrap();
    let out = idemgate(&[
        "send",
        "stripe-live",
        "--config",
        &path,
        "--body",
        body.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("accepted"),
        "{stdout}"
    );
    assert!(stdout.contains("evt_from_file"), "{stdout}");
    // One that lacks it is refused before sending, naming the place.
    std::fs::write(&body, r#"{"object":"event"}"#).unwrap();
    let out = idemgate(&[
        "send",
        "stripe-live",
        "--config",
        &path,
        "--body",
        body.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/id"));
    // A gateway answer that is not 2xx fails the command.
    let out = idemgate(&[
        "send",
        "stripe-live",
        "--config",
        &path,
        "--url",
        &format!("http://127.0.0.1:{port}/no-such-prefix"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("404"));
}

#[test]
fn completions_for_each_shell_name_the_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = idemgate(&["completions", shell]);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        for command in ["serve", "send", "lookup", "advise"] {
            assert!(text.contains(command), "{shell} lacks {command}");
        }
    }
    let out = idemgate(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}
