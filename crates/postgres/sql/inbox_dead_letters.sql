-- Dead letters of source $1 (every source when NULL), that died within $3 ms (ever when NULL),
-- none when an event $4 is given (one source's event is inbox_dead_letters_of_event.sql's),
-- oldest death first, at most $2, each with its attempts oldest first (NULL arrays when none
-- was logged). The same selection as inbox_replay.sql.
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
 WHERE i.dead_at IS NOT NULL AND ($1::text IS NULL OR i.source = $1::text)
   AND ($3::bigint IS NULL OR i.dead_at >= now() - $3::bigint * interval '1 ms')
   -- One source's event is inbox_dead_letters_of_event.sql's; an event id without its source
   -- selects nothing.
   AND $4::text IS NULL
 ORDER BY i.dead_at, i.id
 LIMIT $2::bigint
