-- One bounded sweep batch: at most $1 expired rows, oldest first along dedup_expires_at, skipping
-- rows a claim holds right now. One short transaction; never an unbounded DELETE.
WITH doomed AS (
    SELECT source, event_id, expires_at
      FROM dedup
     WHERE expires_at <= now()
     ORDER BY expires_at
     LIMIT $1::bigint
       FOR UPDATE SKIP LOCKED
)
DELETE FROM dedup d
 USING doomed
 WHERE d.source = doomed.source AND d.event_id = doomed.event_id
   AND d.expires_at = doomed.expires_at
