-- Every history row since ?1, for the TTL advisor (walks history_by_time).
SELECT source, outcome, gap_ms FROM history WHERE received_at >= ?1
