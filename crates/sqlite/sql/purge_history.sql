-- One bounded batch of history older than ?1, oldest first, at most ?2 rows.
DELETE FROM history
WHERE id IN (
    SELECT id FROM history
    WHERE received_at < ?1
    ORDER BY received_at
    LIMIT ?2
)
