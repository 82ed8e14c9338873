-- dead_letter(item $1, attempt $2, status $3, error $4): the attempt is logged, the item is kept
-- as a dead letter (body and attempts stay), and history records 'dead_lettered' with the error.
-- Stale reports (no row) change nothing.
WITH dead AS (
    UPDATE inbox
       SET dead_at = now(), lease_until = NULL, holder_instance = NULL, holder_boot = NULL
     WHERE id = $1::bigint AND attempt = $2::integer AND dead_at IS NULL
       AND lease_until IS NOT NULL
    RETURNING id, attempt, source, event_id
), logged AS (
    INSERT INTO inbox_attempts (item_id, attempt, at, status, error)
    SELECT d.id, d.attempt, now(), $3::integer, $4::text
      FROM dead d
), hist AS (
    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, note)
    SELECT d.source, d.event_id, 'dead_lettered', false, d.attempt, now(), $4::text
      FROM dead d
)
SELECT source, event_id FROM dead
