//! `_manifest.json`: what a day's directory holds. Written last, after every file it lists, so
//! a manifest is never ahead of its files; the retention job drops rows from the database only
//! once the manifest counts as many as the database does.

use serde::{Deserialize, Serialize};

/// What the manifest says it is.
pub const FORMAT: &str = "idemgate-history-archive";

/// One day of one source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub source: String,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// Rows in all files.
    pub rows: u64,
    pub files: Vec<FileEntry>,
    /// When it was written (RFC 3339).
    pub exported_at: String,
}

/// One file of a day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub rows: u64,
    pub bytes: u64,
    /// SHA-256 of the file, hex.
    pub sha256: String,
}

impl Manifest {
    /// Parses one and checks it speaks of `source`'s `day`.
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn parse(bytes: &[u8], source: &str, day: &str) -> Result<Self, String> {
        let m: Self = serde_json::from_slice(bytes).map_err(|e| format!("not a manifest: {e}"))?;
        if m.format != FORMAT {
            return Err(format!("its format is {:?}, not {FORMAT:?}", m.format));
        }
        if m.version != 1 {
            return Err(format!(
                "version {} is newer than this idemgate reads (1)",
                m.version
            ));
        }
        if m.source != source || m.day != day {
            return Err(format!(
                "it speaks of source {:?} on {}, but lies in the directory of {source:?} on {day}",
                m.source, m.day
            ));
        }
        let sum: u64 = m.files.iter().map(|f| f.rows).sum();
        if sum != m.rows {
            return Err(format!(
                "its files hold {sum} rows, its total says {}",
                m.rows
            ));
        }
        Ok(m)
    }
}

/// SHA-256 of `bytes`, hex.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
