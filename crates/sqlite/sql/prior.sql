-- What history says of an event whose record is absent: its first receipt, and whether its last
-- processed-or-released row was processed (NULL, NULL when it was never received).
SELECT
    (SELECT received_at FROM history
      WHERE source = ?1 AND event_id = ?2
      ORDER BY id LIMIT 1),
    (SELECT processed FROM history
      WHERE source = ?1 AND event_id = ?2 AND (processed = 1 OR outcome = 'released')
      ORDER BY id DESC LIMIT 1)
