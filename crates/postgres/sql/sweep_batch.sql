-- One bounded sweep batch in batched mode (one plain table, so tuple ids are unique): at most $1
-- expired rows, oldest first along dedup_expiry (whose predicate, first_seen IS NOT NULL, is
-- stated here: no key's probe may use it), skipping rows a claim holds right now. One short
-- transaction; never an unbounded DELETE. The rows are deleted by their tuple ids, which
-- the lock taken here keeps valid until the DELETE: one heap fetch per row instead of a
-- primary-key probe.
--
-- $2 is where the run's previous batch ended (the latest expires_at it deleted), or NULL for a
-- run's first batch. The index scan starts there instead of at the oldest entry: a deleted row
-- keeps its index entry until VACUUM, so without it every batch would walk over the entries of
-- every row the run's earlier batches deleted (millions, late in a large sweep). Nothing expired
-- lies below it but rows a claim held when a batch passed them (SKIP LOCKED), which the next run
-- deletes: no claim gives a row an expires_at in the past. Answers the rows deleted and the new
-- end (NULL when none were).
WITH gone AS (
    DELETE FROM dedup
     WHERE ctid = ANY (ARRAY(SELECT ctid
                               FROM dedup
                              WHERE expires_at <= now() AND first_seen IS NOT NULL
                                AND expires_at >= coalesce($2::timestamptz, '-infinity')
                              ORDER BY expires_at
                              LIMIT $1::bigint
                                FOR UPDATE SKIP LOCKED))
    RETURNING expires_at
)
SELECT count(*) AS deleted, max(expires_at) AS last FROM gone
