-- idemgate PostgreSQL schema, version 7: a record says whether a completion made it done.
--
-- A done record is either completed (its claim's work succeeded) or marked done on receipt. A
-- release may undo the second (mark-on-receipt's undo when its work fails), never the first:
-- before this version, a release sent with a completed claim's token deleted the record, and the
-- next delivery was processed again. Now such a release changes nothing and is answered as
-- refused (release_claim and finish_batch answer NULL for it, where they answered true or false).
--
-- Quick on any schema: the column is nullable without a default (a catalog change, no rewrite;
-- NULL reads as "not completed", which every record done before this version is taken to be),
-- and the functions are replaced in place with the signatures they had, so a build of schema 6
-- still running keeps working (it would read the refusal's NULL as an error, which is what it
-- should have answered).

ALTER TABLE dedup ADD COLUMN completed boolean;

-- complete(token): as in schema 2, and the record says it was completed.
CREATE OR REPLACE FUNCTION complete_claim(p_source text, p_event_id text, p_attempt integer,
                                          p_nonce bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_fp  bytea;
BEGIN
    UPDATE dedup SET state = 'done', lease_until = NULL, holder_instance = NULL,
                     holder_boot = NULL, completed = true
     WHERE source = p_source AND event_id = p_event_id AND expires_at > v_now
       AND attempt = p_attempt AND nonce = p_nonce AND state = 'processing'
    RETURNING fingerprint INTO v_fp;
    IF FOUND THEN
        INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms,
                             fingerprint)
        VALUES (p_source, p_event_id, 'completed', true, p_attempt, v_now, NULL, v_fp);
        RETURN true;
    END IF;
    -- Already done under this very token: nothing to change, not an error.
    RETURN EXISTS (SELECT 1 FROM dedup
                    WHERE source = p_source AND event_id = p_event_id AND expires_at > v_now
                      AND attempt = p_attempt AND nonce = p_nonce);
END
$$;

-- release(token): true when the token's record was deleted (processing, or marked done on
-- receipt), false when the token is stale, NULL when the token completed the record (refused,
-- nothing changed).
CREATE OR REPLACE FUNCTION release_claim(p_source text, p_event_id text, p_attempt integer,
                                         p_nonce bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_fp  bytea;
BEGIN
    DELETE FROM dedup
     WHERE source = p_source AND event_id = p_event_id AND expires_at > v_now
       AND attempt = p_attempt AND nonce = p_nonce AND completed IS NOT TRUE
    RETURNING fingerprint INTO v_fp;
    IF FOUND THEN
        INSERT INTO history (source, event_id, outcome, attempt, received_at, gap_ms, fingerprint)
        VALUES (p_source, p_event_id, 'released', p_attempt, v_now, NULL, v_fp);
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM dedup
                WHERE source = p_source AND event_id = p_event_id AND expires_at > v_now
                  AND attempt = p_attempt AND nonce = p_nonce AND completed) THEN
        RETURN NULL;
    END IF;
    RETURN false;
END
$$;

-- claim_one: as in schema 2; a claim that overwrites an expired record starts it uncompleted.
CREATE OR REPLACE FUNCTION claim_one(
    p_source          text,
    p_event_id        text,
    p_fingerprint     bytea,
    p_lease_ms        bigint,
    p_ttl_ms          bigint,
    p_on_receipt      boolean,
    p_nonce           bigint,
    p_partitioned     boolean,
    p_late            text,
    p_holder_instance text,
    p_holder_boot     bigint,
    OUT r_outcome        text,
    OUT r_attempt        integer,
    OUT r_nonce          bigint,
    OUT r_first_seen_ms  bigint,
    OUT r_state          text,
    OUT r_retry_after_ms bigint,
    OUT r_expires_ms     bigint,
    OUT r_late_first_ms  bigint
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_state       text := CASE WHEN p_on_receipt THEN 'done' ELSE 'processing' END;
    v_now         timestamptz;
    v_rec         dedup%ROWTYPE;
    v_history     text;
    v_gap         bigint;
    v_turns       integer := 0;
    v_processed   boolean := false;
    v_prior_first timestamptz;
    v_prior_done  boolean;
    v_late        boolean;
    v_first       timestamptz;
    v_new_state   text;
    v_found       boolean;
    v_attempt     integer;
BEGIN
    LOOP
        v_turns := v_turns + 1;
        IF v_turns > 100 THEN
            RAISE EXCEPTION 'idemgate: claim of %/% did not settle after 100 attempts',
                p_source, p_event_id;
        END IF;
        v_now := clock_timestamp();
        v_gap := NULL;
        v_history := NULL;
        v_processed := false;
        r_retry_after_ms := NULL;
        r_state := NULL;
        r_late_first_ms := NULL;

        IF p_partitioned THEN
            -- Expired rows may still sit in partitions not yet dropped: only a live one counts.
            SELECT d.* INTO v_rec FROM dedup d
             WHERE d.source = p_source AND d.event_id = p_event_id AND d.expires_at > v_now;
        ELSE
            SELECT d.* INTO v_rec FROM dedup d
             WHERE d.source = p_source AND d.event_id = p_event_id;
        END IF;

        v_found := FOUND;
        IF NOT v_found OR v_rec.expires_at <= v_now THEN
            -- Absent (or expired, not yet swept): a first receipt, unless history shows the event
            -- processed before: a late duplicate, handled by p_late ('off', 'flag', 'reject').
            -- Read afresh on this turn, in one statement (see above).
            v_prior_first := NULL;
            v_prior_done := NULL;
            IF p_late <> 'off' THEN
                SELECT f.received_at, p.processed INTO v_prior_first, v_prior_done
                  FROM (SELECT h.received_at FROM history h
                         WHERE h.source = p_source AND h.event_id = p_event_id
                         ORDER BY h.id LIMIT 1) f
                  LEFT JOIN LATERAL (SELECT h.processed FROM history h
                                      WHERE h.source = p_source AND h.event_id = p_event_id
                                        AND (h.processed OR h.outcome = 'released')
                                      ORDER BY h.id DESC LIMIT 1) p ON true;
            END IF;
            -- Never a late duplicate without a first receipt to date it from.
            v_late := v_prior_first IS NOT NULL AND coalesce(v_prior_done, false);
            v_first := CASE WHEN v_late THEN v_prior_first ELSE v_now END;
            v_new_state := CASE WHEN v_late AND p_late = 'reject' THEN 'done' ELSE v_state END;
            IF NOT v_found THEN
                -- Partitioned mode holds the key's lock, so nobody races this insert; in batched
                -- mode a concurrent claim may win it, and we read again.
                INSERT INTO dedup (source, event_id, state, attempt, nonce, fingerprint,
                                   first_seen, lease_until, expires_at, holder_instance,
                                   holder_boot)
                VALUES (p_source, p_event_id, v_new_state, 1, p_nonce, p_fingerprint, v_first,
                        CASE WHEN v_new_state = 'done' THEN NULL
                             ELSE v_now + p_lease_ms * interval '1 ms' END,
                        v_now + p_ttl_ms * interval '1 ms',
                        CASE WHEN v_new_state = 'done' THEN NULL ELSE p_holder_instance END,
                        CASE WHEN v_new_state = 'done' THEN NULL ELSE p_holder_boot END)
                ON CONFLICT DO NOTHING;
            ELSE
                -- The expired row we read (batched mode only: partitioned mode never finds an
                -- expired one), unless a concurrent claim replaced it (new nonce) or a sweep
                -- deleted it: then the loop reads again.
                UPDATE dedup
                   SET state = v_new_state, attempt = 1, nonce = p_nonce,
                       fingerprint = p_fingerprint, first_seen = v_first,
                       lease_until = CASE WHEN v_new_state = 'done' THEN NULL
                                          ELSE v_now + p_lease_ms * interval '1 ms' END,
                       expires_at = v_now + p_ttl_ms * interval '1 ms',
                       holder_instance = CASE WHEN v_new_state = 'done' THEN NULL
                                              ELSE p_holder_instance END,
                       holder_boot = CASE WHEN v_new_state = 'done' THEN NULL
                                          ELSE p_holder_boot END,
                       completed = NULL
                 WHERE source = p_source AND event_id = p_event_id AND nonce = v_rec.nonce
                   AND expires_at = v_rec.expires_at;
            END IF;
            IF NOT FOUND THEN
                CONTINUE;
            END IF;
            r_first_seen_ms := epoch_ms(v_first);
            r_expires_ms := epoch_ms(v_now + p_ttl_ms * interval '1 ms');
            v_processed := v_new_state = 'done';
            IF v_late THEN
                v_history := 'late_duplicate';
                v_gap := greatest(0, epoch_ms(v_now) - epoch_ms(v_first));
                r_late_first_ms := epoch_ms(v_first);
            END IF;
            IF v_late AND p_late = 'reject' THEN
                r_outcome := 'late_duplicate';
                r_attempt := NULL;
            ELSE
                r_outcome := 'claimed';
                r_attempt := 1;
                r_nonce := p_nonce;
            END IF;
            EXIT;
        END IF;

        -- A live record: every answer below speaks of it.
        v_gap := greatest(0, epoch_ms(v_now) - epoch_ms(v_rec.first_seen));
        r_first_seen_ms := epoch_ms(v_rec.first_seen);
        r_expires_ms := epoch_ms(v_rec.expires_at);
        r_attempt := v_rec.attempt;

        IF p_fingerprint IS NOT NULL AND v_rec.fingerprint IS NOT NULL
           AND p_fingerprint <> v_rec.fingerprint THEN
            r_outcome := 'conflict';
            EXIT;
        END IF;

        IF v_rec.state = 'processing' AND v_rec.lease_until > v_now THEN
            r_outcome := 'in_flight';
            r_retry_after_ms := ceil(extract(epoch FROM v_rec.lease_until - v_now) * 1000)::bigint;
            EXIT;
        END IF;

        IF v_rec.state = 'processing' THEN
            -- The lease lapsed: take the claim over, same expires_at, attempt + 1, the new
            -- holder. Not if a renewal moved the lease meanwhile (the row would no longer match).
            v_attempt := CASE WHEN v_rec.attempt < 2147483647 THEN v_rec.attempt + 1
                              ELSE v_rec.attempt END;
            UPDATE dedup
               SET attempt = v_attempt,
                   nonce = p_nonce,
                   lease_until = v_now + p_lease_ms * interval '1 ms',
                   fingerprint = coalesce(v_rec.fingerprint, p_fingerprint),
                   holder_instance = p_holder_instance,
                   holder_boot = p_holder_boot
             WHERE source = p_source AND event_id = p_event_id
               AND expires_at = v_rec.expires_at AND nonce = v_rec.nonce
               AND state = 'processing' AND lease_until <= v_now;
            IF FOUND THEN
                r_outcome := 'claimed';
                v_history := 'reclaimed';
                r_attempt := v_attempt;
                r_nonce := p_nonce;
                EXIT;
            END IF;
            CONTINUE;
        END IF;

        r_outcome := 'duplicate';
        r_state := v_rec.state;
        EXIT;
    END LOOP;

    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms,
                         fingerprint)
    VALUES (p_source, p_event_id, coalesce(v_history, r_outcome), v_processed, r_attempt, v_now,
            v_gap, p_fingerprint);
END
$$;

-- finish_batch: as in schema 4 (with schema 6's plan settings); completions mark their records
-- completed, and a release of a record its token completed is refused (r_held NULL).
CREATE OR REPLACE FUNCTION finish_batch(
    p_source   text[],
    p_event_id text[],
    p_attempt  integer[],
    p_nonce    bigint[],
    p_release  boolean[]
)
RETURNS TABLE (r_idx integer, r_held boolean)
LANGUAGE plpgsql
-- Schema 6's plan settings, which a replaced function must be given again.
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
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
                           holder_boot = NULL, completed = true
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
           AND d.completed IS NOT TRUE
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

    -- What the set-based path did not finish: a completion holds when the record is already
    -- done under this very token; a release of a record this token completed is refused (NULL);
    -- any other token holds nothing. A statement of its own: its snapshot has what a takeover
    -- committed while the UPDATE above waited for the row.
    RETURN QUERY
    SELECT x.i::integer,
           CASE WHEN x.i = ANY (v_finished) THEN true
                WHEN t.completed IS NULL THEN false
                WHEN NOT x.rel THEN true
                WHEN t.completed THEN NULL
                ELSE false END
      FROM (SELECT y.*,
                   count(*) OVER (PARTITION BY y.s COLLATE "C", y.e COLLATE "C") AS named
              FROM unnest(p_source, p_event_id, p_attempt, p_nonce, p_release)
                   WITH ORDINALITY AS y(s, e, a, nc, rel, i)
             WHERE y.i <= v_n) x
           LEFT JOIN LATERAL (SELECT d.completed IS TRUE AS completed FROM dedup d
                               WHERE d.source = x.s AND d.event_id = x.e
                                 AND d.expires_at > v_now AND d.attempt = x.a
                                 AND d.nonce = x.nc
                               LIMIT 1) t ON true
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
