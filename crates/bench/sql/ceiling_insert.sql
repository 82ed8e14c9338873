-- The ceiling's write: exactly the rows a won claim writes (its dedup row and its 'claimed'
-- history row, as claim_batch's fast path fills them), for a whole batch in one multi-row
-- statement and one transaction, with none of the claim's reads or checks.
-- $1: event ids, $2: nonces (same length).
WITH ins AS (
    INSERT INTO dedup (source, event_id, state, attempt, nonce, fingerprint, first_seen,
                       lease_until, expires_at, holder_instance, holder_boot)
    SELECT 'bench', u.e, 'processing', 1, u.n, NULL, now(), now() + interval '60 s',
           now() + interval '7 days', NULL, NULL
      FROM unnest($1::text[], $2::bigint[]) AS u(e, n)
    RETURNING source, event_id, state, fingerprint
)
INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms,
                     fingerprint)
SELECT ins.source, ins.event_id, 'claimed', ins.state = 'done', 1, now(), NULL, ins.fingerprint
  FROM ins
