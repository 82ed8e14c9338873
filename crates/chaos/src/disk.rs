//! A small tmpfs of the harness's own, for a store whose disk fills up: mounted in the run
//! directory (`mount -t tmpfs -o size=...`, which needs root), filled to the last byte by a
//! filler file, emptied again by removing it, and unmounted at the end. The unmount is
//! registered with the run's cleanup as soon as the mount is made, so it also happens on a
//! failure, on ctrl-c, and by the watchdog if the harness dies (after the gateways using it are
//! killed: the cleanup runs newest first).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};

use crate::cleanup::{Registry, quote};

#[derive(Debug)]
pub struct Tmpfs {
    pub dir: PathBuf,
    registry: Arc<Registry>,
    cleanup: Option<u64>,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_mib` MiB on `dir` (created if needed).
    ///
    /// # Errors
    /// When the directory cannot be made or `mount` fails (not root, no tmpfs): the message
    /// starts with "cannot mount a tmpfs", which a scenario outside CI reports as skipped.
    pub async fn mount(dir: &Path, size_mib: u32, registry: Arc<Registry>) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let out = tokio::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir)
            .output()
            .await;
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => bail!(
                "cannot mount a tmpfs on {} (mount needs root): mount exited with {}: {}",
                dir.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => bail!(
                "cannot mount a tmpfs on {}: cannot run mount: {e}",
                dir.display()
            ),
        }
        // Lazy: a process still holding a file there does not keep it mounted.
        let cleanup = registry.add(format!("umount -l {} 2>/dev/null; true", quote(dir)));
        Ok(Self {
            dir: dir.to_owned(),
            registry,
            cleanup: Some(cleanup),
        })
    }

    fn filler(&self) -> PathBuf {
        self.dir.join("filler")
    }

    /// Writes the filler until the file system is full; returns its size in bytes.
    ///
    /// # Errors
    /// When writing fails for another reason than a full disk.
    pub async fn fill(&self) -> anyhow::Result<u64> {
        let path = self.filler();
        tokio::task::spawn_blocking(move || {
            let mut file = std::fs::File::create(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            let chunk = vec![0x5au8; 64 * 1024];
            let mut written = 0u64;
            loop {
                match file.write(&chunk) {
                    Ok(0) => break,
                    Ok(n) => written += n as u64,
                    Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                    Err(e) => {
                        return Err(e).with_context(|| format!("writing {}", path.display()));
                    }
                }
            }
            // The last pages: a write smaller than a chunk may still fit.
            let small = [0x5au8; 512];
            while let Ok(n @ 1..) = file.write(&small) {
                written += n as u64;
            }
            Ok(written)
        })
        .await
        .context("the filler's task failed")?
    }

    /// The bytes the files in it take now (the store's data directory, one level down).
    pub fn used(&self) -> u64 {
        fn size(dir: &Path) -> u64 {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return 0;
            };
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        }
        size(&self.dir)
    }

    /// Removes the filler: the space is free again at once.
    ///
    /// # Errors
    /// When it cannot be removed.
    pub fn free(&self) -> anyhow::Result<()> {
        let path = self.filler();
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
    }

    /// Unmounts it (lazily) and forgets the cleanup line.
    pub async fn unmount(mut self) {
        let _ = tokio::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status()
            .await;
        if let Some(id) = self.cleanup.take() {
            self.registry.remove(id);
        }
    }
}
