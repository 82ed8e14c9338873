//! An opened archive: writing a day, reading its manifest back, checking it against the
//! database's count, and finding an event.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};

use idemgate_core::SourceName;

use crate::config::{ArchiveConfig, Location};
use crate::error::ArchiveError;
use crate::layout::{self, Day, MANIFEST};
use crate::manifest::{self, FileEntry, Manifest};
use crate::parquet_file::{self as pq, Sparse};
use crate::row::ArchivedRow;

/// Rows per file: a day holding more is split (`part-<partition>-0`, `-1`, ...).
pub const FILE_ROWS: usize = 1_000_000;

/// Days a lookup reads at once.
const LOOKUP_CONCURRENCY: usize = 16;

/// An archive, opened (nothing is reached until asked).
#[derive(Debug, Clone)]
pub struct Archive {
    store: Arc<dyn ObjectStore>,
    /// The URL as the user wrote it, for messages (it holds no credentials: those are refused).
    shown: String,
}

/// What a lookup found, and how much it read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The event's rows, oldest first.
    pub rows: Vec<ArchivedRow>,
    /// Days whose manifest was read.
    pub days: usize,
    /// Files whose footer was read.
    pub files: usize,
    /// Row groups read whole (a bloom filter let them through).
    pub groups: usize,
}

impl Archive {
    /// Opens the archive `config` names. A local directory is created if missing.
    ///
    /// # Errors
    /// [`ArchiveError::Config`] for a URL or setting that is wrong; [`ArchiveError::Store`] for a
    /// directory that cannot be made.
    pub fn open(config: &ArchiveConfig) -> Result<Self, ArchiveError> {
        let shown = config.url.trim().to_owned();
        let store: Arc<dyn ObjectStore> = match config.location()? {
            Location::File(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| ArchiveError::Store {
                    at: shown.clone(),
                    why: format!("cannot create {}: {e}", dir.display()),
                })?;
                Arc::new(
                    object_store::local::LocalFileSystem::new_with_prefix(&dir)
                        .map_err(|e| ArchiveError::store(shown.clone(), &e))?,
                )
            }
            Location::S3 { bucket, prefix } => {
                let tls = match &config.ca_file {
                    Some(ca) => idemgate_tls::ClientTls::with_ca(ca),
                    None => idemgate_tls::ClientTls::default(),
                }
                .config()
                .map_err(|e| ArchiveError::Config {
                    key: "ca_file",
                    why: e.to_string(),
                })?;
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(&bucket)
                    .with_http_connector(crate::s3::Hyper::new(tls))
                    // A few quick retries: an archive that is away is said so within seconds
                    // (the retention job tries again at its next run).
                    .with_retry(object_store::RetryConfig {
                        max_retries: 3,
                        retry_timeout: std::time::Duration::from_secs(20),
                        ..object_store::RetryConfig::default()
                    })
                    .with_virtual_hosted_style_request(!config.path_style);
                if let Some(endpoint) = &config.endpoint {
                    b = b
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                if let Some(region) = &config.region {
                    b = b.with_region(region);
                }
                if let (Some(id), Some(secret)) = (&config.access_key_id, &config.secret_access_key)
                {
                    b = b.with_access_key_id(id).with_secret_access_key(secret);
                }
                if let Some(token) = &config.session_token {
                    b = b.with_token(token);
                }
                let s3 = b.build().map_err(|e| ArchiveError::Config {
                    key: "url",
                    why: format!("{shown}: {e}"),
                })?;
                if prefix.is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(object_store::prefix::PrefixStore::new(s3, prefix.as_str()))
                }
            }
        };
        Ok(Self { store, shown })
    }

    /// The archive's URL, for messages.
    pub fn url(&self) -> &str {
        &self.shown
    }

    fn at(&self, key: &Path) -> String {
        format!("{}/{key}", self.shown.trim_end_matches('/'))
    }

    /// Checks that the archive can be written and read: writes, reads back and deletes a small
    /// object. Says what failed (unreachable, no bucket, credentials refused, not writable).
    ///
    /// # Errors
    /// [`ArchiveError::Store`].
    pub async fn probe(&self) -> Result<(), ArchiveError> {
        let key = Path::from("_idemgate_probe");
        let body = Bytes::from_static(b"idemgate archive probe\n");
        self.store
            .put(&key, PutPayload::from_bytes(body.clone()))
            .await
            .map_err(|e| match e {
                // S3 answers a write into a missing bucket 404.
                object_store::Error::NotFound { .. } => ArchiveError::Store {
                    at: self.shown.clone(),
                    why: "the bucket does not exist (NoSuchBucket): create it, or correct the bucket in the URL".into(),
                },
                e => ArchiveError::store(self.at(&key), &e),
            })?;
        let back = self
            .store
            .get(&key)
            .await
            .map_err(|e| ArchiveError::store(self.at(&key), &e))?
            .bytes()
            .await
            .map_err(|e| ArchiveError::store(self.at(&key), &e))?;
        if back != body {
            return Err(ArchiveError::Store {
                at: self.at(&key),
                why: "what was written did not read back the same".into(),
            });
        }
        self.store
            .delete(&key)
            .await
            .map_err(|e| ArchiveError::store(self.at(&key), &e))
    }

    /// Starts writing `source`'s `day`, exported from the store's `partition` (a name that goes
    /// into the file names).
    pub fn day_writer(&self, source: &SourceName, day: Day, partition: &str) -> DayWriter<'_> {
        DayWriter {
            archive: self,
            source: source.clone(),
            day,
            partition: partition.to_owned(),
            buffer: Vec::new(),
            files: Vec::new(),
            file_rows: FILE_ROWS,
        }
    }

    /// The days of `source` the archive has a directory for, oldest first.
    ///
    /// # Errors
    /// [`ArchiveError::Store`].
    pub async fn days(&self, source: &SourceName) -> Result<Vec<Day>, ArchiveError> {
        let dir = Path::from(format!("source={}", source.as_str()));
        let listed = self
            .store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|e| ArchiveError::store(self.at(&dir), &e))?;
        let mut days: Vec<Day> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| {
                let last = p.filename()?;
                Day::parse(layout::parse_component(last, "day")?).ok()
            })
            .collect();
        days.sort();
        Ok(days)
    }

    /// The sources the archive has a directory for.
    ///
    /// # Errors
    /// [`ArchiveError::Store`].
    pub async fn sources(&self) -> Result<Vec<SourceName>, ArchiveError> {
        let listed = self
            .store
            .list_with_delimiter(None)
            .await
            .map_err(|e| ArchiveError::store(self.shown.clone(), &e))?;
        let mut out: Vec<SourceName> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| SourceName::new(layout::parse_component(p.filename()?, "source")?).ok())
            .collect();
        out.sort();
        Ok(out)
    }

    /// `source`'s manifest of `day`, if the day was exported.
    ///
    /// # Errors
    /// [`ArchiveError::Store`], or [`ArchiveError::Manifest`] for one that does not parse or
    /// speaks of another day.
    pub async fn manifest(
        &self,
        source: &SourceName,
        day: Day,
    ) -> Result<Option<Manifest>, ArchiveError> {
        let key = Path::from(format!("{}/{MANIFEST}", layout::day_dir(source, day)));
        let got = match self.store.get(&key).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(ArchiveError::store(self.at(&key), &e)),
        };
        let bytes = got
            .bytes()
            .await
            .map_err(|e| ArchiveError::store(self.at(&key), &e))?;
        Manifest::parse(&bytes, source.as_str(), &day.to_string())
            .map(Some)
            .map_err(|why| ArchiveError::Manifest {
                path: self.at(&key),
                why,
            })
    }

    /// Checks an exported day before the database lets go of it: the manifest counts `expected`
    /// rows, and every file it lists is there with the size it says.
    ///
    /// # Errors
    /// [`ArchiveError::Manifest`] saying what differs; [`ArchiveError::Store`].
    pub async fn confirm(
        &self,
        source: &SourceName,
        day: Day,
        expected: u64,
    ) -> Result<Manifest, ArchiveError> {
        let dir = layout::day_dir(source, day);
        let key = Path::from(format!("{dir}/{MANIFEST}"));
        let m = self
            .manifest(source, day)
            .await?
            .ok_or_else(|| ArchiveError::Manifest {
                path: self.at(&key),
                why: "missing: the day was not exported".into(),
            })?;
        if m.rows != expected {
            return Err(ArchiveError::Manifest {
                path: self.at(&key),
                why: format!(
                    "counts {} rows, the database {expected} for the same source and day",
                    m.rows
                ),
            });
        }
        for f in &m.files {
            let path = Path::from(format!("{dir}/{}", f.name));
            let meta = self
                .store
                .head(&path)
                .await
                .map_err(|e| ArchiveError::store(self.at(&path), &e))?;
            if meta.size != f.bytes {
                return Err(mismatch(self.at(&path), meta.size, f.bytes));
            }
        }
        Ok(m)
    }

    /// Every row of `source`'s `day`, each file checked against its manifest entry (size,
    /// checksum, row count) and the schema.
    ///
    /// # Errors
    /// [`ArchiveError::File`] naming the file that differs; [`ArchiveError::Manifest`];
    /// [`ArchiveError::Store`].
    pub async fn read_day(
        &self,
        source: &SourceName,
        day: Day,
    ) -> Result<Vec<ArchivedRow>, ArchiveError> {
        let Some(m) = self.manifest(source, day).await? else {
            return Ok(Vec::new());
        };
        let dir = layout::day_dir(source, day);
        let mut out = Vec::new();
        for f in &m.files {
            let path = Path::from(format!("{dir}/{}", f.name));
            let bytes = self
                .store
                .get(&path)
                .await
                .map_err(|e| ArchiveError::store(self.at(&path), &e))?
                .bytes()
                .await
                .map_err(|e| ArchiveError::store(self.at(&path), &e))?;
            if bytes.len() as u64 != f.bytes {
                return Err(mismatch(self.at(&path), bytes.len() as u64, f.bytes));
            }
            if manifest::sha256(&bytes) != f.sha256 {
                return Err(ArchiveError::File {
                    path: self.at(&path),
                    why:
                        "its SHA-256 differs from the manifest's: the file was changed after export"
                            .into(),
                });
            }
            let rows = pq::decode_all(bytes).map_err(|why| ArchiveError::File {
                path: self.at(&path),
                why,
            })?;
            if rows.len() as u64 != f.rows {
                return Err(ArchiveError::File {
                    path: self.at(&path),
                    why: format!("holds {} rows, its manifest says {}", rows.len(), f.rows),
                });
            }
            out.extend(rows);
        }
        Ok(out)
    }

    /// The rows of `event_id` of `source` on the days in `days` (every archived day of the
    /// source if `None`), oldest first. Per day it reads the manifest; per file, the footer,
    /// then the bloom filter of the one row group whose `event_id` range admits the id, then
    /// that row group only if the filter lets it through.
    ///
    /// # Errors
    /// [`ArchiveError::File`] for a file that differs from its manifest (size, row count) or
    /// is of another schema; [`ArchiveError::Manifest`]; [`ArchiveError::Store`].
    pub async fn lookup(
        &self,
        source: &SourceName,
        event_id: &str,
        days: Option<(Day, Day)>,
    ) -> Result<Found, ArchiveError> {
        let mut all = self.days(source).await?;
        if let Some((from, to)) = days {
            all.retain(|d| *d >= from && *d <= to);
        }
        let results: Vec<Result<Found, ArchiveError>> = futures_util::stream::iter(all)
            .map(|day| self.lookup_day(source, day, event_id))
            .buffer_unordered(LOOKUP_CONCURRENCY)
            .collect()
            .await;
        let mut found = Found::default();
        for r in results {
            let r = r?;
            found.rows.extend(r.rows);
            found.days += r.days;
            found.files += r.files;
            found.groups += r.groups;
        }
        found.rows.sort_by_key(|r| r.received_at);
        Ok(found)
    }

    async fn lookup_day(
        &self,
        source: &SourceName,
        day: Day,
        event_id: &str,
    ) -> Result<Found, ArchiveError> {
        let mut found = Found {
            days: 1,
            ..Found::default()
        };
        let Some(m) = self.manifest(source, day).await? else {
            return Ok(found);
        };
        let dir = layout::day_dir(source, day);
        for f in &m.files {
            let path = Path::from(format!("{dir}/{}", f.name));
            found.files += 1;
            let (rows, groups) = self.lookup_file(&path, f, event_id).await?;
            found.rows.extend(rows);
            found.groups += groups;
        }
        Ok(found)
    }

    async fn lookup_file(
        &self,
        path: &Path,
        entry: &FileEntry,
        event_id: &str,
    ) -> Result<(Vec<ArchivedRow>, usize), ArchiveError> {
        let file_error = |why: String| ArchiveError::File {
            path: self.at(path),
            why,
        };
        // The tail, and the object's real size with it.
        let got = self
            .store
            .get_opts(
                path,
                GetOptions {
                    range: Some(GetRange::Suffix(pq::tail_len(entry.bytes))),
                    ..GetOptions::default()
                },
            )
            .await
            .map_err(|e| ArchiveError::store(self.at(path), &e))?;
        let size = got.meta.size;
        let tail_at = got.range.start;
        let mut tail = got
            .bytes()
            .await
            .map_err(|e| ArchiveError::store(self.at(path), &e))?;
        if size != entry.bytes {
            return Err(mismatch(self.at(path), size, entry.bytes));
        }
        let (meta_at, _) =
            pq::footer_span(size, &tail[tail.len().saturating_sub(8)..]).map_err(file_error)?;
        let mut tail_at = tail_at;
        if meta_at < tail_at {
            tail = self.range(path, meta_at, size).await?;
            tail_at = meta_at;
        }
        let meta = pq::metadata(&tail).map_err(file_error)?;
        let rows: i64 = meta.row_groups().iter().map(|g| g.num_rows()).sum();
        if u64::try_from(rows).ok() != Some(entry.rows) {
            return Err(file_error(format!(
                "holds {rows} rows, its manifest says {}: a partial copy or a changed file",
                entry.rows
            )));
        }
        let mut file = Sparse::new(size);
        file.add(tail_at, tail.clone());
        let mut out = Vec::new();
        let mut groups = 0;
        for g in 0..meta.num_row_groups() {
            let rg = meta.row_group(g);
            if !pq::may_hold(rg, event_id) {
                continue;
            }
            if let Some((at, len)) = pq::bloom_span(rg) {
                file.add(at, self.range(path, at, at + len).await?);
                if !pq::bloom_admits(rg, &file, event_id).map_err(file_error)? {
                    continue;
                }
            }
            let (at, len) = pq::group_span(rg);
            let mut one = Sparse::new(size);
            one.add(tail_at, tail.clone());
            one.add(at, self.range(path, at, at + len).await?);
            groups += 1;
            out.extend(pq::rows_of(one, g, event_id).map_err(file_error)?);
        }
        Ok((out, groups))
    }

    async fn range(&self, path: &Path, start: u64, end: u64) -> Result<Bytes, ArchiveError> {
        self.store
            .get_range(path, start..end)
            .await
            .map_err(|e| ArchiveError::store(self.at(path), &e))
    }

    /// Writes `bytes` at `key` (in the archive).
    async fn put(&self, key: &Path, bytes: Bytes) -> Result<(), ArchiveError> {
        self.store
            .put(key, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| ArchiveError::store(self.at(key), &e))
    }
}

fn mismatch(at: String, size: u64, said: u64) -> ArchiveError {
    ArchiveError::File {
        path: at,
        why: format!("is {size} bytes, its manifest says {said}: a partial copy or a changed file"),
    }
}

/// Writes one day of one source: files of up to [`FILE_ROWS`] rows as rows come, then the
/// manifest, then removes any file of an earlier export of the day that the manifest does not
/// list.
#[derive(Debug)]
pub struct DayWriter<'a> {
    archive: &'a Archive,
    source: SourceName,
    day: Day,
    partition: String,
    buffer: Vec<ArchivedRow>,
    files: Vec<FileEntry>,
    file_rows: usize,
}

impl DayWriter<'_> {
    /// Splits the day into files of at most `rows` rows instead of [`FILE_ROWS`] (at least 1).
    #[must_use]
    pub fn file_rows(mut self, rows: usize) -> Self {
        self.file_rows = rows.max(1);
        self
    }

    /// Adds rows (in the store's order); a full file is written at once.
    ///
    /// # Errors
    /// [`ArchiveError::Write`], [`ArchiveError::Store`].
    pub async fn push(&mut self, rows: Vec<ArchivedRow>) -> Result<(), ArchiveError> {
        for row in rows {
            self.buffer.push(row);
            if self.buffer.len() >= self.file_rows {
                self.flush().await?;
            }
        }
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), ArchiveError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let name = layout::file_name(&self.partition, self.files.len());
        let path = Path::from(format!(
            "{}/{name}",
            layout::day_dir(&self.source, self.day)
        ));
        let mut rows = std::mem::take(&mut self.buffer);
        let count = rows.len() as u64;
        let shown = self.archive.at(&path);
        let bytes = tokio::task::spawn_blocking(move || pq::encode(&mut rows))
            .await
            .map_err(|e| ArchiveError::Write {
                path: shown.clone(),
                why: e.to_string(),
            })?
            .map_err(|why| ArchiveError::Write { path: shown, why })?;
        let entry = FileEntry {
            name,
            rows: count,
            bytes: bytes.len() as u64,
            sha256: manifest::sha256(&bytes),
        };
        self.archive.put(&path, bytes).await?;
        self.files.push(entry);
        Ok(())
    }

    /// Writes what is left, then the manifest; removes files of the day it does not list.
    ///
    /// # Errors
    /// [`ArchiveError::Write`], [`ArchiveError::Store`].
    pub async fn finish(mut self) -> Result<Manifest, ArchiveError> {
        self.flush().await?;
        let dir = layout::day_dir(&self.source, self.day);
        let manifest = Manifest {
            format: manifest::FORMAT.to_owned(),
            version: 1,
            source: self.source.as_str().to_owned(),
            day: self.day.to_string(),
            rows: self.files.iter().map(|f| f.rows).sum(),
            files: std::mem::take(&mut self.files),
            exported_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        };
        let json = serde_json::to_vec_pretty(&manifest).map_err(|e| ArchiveError::Write {
            path: format!("{dir}/{MANIFEST}"),
            why: e.to_string(),
        })?;
        self.archive
            .put(&Path::from(format!("{dir}/{MANIFEST}")), Bytes::from(json))
            .await?;
        // Files an earlier export of the day wrote and this one did not (there can be some
        // only if the day's rows changed in between): the manifest is the truth, and a query
        // engine reading every file must not count them.
        let prefix = Path::from(dir.as_str());
        let listed = self
            .archive
            .store
            .list_with_delimiter(Some(&prefix))
            .await
            .map_err(|e| ArchiveError::store(self.archive.at(&prefix), &e))?;
        for object in listed.objects {
            let Some(name) = object.location.filename() else {
                continue;
            };
            if layout::is_ours(name) && !manifest.files.iter().any(|f| f.name == name) {
                self.archive
                    .store
                    .delete(&object.location)
                    .await
                    .map_err(|e| ArchiveError::store(self.archive.at(&object.location), &e))?;
            }
        }
        Ok(manifest)
    }
}
