//! The sources' history streams: appending to them (best-effort, when the scripts cannot),
//! tallying them for the TTL advisor ([`HistoryQuery::observe`](idemgate_core::HistoryQuery)) and
//! trimming them in bounded batches
//! ([`HistoryRetention`](idemgate_core::HistoryRetention)). Each event's own history lives in its
//! hash and is written by the scripts (`claims`).

use std::num::NonZeroU32;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use idemgate_core::advise::{Observation, Tally};
use idemgate_core::{HistoryOutcome, Key};
use redis::Value;
use tracing::warn;

use super::{RedisStore, SourceStreams, ms};
use crate::error::RedisError;

impl RedisStore {
    /// A script could not add to the source's stream (logged at most once a minute).
    pub(super) fn stream_failed(&self, key: &Key) {
        if let Some(held_back) = self.shared.stream_errors.check() {
            warn!(
                source = %key.source,
                held_back,
                "cannot append to the source's history stream (best-effort; the event's own history is intact)"
            );
        }
    }

    /// Best-effort: one entry in the source's capped stream. Failures are logged (at most once a
    /// minute) and otherwise ignored.
    pub(super) async fn append_stream(
        &self,
        key: &Key,
        outcome: HistoryOutcome,
        attempt: Option<u32>,
        gap_ms: Option<u64>,
    ) {
        let Some(maxlen) = self.shared.cfg.source_stream_maxlen else {
            return;
        };
        let mut cmd = redis::cmd("XADD");
        cmd.arg(self.shared.keys.stream(&key.source))
            .arg("MAXLEN")
            .arg("~")
            .arg(maxlen.get())
            .arg("*")
            .arg("id")
            .arg(key.event_id.as_str())
            .arg("outcome")
            .arg(outcome.as_str());
        if let Some(a) = attempt {
            cmd.arg("attempt").arg(a);
        }
        if let Some(g) = gap_ms {
            cmd.arg("gap_ms").arg(g);
        }
        let mut conn = self.conn.clone();
        if let Err(error) = cmd.query_async::<Value>(&mut conn).await
            && let Some(held_back) = self.shared.stream_errors.check()
        {
            warn!(
                %error,
                source = %key.source,
                held_back,
                "cannot append to the source's history stream (best-effort; the event's own history is intact)"
            );
        }
    }

    /// Every source's history stream, by the master that holds it.
    async fn streams(&self) -> Result<SourceStreams, RedisError> {
        let pattern = self.shared.keys.streams_pattern();
        let mut conn = self.conn.clone();
        let nodes = conn.masters().await.map_err(RedisError::command("PING"))?;
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            let mut found = Vec::new();
            let mut cursor = 0;
            loop {
                let (next, page) = conn
                    .scan_page(&node, cursor, &pattern)
                    .await
                    .map_err(RedisError::command("SCAN"))?;
                found.extend(
                    page.into_iter()
                        .filter_map(|k| Some((self.shared.keys.source_of(&k)?, k))),
                );
                if next == 0 {
                    break;
                }
                cursor = next;
            }
            out.push((node, found));
        }
        Ok(out)
    }

    pub(super) async fn observe_streams(
        &self,
        period: Duration,
    ) -> Result<Vec<Observation>, RedisError> {
        const PAGE: usize = 1_000;
        let mut conn = self.conn.clone();
        let mut tally = Tally::default();
        for (node, streams) in self.streams().await? {
            let now = conn
                .server_ms(&node)
                .await
                .map_err(RedisError::command("TIME"))?;
            let since = now.saturating_sub(i64::try_from(ms(period)).unwrap_or(i64::MAX));
            for (source, key) in streams {
                let mut from = format!("{}-0", since.max(0));
                loop {
                    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                        .arg(&key)
                        .arg(&from)
                        .arg("+")
                        .arg("COUNT")
                        .arg(PAGE)
                        .query_async(&mut conn)
                        .await
                        .map_err(RedisError::command("XRANGE"))?;
                    for (id, fields) in &entries {
                        let field = |name: &str| {
                            fields
                                .chunks(2)
                                .find(|kv| kv[0] == name)
                                .and_then(|kv| kv.get(1))
                                .filter(|v| !v.is_empty())
                        };
                        let Some(outcome) = field("outcome").and_then(|o| HistoryOutcome::parse(o))
                        else {
                            continue;
                        };
                        let gap = field("gap_ms")
                            .and_then(|g| g.parse().ok())
                            .map(Duration::from_millis);
                        tally.add(source.clone(), outcome, gap);
                        // A stream entry's id starts with its time, by the server's clock.
                        if let Some(at) = id.split('-').next().and_then(|t| t.parse::<i64>().ok()) {
                            tally.seen(
                                &source,
                                Duration::from_millis(u64::try_from(now - at).unwrap_or(0)),
                            );
                        }
                    }
                    match entries.last() {
                        Some((id, _)) if entries.len() == PAGE => from = format!("({id}"),
                        _ => break,
                    }
                }
            }
        }
        Ok(tally.finish(period))
    }

    /// Trims the source streams' entries older than `retention`, at most `batch` in all.
    pub(super) async fn trim_streams(
        &self,
        retention: Duration,
        batch: NonZeroU32,
    ) -> Result<u64, RedisError> {
        const FRESH: Duration = Duration::from_secs(60);
        let cached = self
            .shared
            .purge_streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .filter(|(at, _)| at.elapsed() < FRESH);
        let streams = match cached {
            Some((_, streams)) => streams,
            None => {
                let streams = self.streams().await?;
                *self
                    .shared
                    .purge_streams
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) =
                    Some((Instant::now(), streams.clone()));
                streams
            }
        };
        let mut conn = self.conn.clone();
        let mut left = u64::from(batch.get());
        let mut trimmed = 0;
        for (node, streams) in streams {
            let now = conn
                .server_ms(&node)
                .await
                .map_err(RedisError::command("TIME"))?;
            let cutoff = now.saturating_sub(i64::try_from(ms(retention)).unwrap_or(i64::MAX));
            if cutoff <= 0 {
                continue;
            }
            for (_, key) in streams {
                if left == 0 {
                    return Ok(trimmed);
                }
                // The oldest `left` entries before the cutoff: trim up to just past the last of
                // them, so no more than `left` go.
                let old: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg(format!("({cutoff}-0"))
                    .arg("COUNT")
                    .arg(left)
                    .query_async(&mut conn)
                    .await
                    .map_err(RedisError::command("XRANGE"))?;
                let Some((last, _)) = old.last() else {
                    continue;
                };
                let (ms_part, seq) = last
                    .split_once('-')
                    .and_then(|(m, s)| Some((m.parse::<u64>().ok()?, s.parse::<u64>().ok()?)))
                    .ok_or_else(|| RedisError::reply("XRANGE", last.clone()))?;
                let n: u64 = redis::cmd("XTRIM")
                    .arg(&key)
                    .arg("MINID")
                    .arg("=")
                    .arg(format!("{ms_part}-{}", seq + 1))
                    .query_async(&mut conn)
                    .await
                    .map_err(RedisError::command("XTRIM"))?;
                trimmed += n;
                left = left.saturating_sub(n);
            }
        }
        Ok(trimmed)
    }
}
