-- requeue(req, item, reason): an operator's forced replay. The claim and its queue item as
-- enqueue makes them; when the claim was not won (the event is done within its TTL), the item is
-- queued anyway; and history records 'replayed' with the reason. One statement: all or nothing.
-- The answer is the claim's (r_item is the claim's own item, NULL when it was not won).
WITH c AS (
    SELECT r_outcome, r_attempt, r_nonce, r_first_seen_ms, r_state, r_retry_after_ms,
           r_expires_ms, r_late_first_ms, r_item
      FROM enqueue_claim($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint, $6::bigint,
                         $7::text, $8::bytea, $9::text, $10::text[], $11::text[], $12::bigint)
), forced AS (
    INSERT INTO inbox (source, event_id, body, content_type, header_names, header_values,
                       received_at, due_at)
    SELECT $1::text, $2::text, $8::bytea, $9::text, $10::text[], $11::text[], now(), now()
      FROM c
     WHERE c.r_item IS NULL
    RETURNING id
), hist AS (
    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, note)
    SELECT $1::text, $2::text, 'replayed', false, 0, now(), $13::text
      FROM c
)
SELECT r_outcome, r_attempt, r_nonce, r_first_seen_ms, r_state, r_retry_after_ms, r_expires_ms,
       r_late_first_ms, r_item
  FROM c
