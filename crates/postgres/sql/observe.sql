-- Every history row of the last $1 milliseconds, for the TTL advisor.
SELECT source, outcome, gap_ms
  FROM history
 WHERE received_at >= now() - $1::bigint * interval '1 ms' AND outcome <> ''
