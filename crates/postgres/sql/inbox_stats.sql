-- Every source's queue by the database's clock: pending (not dead, not under a running lease),
-- in flight (under a running lease), dead, the age in ms of the oldest item not delivered and
-- not dead (NULL when there is none), how many items not dead failed at least once, and the
-- most recent failed attempt of any item kept (NULL columns when none failed).
SELECT s.source, s.pending, s.in_flight, s.dead, s.oldest_pending_ms, s.failing,
       f.event_id AS failed_event_id, f.attempt AS failed_attempt,
       epoch_ms(f.at) AS failed_ms, f.status AS failed_status, f.error AS failed_error
  FROM (
        SELECT i.source,
               count(*) FILTER (WHERE i.dead_at IS NULL
                                  AND (i.lease_until IS NULL OR i.lease_until <= now()))::bigint
                   AS pending,
               count(*) FILTER (WHERE i.dead_at IS NULL AND i.lease_until > now())::bigint
                   AS in_flight,
               count(*) FILTER (WHERE i.dead_at IS NOT NULL)::bigint AS dead,
               epoch_ms(now()) - epoch_ms(min(i.received_at) FILTER (WHERE i.dead_at IS NULL))
                   AS oldest_pending_ms,
               count(*) FILTER (WHERE i.dead_at IS NULL AND EXISTS (
                   SELECT 1 FROM inbox_attempts x WHERE x.item_id = i.id))::bigint AS failing
          FROM inbox i
         GROUP BY i.source
       ) s
  LEFT JOIN LATERAL (
        SELECT i.event_id, x.attempt, x.at, x.status, x.error
          FROM inbox_attempts x
          JOIN inbox i ON i.id = x.item_id
         WHERE i.source = s.source
         ORDER BY x.at DESC, x.attempt DESC
         LIMIT 1
       ) f ON true
 ORDER BY s.source
