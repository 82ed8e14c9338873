-- idemgate PostgreSQL schema, version 6: finish_batch finds each record by its key.
--
-- finish_batch joins its tokens to dedup. A session plans that join once and keeps the plan
-- (PL/pgSQL caches it) for as long as the connection lives; planned while dedup was small (a new
-- store, or the first minutes of a bench), the cheapest join was to read all of dedup and hash it,
-- and every batch after that read all of dedup again, however large it had grown: 5 to 6 ms a
-- batch at 30,000 records, most of a busy server's CPU. Every record finish_batch touches is one
-- key's, so its statements are planned without sequential scans, hash or merge joins: a nested
-- loop of primary-key lookups, whatever the table's size when the plan was made. Changes no table.

ALTER FUNCTION finish_batch(text[], text[], integer[], bigint[], boolean[])
    SET enable_seqscan = off
    SET enable_hashjoin = off
    SET enable_mergejoin = off;
