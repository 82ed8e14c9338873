//! Health that sees failing writes: a SQLite store on a disk that fills up answers its reads
//! while every write fails, and `/healthz` must say so (503), not `ok`; once a write succeeds
//! again, it is healthy again.
//!
//! The disk is a small tmpfs of the test's own, which needs root (as CI on this machine runs);
//! without it the test says so and skips, and with `CI` set it fails.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use support::{Behaviour, Downstream, Gateway, sign};

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cannot mount a tmpfs (this test needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Fills what is left of the disk at `dir` with a file, less `spare` bytes.
fn fill(dir: &Path, spare: u64) -> PathBuf {
    let stat = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .unwrap();
    let avail: u64 = String::from_utf8_lossy(&stat.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let filler = dir.join("filler");
    let size = avail.saturating_sub(spare) as usize;
    // Written, not fallocated: tmpfs counts pages written.
    std::fs::write(&filler, vec![7u8; size]).unwrap_or_else(|e| {
        // The last pages may not fit exactly; what was written stays.
        eprintln!("filler stopped early: {e}");
    });
    filler
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_disk_makes_the_store_unhealthy_until_a_write_succeeds() {
    let disk = match SmallDisk::mount("4m") {
        Ok(disk) => disk,
        Err(e) if std::env::var_os("CI").is_some() => {
            panic!("{e}; CI is set, so this test does not skip")
        }
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let down = Downstream::start(Behaviour::Ok).await;
    let text = format!(
        "[[source]]\nname = \"stripe-live\"\nprovider = \"stripe\"\nsecrets = [\"whsec_test\"]\nforward_url = \"{}\"\n[store]\npath = {:?}\n",
        down.url,
        disk.path().join("data").display().to_string()
    );
    let gw = Gateway::start_with(&text).await;
    let health = gw.get("/healthz").await.unwrap();
    assert_eq!(health.status, 200);
    let filler = fill(disk.path(), 0);

    // Deliveries get 503 (the sender retries) while the disk is full...
    let mut refused = 0;
    for i in 0..40 {
        let id = format!("evt_full_{i}");
        let body =
            serde_json::to_vec(&serde_json::json!({"id": id, "pad": "x".repeat(2000)})).unwrap();
        let r = gw
            .post(
                "/hooks/stripe-live",
                sign(&gw, "stripe-live", &id, SystemTime::now(), &body),
                body,
            )
            .await;
        if r.status == 503 {
            assert_eq!(r.outcome(), "store_unavailable", "{:?}", r.body);
            refused += 1;
        }
    }
    assert!(refused > 0, "no delivery failed on a full disk");
    // ...and /healthz says the store is down, though it still answers reads.
    let health = gw.get("/healthz").await.unwrap();
    assert_eq!(health.status, 503, "{:?}", health.body);
    let body = String::from_utf8_lossy(&health.body);
    assert!(body.contains("its writes fail"), "{body}");

    // Room again: the next write succeeds, and the store is healthy again.
    std::fs::remove_file(filler).unwrap();
    let body = serde_json::to_vec(&serde_json::json!({"id": "evt_room"})).unwrap();
    let mut ok = false;
    for _ in 0..20 {
        let r = gw
            .post(
                "/hooks/stripe-live",
                sign(&gw, "stripe-live", "evt_room", SystemTime::now(), &body),
                body.clone(),
            )
            .await;
        if r.status == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "no delivery succeeded once the disk had room");
    assert_eq!(gw.get("/healthz").await.unwrap().status, 200);
    gw.stop().await;
}
