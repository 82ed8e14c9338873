-- queued(source $1, event $2): the event's queue items (waiting, in flight or dead), oldest
-- first, each with its failed attempts oldest first (NULL arrays when none was logged), by the
-- database's clock. Found through inbox_key.
SELECT i.id, epoch_ms(i.received_at) AS received_ms, epoch_ms(i.due_at) AS due_ms, i.attempt,
       CASE WHEN i.dead_at IS NULL AND i.lease_until > now() THEN epoch_ms(i.lease_until) END
           AS in_flight_until_ms,
       epoch_ms(i.dead_at) AS dead_ms,
       a.attempts, a.ats_ms, a.statuses, a.errors
  FROM inbox i
  LEFT JOIN LATERAL (
        SELECT array_agg(x.attempt ORDER BY x.attempt) AS attempts,
               array_agg(epoch_ms(x.at) ORDER BY x.attempt) AS ats_ms,
               array_agg(x.status ORDER BY x.attempt) AS statuses,
               array_agg(x.error ORDER BY x.attempt) AS errors
          FROM inbox_attempts x
         WHERE x.item_id = i.id
       ) a ON true
 WHERE i.source = $1::text AND i.event_id = $2::text
 ORDER BY i.id
