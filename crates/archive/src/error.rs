//! What can go wrong with an archive, each naming the key, file or setting at fault.

/// An archive error. Every variant names where: the setting, the object's key, the file.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A setting of `[history.archive]` is wrong.
    #[error("history.archive.{key}: {why}")]
    Config { key: &'static str, why: String },
    /// The object store refused or failed (unreachable, no such bucket, wrong credentials).
    #[error("archive {at}: {why}")]
    Store { at: String, why: String },
    /// A file in the archive is not what its manifest or the schema says.
    #[error("archive file {path}: {why}")]
    File { path: String, why: String },
    /// A manifest cannot be read or does not match its day.
    #[error("archive manifest {path}: {why}")]
    Manifest { path: String, why: String },
    /// Writing a Parquet file failed (the rows, not the store).
    #[error("writing {path}: {why}")]
    Write { path: String, why: String },
    /// The history store failed while rows were read from it.
    #[error("reading history: {0}")]
    History(#[from] idemgate_core::StoreError),
}

impl ArchiveError {
    /// An object store error at `at` (the archive's redacted URL and the key), in words that
    /// say what to check.
    pub(crate) fn store(at: impl Into<String>, e: &object_store::Error) -> Self {
        use object_store::Error as E;
        let why = match e {
            E::NotFound { .. } => "not found".to_owned(),
            E::PermissionDenied { .. } => {
                format!("permission denied (check the archive's credentials): {e}")
            }
            E::Unauthenticated { .. } => {
                format!(
                    "the credentials were refused (access_key_id, secret_access_key, or the AWS_* environment): {e}"
                )
            }
            other => other.to_string(),
        };
        Self::Store { at: at.into(), why }
    }

    /// Whether the object was simply absent.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Store { why, .. } if why == "not found")
    }
}
