-- delivered(item $1, attempt $2): the item goes and history records 'completed', in one
-- statement. Only the attempt a take gave, still held (its lease running, or lapsed while nobody
-- took it again); no row answers a stale report.
WITH gone AS (
    DELETE FROM inbox
     WHERE id = $1::bigint AND attempt = $2::integer AND dead_at IS NULL
       AND lease_until IS NOT NULL
    RETURNING source, event_id, attempt
), hist AS (
    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at)
    SELECT g.source, g.event_id, 'completed', true, g.attempt, now()
      FROM gone g
)
SELECT source, event_id FROM gone
