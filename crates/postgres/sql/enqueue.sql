-- enqueue(req, item): the claim, done at once, and its queue item in one call (one transaction);
-- see enqueue_claim in migrations/0009_plan_proof.sql. r_item is NULL when nothing was queued.
SELECT r_outcome, r_attempt, r_nonce, r_first_seen_ms, r_state, r_retry_after_ms, r_expires_ms,
       r_late_first_ms, r_item
  FROM enqueue_claim($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint, $6::bigint, $7::text,
                     $8::bytea, $9::text, $10::text[], $11::text[], $12::bigint)
