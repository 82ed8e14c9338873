-- One page of source $1's history rows received in [$2, $3), after the row at ($4, id $5), in
-- (received_at, id) order: an archive export's read. $2 is already the later of the range's
-- start and the cursor's time, so the walk of history_by_source_time starts at the page's first
-- row; plain parameters (not expressions) let the plan use them as the index's bounds.
SELECT event_id, outcome, attempt, epoch_ms(received_at) AS received_ms, gap_ms, fingerprint,
       processed, note,
       (extract(epoch FROM received_at) * 1000000)::bigint AS position, id
  FROM history
 WHERE source = $1::text
   -- True of every row; stated so the walk may use history_reporting (partial on it).
   AND outcome <> ''
   AND received_at >= $2::timestamptz
   AND received_at < $3::timestamptz
   AND (received_at, id) > ($4::timestamptz, $5::bigint)
 ORDER BY received_at, id
 LIMIT $6::bigint
