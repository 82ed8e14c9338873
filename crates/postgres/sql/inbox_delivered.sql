-- delivered(item $1, attempt $2): the item goes and history records 'completed', in one
-- statement. Only the attempt a take gave, still held (its lease running, or lapsed while nobody
-- took it again); no row answers a stale report.
WITH gone AS (
    DELETE FROM inbox
     WHERE id = $1::bigint AND attempt = $2::integer AND dead_at IS NULL
       AND lease_until IS NOT NULL
    RETURNING source, event_id, attempt, received_at
), hist AS (
    -- gap_ms: the item's time in the queue and on the way (the queue lag).
    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms)
    SELECT g.source, g.event_id, 'completed', true, g.attempt, now(),
           greatest(0, floor(extract(epoch FROM now() - g.received_at) * 1000))::bigint
      FROM gone g
)
SELECT source, event_id FROM gone
