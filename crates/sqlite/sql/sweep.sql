-- One bounded batch: the oldest expired records, at most ?2 of them.
DELETE FROM dedup
WHERE (source, event_id) IN (
    SELECT source, event_id FROM dedup
    WHERE expires_at <= ?1
    ORDER BY expires_at
    LIMIT ?2
)
