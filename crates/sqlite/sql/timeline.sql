-- One source's history rows from ?2 (Unix ms), counted per outcome in buckets ?3 ms wide: the
-- dashboard's deliveries over time (walks history_by_source_time alone).
SELECT (received_at - ?2) / ?3 AS bucket, outcome, count(*) AS n
  FROM history
 WHERE source = ?1 AND received_at >= ?2
 GROUP BY bucket, outcome
