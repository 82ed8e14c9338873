-- One group-committed batch of claims (see claim_batch in migrations/0009_plan_proof.sql).
SELECT r_idx, r_outcome, r_attempt, r_nonce, r_first_seen_ms, r_state, r_retry_after_ms,
       r_expires_ms, r_late_first_ms
  FROM claim_batch($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::bigint[],
                   $6::boolean[], $7::bigint[], $8::text[], $9::text[], $10::bigint[],
                   $11::bigint[])
