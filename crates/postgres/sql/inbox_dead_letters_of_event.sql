-- The dead letters of one event, source $1 and event $4 (found through inbox_key), that died
-- within $3 ms (ever when NULL), oldest death first, at most $2, each with its attempts oldest
-- first (NULL arrays when none was logged). The same selection as inbox_replay_event.sql.
SELECT i.id, i.source, i.event_id, i.body, i.content_type, i.header_names, i.header_values,
       epoch_ms(i.received_at) AS received_ms, epoch_ms(i.dead_at) AS dead_ms,
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
 WHERE i.source = $1::text AND i.event_id = $4::text AND i.dead_at IS NOT NULL
   AND ($3::bigint IS NULL OR i.dead_at >= now() - $3::bigint * interval '1 ms')
 ORDER BY i.dead_at, i.id
 LIMIT $2::bigint
