-- Every source's queue by the database's clock: pending (not dead, not under a running lease),
-- in flight (under a running lease), dead, and the age in ms of the oldest item not delivered
-- and not dead (NULL when there is none).
SELECT source,
       count(*) FILTER (WHERE dead_at IS NULL
                          AND (lease_until IS NULL OR lease_until <= now()))::bigint AS pending,
       count(*) FILTER (WHERE dead_at IS NULL AND lease_until > now())::bigint AS in_flight,
       count(*) FILTER (WHERE dead_at IS NOT NULL)::bigint AS dead,
       epoch_ms(now()) - epoch_ms(min(received_at) FILTER (WHERE dead_at IS NULL))
           AS oldest_pending_ms
  FROM inbox
 GROUP BY source
 ORDER BY source
