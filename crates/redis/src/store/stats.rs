//! Counting records and history rows for [`Stats`](idemgate_core::Stats): a walk of the
//! keyspace (`SCAN` on every master, one pipelined `HMGET`+`HLEN` per event), so it costs time
//! in proportion to the events stored. Meant for `idemgate stats`, not a scrape every few seconds.

use std::collections::BTreeMap;

use idemgate_core::{SourceName, SourceStats, StoreStats};
use redis::Value;

use super::RedisStore;
use super::record::parse_record;
use crate::error::RedisError;

impl RedisStore {
    pub(super) async fn count(&self) -> Result<StoreStats, RedisError> {
        let keys = &self.shared.keys;
        let pattern = keys.events_pattern();
        let mut conn = self.conn.clone();
        let nodes = conn.masters().await.map_err(RedisError::command("PING"))?;
        let mut stats = StoreStats::default();
        let mut per_source = BTreeMap::<SourceName, SourceStats>::new();
        for node in &nodes {
            let now = conn
                .server_ms(node)
                .await
                .map_err(RedisError::command("TIME"))?;
            let mut cursor = 0;
            loop {
                let (next, page) = conn
                    .scan_page(node, cursor, &pattern)
                    .await
                    .map_err(RedisError::command("SCAN"))?;
                let mut pipe = redis::pipe();
                for key in &page {
                    pipe.cmd("HMGET")
                        .arg(key)
                        .arg(&["r", "n", "f", "p", "g", "o"]);
                    pipe.cmd("HLEN").arg(key);
                }
                let answers: Vec<Value> = if page.is_empty() {
                    Vec::new()
                } else {
                    conn.pipeline_on_node(node, pipe)
                        .await
                        .map_err(RedisError::command("HMGET"))?
                };
                for (key, pair) in page.iter().zip(answers.chunks(2)) {
                    let [fields, len] = pair else { continue };
                    // r, n, f, p, g and o: the fields beside the rows (see `lua/common.lua`).
                    let mut fields: Vec<Option<String>> =
                        redis::from_redis_value(fields.clone())
                            .map_err(|e| RedisError::command("HMGET")(e.into()))?;
                    let len: u64 = redis::from_redis_value(len.clone())
                        .map_err(|e| RedisError::command("HLEN")(e.into()))?;
                    let fixed = fields.iter().filter(|f| f.is_some()).count() as u64;
                    stats.history_rows += len.saturating_sub(fixed);
                    let record = fields.first_mut().and_then(Option::take);
                    let (Some(source), Some(text)) = (keys.source_of(key), record) else {
                        continue;
                    };
                    let (g, o) = (fields[4].as_deref(), fields[5].as_deref());
                    let rec = parse_record(&text, g, o)
                        .ok_or_else(|| RedisError::reply("HMGET", text.clone()))?;
                    let s = per_source
                        .entry(source.clone())
                        .or_insert_with(|| SourceStats {
                            source,
                            live: 0,
                            expired: 0,
                            oldest: None,
                        });
                    if rec.expires_at.as_millis() > now {
                        s.live += 1;
                    } else {
                        s.expired += 1;
                    }
                    s.oldest = Some(s.oldest.map_or(rec.first_seen, |o| o.min(rec.first_seen)));
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        for s in per_source.values() {
            stats.live += s.live;
            stats.expired += s.expired;
            stats.oldest = match (stats.oldest, s.oldest) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        stats.per_source = per_source.into_values().collect();
        Ok(stats)
    }
}
