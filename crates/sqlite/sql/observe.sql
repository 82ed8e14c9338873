-- Every history row since ?1, for the TTL advisor, with its time (walks history_by_time).
SELECT source, outcome, gap_ms, received_at FROM history WHERE received_at >= ?1
