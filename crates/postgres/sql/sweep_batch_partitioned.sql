-- One bounded sweep batch in partitioned mode, where partition drops do the real work: at most $1
-- expired rows, oldest first, skipping rows a claim holds right now, deleted by key (tuple ids
-- repeat across partitions), along dedup_expiry (whose predicate, first_seen IS NOT NULL, is
-- stated here).
-- One short transaction; never an unbounded DELETE.
WITH doomed AS (
    SELECT source, event_id, expires_at
      FROM dedup
     WHERE expires_at <= now() AND first_seen IS NOT NULL
     ORDER BY expires_at
     LIMIT $1::bigint
       FOR UPDATE SKIP LOCKED
)
DELETE FROM dedup d
 USING doomed
 WHERE d.source = doomed.source AND d.event_id = doomed.event_id
   AND d.expires_at = doomed.expires_at
