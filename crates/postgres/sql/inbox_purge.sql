-- One bounded purge batch: at most $2 dead letters that died more than $1 ms ago, oldest death
-- first, skipping rows a replay holds right now; their attempts go with them (ON DELETE
-- CASCADE). Never an unbounded DELETE.
DELETE FROM inbox
 WHERE dead_at IS NOT NULL
   AND id = ANY (ARRAY(SELECT id
                         FROM inbox
                        WHERE dead_at IS NOT NULL
                          AND dead_at < now() - $1::bigint * interval '1 ms'
                        ORDER BY dead_at
                        LIMIT $2::bigint
                          FOR UPDATE SKIP LOCKED))
