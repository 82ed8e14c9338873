//! Everything a run starts is stopped and removed at its end, also on failure, on ctrl-c and
//! when the harness itself is killed.
//!
//! Each private server or gateway registers a shell line that stops it (guarded so that it can
//! only ever touch that process: a gateway is matched by its config path under the run
//! directory, a redis-server by its working directory, PostgreSQL by its data directory). The
//! lines live in `cleanup.sh` in the run directory. The harness runs them itself when it ends or
//! is interrupted; a watchdog shell (its own process group, so ctrl-c in a terminal does not
//! reach it) runs them if the harness disappears without doing so, then removes the directory.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use anyhow::Context;

#[derive(Debug)]
pub struct Registry {
    dir: PathBuf,
    keep: bool,
    actions: Mutex<BTreeMap<u64, String>>,
    next: Mutex<u64>,
    watchdog: Mutex<Option<Child>>,
}

const WATCHDOG: &str = r#"
parent="$1"; file="$2"; dir="$3"; keep="$4"
while kill -0 "$parent" 2>/dev/null; do sleep 0.5; done
[ -f "$file" ] && sh "$file" >/dev/null 2>&1
[ "$keep" = keep ] || rm -rf "$dir"
"#;

impl Registry {
    /// Creates the run directory and starts the watchdog.
    ///
    /// # Errors
    /// When the directory or the watchdog cannot be created.
    pub fn new(keep: bool) -> anyhow::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let dir =
            std::env::temp_dir().join(format!("idemgate-chaos-{}-{nanos:08x}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let registry = Self {
            dir,
            keep,
            actions: Mutex::default(),
            next: Mutex::new(0),
            watchdog: Mutex::new(None),
        };
        registry.write()?;
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(std::process::id().to_string())
            .arg(registry.file())
            .arg(&registry.dir)
            .arg(if keep { "keep" } else { "remove" })
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting the cleanup watchdog (sh)")?;
        *lock(&registry.watchdog) = Some(child);
        Ok(registry)
    }

    /// The run directory: configs, data directories and gateway logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self) -> PathBuf {
        self.dir.join("cleanup.sh")
    }

    /// Registers a shell line that undoes something; returns its id for [`Registry::remove`].
    pub fn add(&self, line: String) -> u64 {
        let id = {
            let mut next = lock(&self.next);
            *next += 1;
            *next
        };
        lock(&self.actions).insert(id, line);
        if let Err(e) = self.write() {
            eprintln!("warning: cannot write {}: {e:#}", self.file().display());
        }
        id
    }

    /// Forgets a line whose work was done another way (a server stopped cleanly).
    pub fn remove(&self, id: u64) {
        lock(&self.actions).remove(&id);
        if let Err(e) = self.write() {
            eprintln!("warning: cannot write {}: {e:#}", self.file().display());
        }
    }

    fn write(&self) -> anyhow::Result<()> {
        let actions = lock(&self.actions);
        // Newest first: gateways stop before the stores they use.
        let mut text = String::from("# Undoes what the chaos run started, newest first.\n");
        for line in actions.values().rev() {
            text.push_str(line);
            text.push('\n');
        }
        let tmp = self.dir.join("cleanup.sh.tmp");
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, self.file())?;
        Ok(())
    }

    /// Runs every registered line now (newest first) and forgets them.
    pub fn run_all(&self) {
        let lines: Vec<String> = {
            let mut actions = lock(&self.actions);
            let lines = actions.values().rev().cloned().collect();
            actions.clear();
            lines
        };
        for line in lines {
            match Command::new("sh").arg("-c").arg(&line).status() {
                Ok(s) if s.success() => {}
                Ok(s) => eprintln!("cleanup `{line}` ended with {s}"),
                Err(e) => eprintln!("cleanup `{line}` could not run: {e}"),
            }
        }
        let _ = self.write();
    }

    /// Stops everything, removes the run directory (unless kept) and the watchdog.
    pub fn finish(&self) {
        self.run_all();
        if self.keep {
            eprintln!("kept the run directory {}", self.dir.display());
        } else if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("warning: cannot remove {}: {e}", self.dir.display());
        }
        if let Some(mut child) = lock(&self.watchdog).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `s` quoted for sh.
pub fn quote(s: impl AsRef<std::ffi::OsStr>) -> String {
    let s = s.as_ref().to_string_lossy();
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_sh() {
        let tricky = "a 'b' $c \"d\"";
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("printf %s {}", quote(tricky)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), tricky);
    }

    #[test]
    fn lines_run_newest_first_once_and_the_directory_goes() {
        let registry = Registry::new(false).unwrap();
        let dir = registry.dir().to_owned();
        let out = dir.with_extension("order");
        registry.add(format!("echo a >> {}", quote(&out)));
        registry.add(format!("echo b >> {}", quote(&out)));
        let c = registry.add(format!("echo c >> {}", quote(&out)));
        registry.remove(c);
        let script = std::fs::read_to_string(dir.join("cleanup.sh")).unwrap();
        assert!(script.find("echo b").unwrap() < script.find("echo a").unwrap());
        assert!(!script.contains("echo c"));
        registry.finish();
        // A second run finds nothing left to do.
        registry.run_all();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "b\na\n");
        assert!(!dir.exists());
        std::fs::remove_file(out).unwrap();
    }
}
