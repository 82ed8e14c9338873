-- One source's history rows counted per outcome in $3 buckets $2 ms wide, the last bucket
-- holding the server's now(), buckets aligned to multiples of the width since the epoch: the
-- dashboard's deliveries over time. An index-only scan of history_reporting (whose predicate,
-- outcome <> '', is stated here: no other statement may use it); partitions older than the
-- window are pruned when the statement runs.
--   $1 source, $2 bucket width (ms), $3 number of buckets.
WITH w AS (
    SELECT epoch_ms(now()) AS now_ms,
           (epoch_ms(now()) / $2::bigint + 1 - $3::bigint) * $2::bigint AS start_ms
)
SELECT w.now_ms, c.bucket, c.outcome, c.n
  FROM w
  LEFT JOIN LATERAL (
      SELECT (epoch_ms(h.received_at) - w.start_ms) / $2::bigint AS bucket,
             h.outcome,
             count(*) AS n
        FROM history h
       WHERE h.source = $1
         AND h.received_at >= to_timestamp(w.start_ms / 1000.0)
         AND h.outcome <> ''
       GROUP BY 1, 2
  ) c ON true
