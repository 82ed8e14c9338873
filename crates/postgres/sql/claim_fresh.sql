-- A lone claim in batched mode, first try: claim_batch's fast path as one plain statement, with
-- no PL/pgSQL. It writes the record and its 'claimed' history row when the key has no record at
-- all (live or expired) and, with late-duplicate detection on, no history; it answers one row
-- then, shaped as claim_batch's, and none otherwise: the claim then goes to claim_batch, which
-- decides it (a duplicate, a takeover, a late duplicate). By the database's clock, read once.
-- $1 source, $2 event id, $3 fingerprint, $4 lease ms, $5 TTL ms, $6 on receipt, $7 nonce,
-- $8 late-duplicate detection, $9 holder instance, $10 holder boot, $11 late-duplicate horizon ms.
-- History before the horizon is not read: statement_timestamp() is fixed when the plan starts,
-- so the monthly partitions wholly before it are pruned then (the probe only decides between
-- this fast path and claim_batch, which judges the horizon exactly).
WITH c AS (
    SELECT clock_timestamp() AS t,
           CASE WHEN $6::boolean THEN 'done' ELSE 'processing' END AS state
), ins AS (
    INSERT INTO dedup AS d (source, event_id, state, attempt, nonce, fingerprint, first_seen,
                            lease_until, expires_at, holder_instance, holder_boot)
    SELECT $1::text, $2::text, c.state, 1, $7::bigint, $3::bytea, c.t,
           CASE WHEN $6 THEN NULL ELSE c.t + $4::bigint * interval '1 ms' END,
           c.t + $5::bigint * interval '1 ms',
           CASE WHEN $6 THEN NULL ELSE $9::text END,
           CASE WHEN $6 THEN NULL ELSE $10::bigint END
      FROM c
           -- A lateral probe, as in claim_batch: never a subplan the planner may hash.
           LEFT JOIN LATERAL (SELECT 1 AS hit FROM history h
                               WHERE $8::text <> 'off' AND h.source = $1 AND h.event_id = $2
                                 AND h.received_at >= statement_timestamp()
                                                      - $11::bigint * interval '1 ms'
                               LIMIT 1) seen ON true
     WHERE seen.hit IS NULL
    ON CONFLICT DO NOTHING
    RETURNING d.source, d.event_id, d.nonce, d.fingerprint, d.state, d.first_seen, d.expires_at
), hist AS (
    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms,
                         fingerprint)
    SELECT ins.source, ins.event_id, 'claimed', ins.state = 'done', 1, ins.first_seen, NULL,
           ins.fingerprint
      FROM ins
)
SELECT 1 AS r_idx, 'claimed'::text AS r_outcome, 1 AS r_attempt, ins.nonce AS r_nonce,
       epoch_ms(ins.first_seen) AS r_first_seen_ms, NULL::text AS r_state,
       NULL::bigint AS r_retry_after_ms, epoch_ms(ins.expires_at) AS r_expires_ms,
       NULL::bigint AS r_late_first_ms
  FROM ins
