-- One page of source $1's history rows received in [$2, $3) (epoch milliseconds), after the row
-- at ($4 microseconds since the epoch, id $5), in (received_at, id) order: an archive export's
-- read. The cursor's time is also a plain lower bound, so the walk of history_by_source_time
-- starts at the page's first row instead of the day's.
SELECT event_id, outcome, attempt, epoch_ms(received_at) AS received_ms, gap_ms, fingerprint,
       processed, note,
       (extract(epoch FROM received_at) * 1000000)::bigint AS position, id
  FROM history
 WHERE source = $1::text
   AND received_at >= greatest(timestamptz 'epoch' + $2::bigint * interval '1 millisecond',
                               timestamptz 'epoch' + $4::bigint * interval '1 microsecond')
   AND received_at < timestamptz 'epoch' + $3::bigint * interval '1 millisecond'
   AND (received_at, id) > (timestamptz 'epoch' + $4::bigint * interval '1 microsecond',
                            $5::bigint)
 ORDER BY received_at, id
 LIMIT $6::bigint
