-- Every history row of the last $1 milliseconds, for the TTL advisor, with its age by the
-- database's clock (the oldest row of a source says how much of the period it covers).
SELECT source, outcome, gap_ms, epoch_ms(now()) - epoch_ms(received_at) AS age_ms
  FROM history
 WHERE received_at >= now() - $1::bigint * interval '1 ms' AND outcome <> ''
