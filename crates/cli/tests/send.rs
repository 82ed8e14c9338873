//! `idemgate send` against a real `idemgate serve`: a delivery signed correctly for every scheme
//! the gateway verifies, and `idemgate completions`.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The providers' test fixtures: keys that sign as SendGrid, a Standard Webhooks `v1a` sender and
/// Pub/Sub's push service would (the last standing in for Google's). Copies of idemgate-providers'
/// own, kept identical by `.ci/package`: this crate is packaged alone.
const SENDGRID: &str = include_str!("fixtures/sendgrid/vectors.json");
const STANDARD: &str = include_str!("fixtures/standard-webhooks/vectors.json");
const PUBSUB: &str = include_str!("fixtures/pubsub/vectors.json");
const PUBSUB_KEY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/pubsub/signing-key.pem"
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

/// Runs `idemgate send` with `args`, and every line it printed as JSON.
fn send_json(args: &[&str]) -> (Output, Vec<serde_json::Value>) {
    let out = idemgate(args);
    let answers = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    (out, answers)
}

#[test]
fn secret_signs_with_another_secret_than_the_sources_first() {
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
    // The second secret of a rotation verifies, as the gateway tries each configured one.
    for (source, second) in [
        ("github-app", "second-secret-for-rotation"),
        ("std", "whsec_b2xkIHNlY3JldA=="),
    ] {
        let (out, answers) = send_json(&[
            "send", source, "--config", &path, "--secret", second, "--json",
        ]);
        assert!(out.status.success(), "{source}: {answers:?}");
        assert_eq!(answers[0]["outcome"], "accepted", "{source}: {answers:?}");
    }
    // A secret the source does not hold is refused before any claim: 401, and send fails.
    let (out, answers) = send_json(&[
        "send",
        "stripe-live",
        "--config",
        &path,
        "--secret",
        "whsec_not_the_sources",
        "--event-id",
        "evt_wrong_secret",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{answers:?}");
    assert_eq!(answers[0]["status"], 401, "{answers:?}");
    assert_eq!(answers[0]["outcome"], "bad_signature", "{answers:?}");
    // Nothing was claimed: the same event with the right secret is the first receipt.
    let (out, answers) = send_json(&[
        "send",
        "stripe-live",
        "--config",
        &path,
        "--event-id",
        "evt_wrong_secret",
        "--json",
    ]);
    assert!(out.status.success(), "{answers:?}");
    assert_eq!(answers[0]["outcome"], "accepted", "{answers:?}");
    // Where a secret cannot apply, or is no secret, the command says so and sends nothing.
    for (source, secret, says) in [
        ("internal", "anything", "nothing to sign"),
        ("stripe-live", " ", "--secret: empty"),
        ("std", "not base64 !", "--secret cannot sign for \"std\""),
    ] {
        let out = idemgate(&["send", source, "--config", &path, "--secret", secret]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{source}: {stderr}");
        assert!(stderr.contains(says), "{source}: {stderr}");
    }
}

/// One HTTP request read off `stream`: its request line, headers (lower-case names) and body.
fn read_request(stream: &mut std::net::TcpStream) -> (String, Vec<(String, String)>, Vec<u8>) {
    use std::io::{BufRead, BufReader, Read};
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let request_line = line.trim_end().to_owned();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap();
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (request_line, headers, body)
}

#[test]
fn path_posts_anywhere_signed_as_the_source_signs() {
    use std::io::Write;
    // An app of the library's own: it receives Stripe at /webhooks/stripe, not /hooks/SOURCE.
    let app = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = app.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:{port}\"\n[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_app\"]\n"
        ),
    )
    .unwrap();
    let received = std::thread::spawn(move || {
        let (mut stream, _) = app.accept().unwrap();
        let request = read_request(&mut stream);
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
            .unwrap();
        request
    });
    let out = idemgate(&[
        "send",
        "stripe-live",
        "--config",
        path.to_str().unwrap(),
        "--path",
        "/webhooks/stripe",
        "--event-id",
        "evt_path_1",
        "--json",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (answer["status"].as_u64(), answer["answer"].as_str()),
        (Some(200), Some("ok"))
    );
    let (request_line, headers, body) = received.join().unwrap();
    assert_eq!(request_line, "POST /webhooks/stripe HTTP/1.1");
    // Signed as Stripe signs it, with the source's secret: the app's verifier accepts it.
    let mut map = http::HeaderMap::new();
    for (name, value) in &headers {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    let verifier = idemgate::Verifier::new(
        idemgate::Scheme::Stripe,
        vec![idemgate::Secret::from("whsec_app")],
        idemgate::Verifier::DEFAULT_TOLERANCE,
    )
    .unwrap();
    let verified = verifier
        .verify_delivery(
            &idemgate_providers::Delivery::new(&map, &body),
            std::time::SystemTime::now(),
        )
        .unwrap();
    assert_eq!(verified.event_id.as_str(), "evt_path_1");
    // A path that is not one is refused before anything is sent, naming the flag.
    for (bad, says) in [
        ("webhooks/stripe", "starts with /"),
        ("/webhooks?x=1", "without a query"),
    ] {
        let out = idemgate(&[
            "send",
            "stripe-live",
            "--config",
            path.to_str().unwrap(),
            "--path",
            bad,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains("--path") && stderr.contains(says),
            "{bad}: {stderr}"
        );
    }
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
