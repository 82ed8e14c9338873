-- One bounded sweep batch in batched mode (one plain table, so tuple ids are unique): at most $1 expired rows, oldest first
-- along dedup_expires_at, skipping rows a claim holds right now. One short transaction; never an
-- unbounded DELETE. The rows are deleted by their tuple ids, which the lock taken here keeps
-- valid until the DELETE: one heap fetch per row instead of a primary-key probe.
DELETE FROM dedup
 WHERE ctid = ANY (ARRAY(SELECT ctid
                           FROM dedup
                          WHERE expires_at <= now()
                          ORDER BY expires_at
                          LIMIT $1::bigint
                            FOR UPDATE SKIP LOCKED))
