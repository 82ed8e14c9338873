-- idemgate PostgreSQL schema, version 10: an inbox event's whole story in history, its queue
-- items found by key, and dedup's expiry index out of every key's reach.
--
-- 1. 'attempt_failed': a delivery from the queue failed and the item waits for a retry; the
--    row's note holds the error (the downstream's status in words, or the transport's error).
--    A dead letter's 'dead_lettered' row now notes its last error too. Before this version a
--    failed attempt was kept only with its queue item, and was gone once the item was delivered.
-- 2. inbox_key: an event's queue items by (source, event_id), for `idemgate lookup`, the event's
--    page and `replay --event-id`. One more index entry per queued delivery.
-- 3. dedup_expiry replaces dedup_expires_at, partial on `first_seen IS NOT NULL` (true of every
--    row), a predicate only the sweeper's statements state, on a column no key's probe tests (a
--    `state = ...` in a probe would imply a predicate on state, and open the index to it). A key's
--    probe says `expires_at > now` (partitioned mode) or `expires_at = <the record's>` (an
--    overwrite or a takeover), and a plan made while the table (or today's partition) was empty
--    chose the expiry index for it, filtering the key: in partitioned mode that walked every
--    record expiring after now, on every claim (a never-analyzed store of 2 M expired rows
--    claimed at a third of its speed). Now a key's only index is the primary key, in every plan.
--
-- Safe while builds of schema 9 still run (a rolling upgrade): they never write the new outcome,
-- and their sweeper, which does not state the new index's predicate, sweeps in bounded batches
-- all the same (walking the table instead of the index) until they are upgraded. The CHECK is
-- replaced NOT VALID (no scan: every existing row passed the narrower check it replaces). The
-- two indexes are built under the migration's lock (writes to the queue, and to dedup, wait):
-- quick on a small queue and a dedup table sized to its TTL; on a large one, create them by hand
-- first with CREATE INDEX CONCURRENTLY (on a partitioned dedup, on each partition, then on the
-- parent ON ONLY and attach them) with the same names and definitions: this migration then
-- keeps them.

ALTER TABLE history DROP CONSTRAINT history_outcome_check;
ALTER TABLE history ADD CONSTRAINT history_outcome_check
    CHECK (outcome IN ('claimed', 'duplicate', 'in_flight', 'conflict', 'reclaimed', 'completed',
                       'released', 'late_duplicate', 'abandoned', 'dead_lettered', 'replayed',
                       'attempt_failed'))
    NOT VALID;

CREATE INDEX IF NOT EXISTS inbox_key ON inbox (source, event_id);

CREATE INDEX IF NOT EXISTS dedup_expiry ON dedup (expires_at) WHERE first_seen IS NOT NULL;
DROP INDEX IF EXISTS dedup_expires_at;
