-- idemgate PostgreSQL schema, version 10: an inbox event's whole story in history, and its
-- queue items found by key.
--
-- 1. 'attempt_failed': a delivery from the queue failed and the item waits for a retry; the
--    row's note holds the error (the downstream's status in words, or the transport's error).
--    A dead letter's 'dead_lettered' row now notes its last error too. Before this version a
--    failed attempt was kept only with its queue item, and was gone once the item was delivered.
-- 2. inbox_key: an event's queue items by (source, event_id), for `idemgate lookup`, the event's
--    page and `replay --event-id`. One more index entry per queued delivery.
--
-- Safe while builds of schema 9 still run (a rolling upgrade): they never write the new outcome,
-- and every statement they send still plans as before. Quick on any schema: the CHECK is
-- replaced NOT VALID (no scan: every existing row passed the narrower check it replaces), and
-- the queue is small. On a large queue of dead letters, create the index by hand first with
-- CREATE INDEX CONCURRENTLY and the same name and definition: this migration then keeps it.

ALTER TABLE history DROP CONSTRAINT history_outcome_check;
ALTER TABLE history ADD CONSTRAINT history_outcome_check
    CHECK (outcome IN ('claimed', 'duplicate', 'in_flight', 'conflict', 'reclaimed', 'completed',
                       'released', 'late_duplicate', 'abandoned', 'dead_lettered', 'replayed',
                       'attempt_failed'))
    NOT VALID;

CREATE INDEX IF NOT EXISTS inbox_key ON inbox (source, event_id);
