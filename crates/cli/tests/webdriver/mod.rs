//! A small WebDriver client for the browser tests: JSON over HTTP/1.1 to a `chromedriver` of
//! its own, and the plain HTTP the tests speak to `idemgate serve`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// A child process killed when the test ends, however it ends.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One HTTP/1.1 exchange over a fresh connection: status, headers (lower-case names), body.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).unwrap();
    // Read the head, then exactly the body it announces (a WebDriver server may keep the
    // connection open whatever the request said).
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let split = loop {
        if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "{method} {path}: the connection closed before the headers ended"
        );
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if let Some(length) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        while body.len() < length {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "{method} {path}: the body ended early");
            body.extend_from_slice(&buf[..n]);
        }
        body.truncate(length);
    } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        while !body.ends_with(b"0\r\n\r\n") {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "{method} {path}: the chunks ended early");
            body.extend_from_slice(&buf[..n]);
        }
        body = dechunk(&body);
    } else {
        stream.read_to_end(&mut body).unwrap();
    }
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&data[..eol])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = eol + 2;
        out.extend_from_slice(&data[start..start + size]);
        data = &data[start + size + 2..];
    }
}

/// A free loopback port (bound, then let go).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A WebDriver session on a `chromedriver` of its own.
pub struct Browser {
    driver: String,
    session: String,
    _chromedriver: Running,
}

impl Browser {
    /// Chromium, headless, `width` CSS pixels wide (a phone-sized width emulates a phone).
    pub fn start(chromedriver: &Path, chromium: &Path, width: u32) -> Self {
        let port = free_port();
        let child = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let running = Running(child);
        let driver = format!("127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            if TcpStream::connect(&driver).is_ok()
                && http(&driver, "GET", "/status", &[], "")
                    .2
                    .contains("\"ready\":true")
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not get ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut options = json!({
            "binary": chromium,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--disable-gpu",
                format!("--window-size={width},900"),
            ],
        });
        if width < 600 {
            options["mobileEmulation"] = json!({
                "deviceMetrics": {"width": width, "height": 844, "pixelRatio": 2.0, "touch": true}
            });
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": options,
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let (status, _, body) = http(
            &driver,
            "POST",
            "/session",
            &[("content-type", "application/json")],
            &caps.to_string(),
        );
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(status, 200, "new session: {body}");
        let session = v["value"]["sessionId"].as_str().unwrap().to_owned();
        Self {
            driver,
            session,
            _chromedriver: running,
        }
    }

    pub fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let text = if method == "GET" {
            String::new()
        } else {
            body.to_string()
        };
        let (status, _, answer) = http(
            &self.driver,
            method,
            &path,
            &[("content-type", "application/json")],
            &text,
        );
        let v: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
        assert_eq!(status, 200, "{method} {path}: {answer}");
        v["value"].clone()
    }

    pub fn open(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    pub fn run(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": [] }),
        )
    }

    pub fn url(&self) -> String {
        self.call("GET", "/url", Value::Null)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The browser's console since the last call: errors as `level: message`.
    pub fn console_errors(&self) -> Vec<String> {
        self.call("POST", "/se/log", json!({"type": "browser"}))
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| format!("{}: {}", e["level"], e["message"]))
            .collect()
    }

    pub fn element(&self, css: &str) -> String {
        let v = self.call(
            "POST",
            "/element",
            json!({"using": "css selector", "value": css}),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}"))
            .to_owned()
    }

    /// The whole page as a PNG (Chrome's DevTools capture, beyond the viewport).
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let cdp = |cmd: &str, params: Value| {
            self.call(
                "POST",
                "/goog/cdp/execute",
                json!({"cmd": cmd, "params": params}),
            )
        };
        let size = cdp("Page.getLayoutMetrics", json!({}))["cssContentSize"].clone();
        let (w, h) = (
            size["width"].as_f64().unwrap_or(1280.0),
            size["height"].as_f64().unwrap_or(900.0).min(12_000.0),
        );
        let shot = cdp(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                   "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}}),
        );
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .unwrap()
            .join("dashboard-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, bytes).unwrap();
        println!("screenshot: {}", path.display());
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let path = format!("/session/{}", self.session);
        let _ = std::panic::catch_unwind(|| http(&self.driver, "DELETE", &path, &[], ""));
    }
}

/// `chromium` and `chromedriver` on PATH, or a skip (a failure under `CI`) saying how to get
/// them.
pub fn browser_tools() -> Option<(PathBuf, PathBuf)> {
    let find = |name: &str| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.is_file())
        })
    };
    let found = match (find("chromium"), find("chromedriver")) {
        (Some(c), Some(d)) => Ok((c, d)),
        (c, d) => Err(format!(
            "not on PATH: {}",
            [("chromium", c.is_none()), ("chromedriver", d.is_none())]
                .iter()
                .filter(|(_, missing)| *missing)
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    };
    idemgate_core::testkit::require_service(
        found,
        "install them: apt-get install chromium chromium-driver (what .ci/browser does)",
    )
}
