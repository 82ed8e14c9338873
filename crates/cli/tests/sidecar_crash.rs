//! `idemgate serve` with an `[[api]]`, killed (SIGKILL) while a keyed request is at the API and
//! started again on the same store: a key whose answer reached its client before the kill is
//! replayed, never run again (its completion was durable before the answer); the key the killed
//! process held is freed by the new boot, so its client's retry runs at once instead of hearing
//! 409 until the lease (a minute) runs out. The API sees that key twice: a crash while a request
//! is at the API leaves its outcome unknown, and the retry carries the same `Idempotency-Key`
//! for an API that keys its own writes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Calls per `Idempotency-Key` the API has seen.
type Calls = Arc<Mutex<HashMap<String, usize>>>;

/// The user's API, in plain HTTP/1.1 with keep-alive: every request answers 201 with a new
/// payment id, except the first of a key that starts with `hang-`, which never answers.
async fn api() -> (SocketAddr, Calls) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Calls::default();
    let seen = calls.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let (read, mut write) = tcp.into_split();
                let mut read = BufReader::new(read);
                while let Some((key, _body)) = request(&mut read).await {
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        let n = seen.entry(key.clone()).or_default();
                        *n += 1;
                        *n
                    };
                    if key.starts_with("hang-") && n == 1 {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        return;
                    }
                    let body = format!("{{\"id\":\"pay_{key}_{n}\"}}");
                    let answer = format!(
                        "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if write.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, calls)
}

/// One request off `read`: its `Idempotency-Key` and body; `None` at the end of the connection.
async fn request<R: tokio::io::AsyncBufRead + Unpin>(read: &mut R) -> Option<(String, Vec<u8>)> {
    let mut key = String::new();
    let mut length = 0;
    let mut line = String::new();
    loop {
        line.clear();
        if read.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "idempotency-key" => value.trim().clone_into(&mut key),
                "content-length" => length = value.trim().parse().ok()?,
                _ => {}
            }
        }
    }
    let mut body = vec![0; length];
    read.read_exact(&mut body).await.ok()?;
    Some((key, body))
}

/// What a client heard.
#[derive(Debug)]
struct Heard {
    status: u16,
    replayed: bool,
    body: String,
}

/// POSTs `{}` to `/payments` under `key` on a connection of its own.
async fn post(addr: SocketAddr, key: &str) -> std::io::Result<Heard> {
    let mut tcp = TcpStream::connect(addr).await?;
    let req = format!(
        "POST /payments HTTP/1.1\r\nhost: api\r\nidempotency-key: {key}\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}"
    );
    tcp.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {text:?}")))?;
    let replayed = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("idempotent-replayed: true"));
    Ok(Heard {
        status,
        replayed,
        body: body.to_owned(),
    })
}

/// `idemgate serve` on `config`, its log in `log`; returns once the api's port accepts.
async fn serve(config: &Path, log: &Path, api: SocketAddr) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--config", config.to_str().unwrap()])
        .env_remove("IDEMGATE_DATA_DIR")
        .env_remove("IDEMGATE_CONFIG")
        .env("IDEMGATE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(api).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the sidecar did not listen on {api}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child
}

fn free_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sidecar_started_again_replays_what_it_answered_and_frees_what_it_held() {
    let (upstream, calls) = api().await;
    let called = |key: &str| calls.lock().unwrap().get(key).copied().unwrap_or(0);
    let dir = tempfile::tempdir().unwrap();
    let (listen, api) = (free_port(), free_port());
    let config = dir.path().join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"{listen}\"\n[store]\npath = {:?}\n\n[[api]]\nname = \"payments\"\n\
             listen = \"{api}\"\nupstream = \"http://{upstream}\"\nroutes = [\"POST /payments\"]\n\
             retry_window = \"1d\"\n",
            dir.path().join("data").display().to_string()
        ),
    )
    .unwrap();
    let mut first = serve(&config, &dir.path().join("first.log"), api).await;

    let done = post(api, "done-1").await.unwrap();
    assert_eq!((done.status, done.replayed), (201, false), "{done:?}");
    // A request at the API when the process dies: its client never hears.
    let hanging = tokio::spawn(post(api, "hang-1"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while called("hang-1") == 0 {
        assert!(Instant::now() < deadline, "hang-1 never reached the API");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let heard = hanging.await.unwrap();
    assert!(
        heard.as_ref().map_or(true, |h| h.status == 0),
        "the killed process answered: {heard:?}"
    );

    let log = dir.path().join("second.log");
    let mut second = serve(&config, &log, api).await;
    // Answered before the kill: replayed byte for byte, not run again.
    let again = post(api, "done-1").await.unwrap();
    assert_eq!(
        (again.status, again.replayed, again.body.as_str()),
        (201, true, done.body.as_str())
    );
    assert_eq!(called("done-1"), 1);
    // Held by the killed process: freed at the start, so the retry runs now (not a 409 until
    // the lease runs out), once, and is kept from then on.
    let retried = post(api, "hang-1").await.unwrap();
    assert_eq!(
        (retried.status, retried.replayed),
        (201, false),
        "{retried:?}"
    );
    assert_eq!(called("hang-1"), 2);
    let kept = post(api, "hang-1").await.unwrap();
    assert_eq!(
        (kept.status, kept.replayed, kept.body.as_str()),
        (201, true, retried.body.as_str())
    );
    assert_eq!(called("hang-1"), 2);
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("freed the claims an earlier boot of this instance held"),
        "{said}"
    );
    second.kill().unwrap();
    second.wait().unwrap();
}
