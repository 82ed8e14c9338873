-- idemgate PostgreSQL schema, version 4: completions and releases group-committed like claims.
--
-- Applied by migrate.rs as the earlier versions are (one transaction, the schema's migration lock,
-- search_path on the store's schema). Adds one function and changes no table: quick on any schema,
-- and a build of schema 3 still running keeps calling complete_claim and release_claim, which stay.

-- finish_batch(tokens): completes (p_release false) or releases (p_release true) each token's
-- claim, in one transaction; answers, per element (r_idx, 1-based), whether the token held it:
-- exactly what complete_claim and release_claim answer one at a time, with the same history rows.
--
-- Elements naming distinct keys take the set-based path: one UPDATE, one DELETE and one history
-- INSERT for all of them. An element that did not finish there (a stale token, or one whose
-- record is already done) is then checked by a statement of its own, so that it sees what a
-- concurrent takeover committed while the UPDATE waited for the row, as complete_claim's second
-- statement does. Elements sharing a key (no caller finishes one token twice at once, but nothing
-- here relies on it) go one at a time, in order, through complete_claim and release_claim.
CREATE FUNCTION finish_batch(
    p_source   text[],
    p_event_id text[],
    p_attempt  integer[],
    p_nonce    bigint[],
    p_release  boolean[]
)
RETURNS TABLE (r_idx integer, r_held boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n        integer := coalesce(cardinality(p_source), 0);
    v_now      timestamptz := clock_timestamp();
    v_finished bigint[];
    v_rest     record;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;

    -- A lone finish (an idle store's usual batch) skips the set-based path's fixed cost.
    IF v_n = 1 THEN
        r_idx := 1;
        IF p_release[1] THEN
            r_held := release_claim(p_source[1], p_event_id[1], p_attempt[1], p_nonce[1]);
        ELSE
            r_held := complete_claim(p_source[1], p_event_id[1], p_attempt[1], p_nonce[1]);
        END IF;
        RETURN NEXT;
        RETURN;
    END IF;

    WITH u AS (
        SELECT x.s, x.e, x.a, x.nc, x.rel, x.i,
               count(*) OVER (PARTITION BY x.s COLLATE "C", x.e COLLATE "C") AS named
          FROM unnest(p_source, p_event_id, p_attempt, p_nonce, p_release)
               WITH ORDINALITY AS x(s, e, a, nc, rel, i)
         WHERE x.i <= v_n
    ), solo AS (
        SELECT * FROM u WHERE u.named = 1
    ), done AS (
        UPDATE dedup d SET state = 'done', lease_until = NULL, holder_instance = NULL,
                           holder_boot = NULL
          FROM solo
         WHERE NOT solo.rel AND d.source = solo.s AND d.event_id = solo.e
           AND d.expires_at > v_now AND d.attempt = solo.a AND d.nonce = solo.nc
           AND d.state = 'processing'
        RETURNING solo.i, d.source, d.event_id, d.attempt, d.fingerprint
    ), gone AS (
        DELETE FROM dedup d
         USING solo
         WHERE solo.rel AND d.source = solo.s AND d.event_id = solo.e
           AND d.expires_at > v_now AND d.attempt = solo.a AND d.nonce = solo.nc
        RETURNING solo.i, d.source, d.event_id, d.attempt, d.fingerprint
    ), hist AS (
        INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms,
                             fingerprint)
        SELECT done.source, done.event_id, 'completed', true, done.attempt, v_now, NULL::bigint,
               done.fingerprint
          FROM done
        UNION ALL
        SELECT gone.source, gone.event_id, 'released', false, gone.attempt, v_now, NULL::bigint,
               gone.fingerprint
          FROM gone
    )
    SELECT coalesce(array_agg(f.i), '{}')
      INTO v_finished
      FROM (SELECT done.i FROM done UNION ALL SELECT gone.i FROM gone) f;

    -- What the set-based path did not finish: a release of a stale token holds nothing; a
    -- completion holds when the record is already done under this very token. A statement of
    -- its own: its snapshot has what a takeover committed while the UPDATE above waited for
    -- the row.
    RETURN QUERY
    SELECT x.i::integer,
           x.i = ANY (v_finished)
           OR (NOT x.rel AND EXISTS (SELECT 1 FROM dedup d
                                      WHERE d.source = x.s AND d.event_id = x.e
                                        AND d.expires_at > v_now AND d.attempt = x.a
                                        AND d.nonce = x.nc))
      FROM (SELECT y.*,
                   count(*) OVER (PARTITION BY y.s COLLATE "C", y.e COLLATE "C") AS named
              FROM unnest(p_source, p_event_id, p_attempt, p_nonce, p_release)
                   WITH ORDINALITY AS y(s, e, a, nc, rel, i)
             WHERE y.i <= v_n) x
     WHERE x.named = 1;

    FOR v_rest IN
        SELECT z.*
          FROM (SELECT y.*,
                       count(*) OVER (PARTITION BY y.s COLLATE "C", y.e COLLATE "C") AS named
                  FROM unnest(p_source, p_event_id, p_attempt, p_nonce, p_release)
                       WITH ORDINALITY AS y(s, e, a, nc, rel, i)
                 WHERE y.i <= v_n) z
         WHERE z.named > 1
         ORDER BY z.i
    LOOP
        r_idx := v_rest.i;
        IF v_rest.rel THEN
            r_held := release_claim(v_rest.s, v_rest.e, v_rest.a, v_rest.nc);
        ELSE
            r_held := complete_claim(v_rest.s, v_rest.e, v_rest.a, v_rest.nc);
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;
