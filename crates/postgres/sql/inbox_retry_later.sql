-- retry_later(item $1, attempt $2, delay $3 ms, status $4, error $5): the attempt is logged, the
-- item is due again $3 ms from now, no longer held, and history records 'attempt_failed' with the
-- error. Stale reports (no row) change nothing.
WITH moved AS (
    UPDATE inbox
       SET due_at = now() + $3::bigint * interval '1 ms', lease_until = NULL,
           holder_instance = NULL, holder_boot = NULL
     WHERE id = $1::bigint AND attempt = $2::integer AND dead_at IS NULL
       AND lease_until IS NOT NULL
    RETURNING id, attempt, source, event_id
), logged AS (
    INSERT INTO inbox_attempts (item_id, attempt, at, status, error)
    SELECT m.id, m.attempt, now(), $4::integer, $5::text
      FROM moved m
), hist AS (
    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, note)
    SELECT m.source, m.event_id, 'attempt_failed', false, m.attempt, now(), $5::text
      FROM moved m
)
SELECT source, event_id FROM moved
