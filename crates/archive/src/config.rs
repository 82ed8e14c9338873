//! `[history.archive]`: where history goes once the database is done with it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::error::ArchiveError;

/// The archive's settings, as `[history.archive]` holds them.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveConfig {
    /// `file:///absolute/path` or `s3://bucket/prefix`.
    pub url: String,
    /// The file format; only `parquet` (zstd).
    #[serde(default)]
    pub format: Format,
    /// How long after a day (SQLite) or a month's partition (PostgreSQL) closes before the
    /// retention job exports it. Default 1 day.
    #[serde(default = "default_export_after", with = "humantime_serde")]
    pub export_after: Duration,
    /// S3: the endpoint of an S3-compatible server (`http://127.0.0.1:9000`); AWS's by default.
    pub endpoint: Option<String>,
    /// S3: the region; `AWS_REGION` / `AWS_DEFAULT_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// S3: an access key; else `AWS_ACCESS_KEY_ID` and the rest of the usual environment.
    pub access_key_id: Option<String>,
    /// S3: its secret; else `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// S3: a session token for temporary credentials; else `AWS_SESSION_TOKEN`.
    pub session_token: Option<String>,
    /// S3: path-style requests (`endpoint/bucket/key`), as most non-AWS servers want.
    #[serde(default)]
    pub path_style: bool,
    /// S3 over TLS: a PEM file of authorities to trust besides the system's.
    pub ca_file: Option<PathBuf>,
}

impl fmt::Debug for ArchiveConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |s: &Option<String>| s.as_ref().map(|_| "<hidden>");
        f.debug_struct("ArchiveConfig")
            .field("url", &self.url)
            .field("format", &self.format)
            .field("export_after", &self.export_after)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("path_style", &self.path_style)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// The archive's file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Parquet,
}

fn default_export_after() -> Duration {
    Duration::from_secs(86_400)
}

impl ArchiveConfig {
    /// The settings for `url` alone (the defaults for everything else).
    pub fn at(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            format: Format::Parquet,
            export_after: default_export_after(),
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            path_style: false,
            ca_file: None,
        }
    }

    /// Where the archive is, parsed.
    ///
    /// # Errors
    /// [`ArchiveError::Config`] naming what is wrong with `url` (or the keys beside it).
    pub fn location(&self) -> Result<Location, ArchiveError> {
        let bad = |why: String| ArchiveError::Config { key: "url", why };
        let url = self.url.trim();
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad(format!(
                    "{url:?}: a file:// URL takes an absolute path (file:///var/lib/idemgate/archive)"
                )));
            }
            if self.endpoint.is_some() || self.access_key_id.is_some() {
                return Err(ArchiveError::Config {
                    key: "endpoint",
                    why: "S3 settings (endpoint, access_key_id, ...) beside a file:// URL".into(),
                });
            }
            return Ok(Location::File(PathBuf::from(path)));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.contains('@') || bucket.contains(':') {
                return Err(bad(format!(
                    "{}: credentials do not go in the URL: set access_key_id and secret_access_key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                    crate::redact(url)
                )));
            }
            if bucket.is_empty() {
                return Err(bad(format!("{url:?}: no bucket (s3://bucket/prefix)")));
            }
            if self.access_key_id.is_some() != self.secret_access_key.is_some() {
                return Err(ArchiveError::Config {
                    key: if self.access_key_id.is_some() {
                        "secret_access_key"
                    } else {
                        "access_key_id"
                    },
                    why: "access_key_id and secret_access_key go together".into(),
                });
            }
            if let Some(e) = &self.endpoint
                && !(e.starts_with("http://") || e.starts_with("https://"))
            {
                return Err(ArchiveError::Config {
                    key: "endpoint",
                    why: format!("{e:?} is not an http:// or https:// URL"),
                });
            }
            return Ok(Location::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
            });
        }
        let scheme = url.split_once("://").map_or(url, |(s, _)| s);
        Err(bad(format!(
            "{}: unknown scheme {scheme:?}: use file:///path or s3://bucket/prefix",
            crate::redact(url)
        )))
    }
}

/// Where an archive is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    File(PathBuf),
    S3 { bucket: String, prefix: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why_not() {
        assert_eq!(
            ArchiveConfig::at("file:///srv/archive").location().unwrap(),
            Location::File("/srv/archive".into())
        );
        assert_eq!(
            ArchiveConfig::at("s3://bucket/a/b/").location().unwrap(),
            Location::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        let e = |u: &str| ArchiveConfig::at(u).location().unwrap_err().to_string();
        assert!(
            e("file://relative").contains("absolute path"),
            "{}",
            e("file://relative")
        );
        assert!(e("gs://b/p").contains("unknown scheme \"gs\""));
        assert!(e("s3://").contains("no bucket"));
        let creds = e("s3://key:secret@bucket/p");
        assert!(
            creds.contains("credentials do not go in the URL"),
            "{creds}"
        );
        assert!(!creds.contains("secret@"), "{creds}");
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let mut c = ArchiveConfig::at("s3://b");
        c.access_key_id = Some("AKIA".into());
        c.secret_access_key = Some("very-secret".into());
        assert!(!format!("{c:?}").contains("very-secret"));
    }
}
