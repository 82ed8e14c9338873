-- Each source's queue at ?1: waiting (a lapsed lease included), taken under a live lease, dead,
-- the first receipt of the oldest item not yet delivered, how many items not dead failed at
-- least once, and the most recent failed attempt of any item kept (NULLs when none failed).
-- Walks inbox_by_source, and each source's attempts through their items.
SELECT s.source, s.pending, s.in_flight, s.dead, s.oldest, s.failing,
       f.event_id, f.attempt, f.at, f.status, f.error
FROM (
    SELECT i.source,
           count(*) FILTER (WHERE i.dead_at IS NULL
                              AND (i.lease_until IS NULL OR i.lease_until <= ?1)) AS pending,
           count(*) FILTER (WHERE i.dead_at IS NULL AND i.lease_until > ?1) AS in_flight,
           count(*) FILTER (WHERE i.dead_at IS NOT NULL) AS dead,
           min(i.received_at) FILTER (WHERE i.dead_at IS NULL) AS oldest,
           count(*) FILTER (WHERE i.dead_at IS NULL AND EXISTS (
               SELECT 1 FROM inbox_attempts x WHERE x.item_id = i.id)) AS failing
    FROM inbox_items i
    GROUP BY i.source
) s
LEFT JOIN (
    SELECT i.source, i.event_id, x.attempt, x.at, x.status, x.error,
           row_number() OVER (PARTITION BY i.source ORDER BY x.at DESC, x.attempt DESC) AS nth
    FROM inbox_attempts x JOIN inbox_items i ON i.id = x.item_id
) f ON f.source = s.source AND f.nth = 1
ORDER BY s.source
