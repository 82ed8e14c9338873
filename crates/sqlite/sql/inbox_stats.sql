-- Each source's queue at ?1: waiting (a lapsed lease included), taken under a live lease, dead,
-- and the first receipt of the oldest item not yet delivered. Walks inbox_by_source only.
SELECT source,
       count(*) FILTER (WHERE dead_at IS NULL AND (lease_until IS NULL OR lease_until <= ?1)),
       count(*) FILTER (WHERE dead_at IS NULL AND lease_until > ?1),
       count(*) FILTER (WHERE dead_at IS NOT NULL),
       min(received_at) FILTER (WHERE dead_at IS NULL)
FROM inbox_items
GROUP BY source
ORDER BY source
