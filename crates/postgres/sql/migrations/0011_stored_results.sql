-- idemgate PostgreSQL schema, version 11: a completed record keeps its result.
--
-- dedup.result holds what a completion stored for the event's duplicates
-- (idemgate_core::StoredResult in its one layout: status, headers, body), result_withheld the size
-- of a result refused as over the caller's limit (the claim completed without it). Both are NULL
-- on every record but one completed by complete_keeping, which writes them in the same statement
-- as the completion, and they go with their row: a result expires with its record (an expired
-- row reads as absent, and is swept or dropped with its partition).
--
-- A claim that finds an expired row in batched mode writes the new record over it (claim_one):
-- it now clears the two columns too, so that an old result never reads as the new record's. In
-- partitioned mode a new record is a new row. Nothing else writes a done record again.
--
-- New nullable columns without a default: no rewrite of the table, on a plain dedup or a
-- partitioned one (its partitions, present and future, get them). Safe while builds of schema 10
-- still run (a rolling upgrade): they never read the columns, and the claim_one they call is
-- this one (same signature), which clears them as it should. A completion by such a build of a
-- record whose row held an old result cannot happen: the claim that made the record cleared it.

ALTER TABLE dedup ADD COLUMN IF NOT EXISTS result bytea;
ALTER TABLE dedup ADD COLUMN IF NOT EXISTS result_withheld bigint;

-- claim_one: as in schema 9; a record written over an expired row starts without a result.
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
    p_late_horizon_ms bigint,
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
-- Schema 9's plan settings, which a replaced function must be given again.
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
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
    v_since       timestamptz;
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
            -- Only history received within the late-duplicate horizon is read (the partitions
            -- before it are pruned when the plan starts: v_since is a parameter of the generic
            -- plan); the event's first receipt is its earliest row there less that row's gap
            -- (rows about an existing record carry the time since the first receipt), and one
            -- first received before the horizon is no late duplicate.
            IF p_late <> 'off' THEN
                v_since := CASE WHEN p_late_horizon_ms IS NULL THEN '-infinity'::timestamptz
                                ELSE v_now - p_late_horizon_ms * interval '1 ms' END;
                SELECT f.first_at, p.processed INTO v_prior_first, v_prior_done
                  FROM (SELECT h.received_at - coalesce(h.gap_ms, 0) * interval '1 ms' AS first_at
                          FROM history h
                         WHERE h.source = p_source AND h.event_id = p_event_id
                           AND h.received_at >= v_since
                         ORDER BY h.id LIMIT 1) f
                  LEFT JOIN LATERAL (SELECT h.processed FROM history h
                                      WHERE h.source = p_source AND h.event_id = p_event_id
                                        AND h.received_at >= v_since
                                        AND (h.processed OR h.outcome = 'released')
                                      ORDER BY h.id DESC LIMIT 1) p ON true;
                IF v_prior_first < v_since THEN
                    v_prior_first := NULL;
                END IF;
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
                       completed = NULL, result = NULL, result_withheld = NULL
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

-- complete_keeping(token, result, withheld): complete_claim's completion, the record keeping
-- p_result (the stored bytes) or p_withheld (the size of a result refused as too large), both
-- NULL for none, in the same statement. True when the token holds the record (completed now, or
-- already done under it: then nothing changes, the first completion's result stands), false
-- when it is stale (nothing written).
CREATE OR REPLACE FUNCTION complete_keeping(p_source text, p_event_id text, p_attempt integer,
                                            p_nonce bigint, p_result bytea, p_withheld bigint)
RETURNS boolean
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_fp  bytea;
BEGIN
    UPDATE dedup SET state = 'done', lease_until = NULL, holder_instance = NULL,
                     holder_boot = NULL, completed = true, result = p_result,
                     result_withheld = p_withheld
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
