-- One source's most recent history rows, newest first, at most $2: the dashboard's recent
-- deliveries. A backward walk of history_reporting (whose predicate, outcome <> '', is stated
-- here), the newest partition first, stopping at the limit.
--   $1 source, $2 limit.
SELECT event_id, outcome, epoch_ms(received_at) AS at_ms, attempt
  FROM history
 WHERE source = $1 AND outcome <> ''
 ORDER BY received_at DESC
 LIMIT $2
