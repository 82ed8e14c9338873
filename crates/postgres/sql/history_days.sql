-- Each source's history rows per UTC day received in [$1, $2) (epoch milliseconds), $3 one
-- source or every one, with the partition holding them: what an archive export writes.
SELECT h.source,
       epoch_ms(date_trunc('day', h.received_at, 'UTC')) AS day_ms,
       c.relname::text AS partition,
       count(*) AS n
  FROM history h
  JOIN pg_class c ON c.oid = h.tableoid
 WHERE h.received_at >= timestamptz 'epoch' + $1::bigint * interval '1 millisecond'
   AND h.received_at <  timestamptz 'epoch' + $2::bigint * interval '1 millisecond'
   AND ($3::text IS NULL OR h.source = $3::text)
 GROUP BY 1, 2, 3
 ORDER BY 2, 1
