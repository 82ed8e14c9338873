-- The history of one key, oldest first.
SELECT outcome, attempt, epoch_ms(received_at) AS received_ms, gap_ms, fingerprint, processed,
       note
  FROM history
 WHERE source = $1::text AND event_id = $2::text
 ORDER BY received_at, id
