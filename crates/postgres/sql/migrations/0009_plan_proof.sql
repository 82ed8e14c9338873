-- idemgate PostgreSQL schema, version 9: plans that hold whatever the statistics say, and a
-- late-duplicate probe bounded by a horizon.
--
-- 1. Plans. A pooled session plans each statement once (generic plans) and keeps the plan while
--    it lives. Planned while a table looked small (a new store never analyzed, or one analyzed
--    while it held a handful of rows), the cheapest plan of a key's lookup could read the whole
--    table, or hash it, and every call after that read it again however large it had grown. The
--    store's sessions now run with sequential scans, hash joins and merge joins off (its
--    connection options, see config.rs), and every function on the hot path carries the same
--    settings (as finish_batch has since schema 6), so that it holds in any session: each key
--    is found through its index, whatever the table's size when the plan was made. Boot
--    recovery (register_boot) is the exception, on purpose: it reads dedup and the inbox once
--    per boot (an index on the holder would cost every completion its HOT update), so it runs
--    with sequential scans on.
--
-- 2. The late-duplicate horizon. A claim of a key with no live record read the key's history in
--    every monthly partition (14 at the default 400-day retention). claim_one, claim_batch and
--    enqueue_claim now take each claim's horizon (p_late_horizon_ms; NULL for none) and read
--    only history received within it; the partitions before it are pruned. A delivery is a late
--    duplicate when its event was processed and first received within the horizon.
--
-- 3. The reporting index. With a bound on received_at, the probe could be served by
--    history_by_source_time (source, received_at, outcome) as well as by history_key (source,
--    event_id), and a plan made while a partition was empty (every month's partition is, when
--    the month's plans are made) took the former: a walk over all of the source's rows within
--    the horizon on every claim. The reporting index is now partial, on a predicate only the
--    reporting statements state (outcome <> '', true of every row), so the probe can never
--    choose it, in a generic plan or a custom one: history_key is its only index. Building it on
--    a large history takes a while under the migration's lock (history writes wait); on such a
--    store, create it by hand beforehand, partition by partition, with CREATE INDEX
--    CONCURRENTLY and the same definition, then run the migration: it attaches them.
--
-- The earlier signatures stay, for a build of schema 8 still running during a rolling upgrade:
-- they claim with no horizon, as before (its dashboard's timeline loses its index-only scan
-- until it is upgraded too).

CREATE INDEX IF NOT EXISTS history_reporting ON history (source, received_at, outcome)
    WHERE outcome <> '';
DROP INDEX IF EXISTS history_by_source_time;

-- claim_one: as in schema 7, reading history only within the horizon.
CREATE FUNCTION claim_one(
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

-- claim_batch: as in schema 2, with each claim's horizon.
CREATE FUNCTION claim_batch(
    p_source          text[],
    p_event_id        text[],
    p_fingerprint     bytea[],
    p_lease_ms        bigint[],
    p_ttl_ms          bigint[],
    p_on_receipt      boolean[],
    p_nonce           bigint[],
    p_late            text[],
    p_holder_instance text[],
    p_holder_boot     bigint[],
    p_late_horizon_ms bigint[]
)
RETURNS TABLE (
    r_idx            integer,
    r_outcome        text,
    r_attempt        integer,
    r_nonce          bigint,
    r_first_seen_ms  bigint,
    r_state          text,
    r_retry_after_ms bigint,
    r_expires_ms     bigint,
    r_late_first_ms  bigint
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n           integer := coalesce(cardinality(p_source), 0);
    v_now         timestamptz := clock_timestamp();
    v_partitioned boolean;
    v_won         bigint;
    v_lock        bigint;
    v_rest        record;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    SELECT m.value = 'partitioned' INTO v_partitioned FROM meta m WHERE m.key = 'dedup_mode';

    IF v_partitioned THEN
        FOR v_lock IN
            SELECT DISTINCT key_lock(u.s, u.e) FROM unnest(p_source, p_event_id) AS u(s, e)
             ORDER BY 1
        LOOP
            PERFORM pg_advisory_xact_lock(v_lock);
        END LOOP;
    END IF;

    -- A lone claim (an idle store's usual batch) skips the set-based path's fixed cost.
    IF v_n = 1 THEN
        RETURN QUERY
        SELECT 1, c.r_outcome, c.r_attempt, c.r_nonce, c.r_first_seen_ms, c.r_state,
               c.r_retry_after_ms, c.r_expires_ms, c.r_late_first_ms
          FROM claim_one(p_source[1], p_event_id[1], p_fingerprint[1], p_lease_ms[1],
                         p_ttl_ms[1], p_on_receipt[1], p_nonce[1], v_partitioned,
                         p_late[1], p_holder_instance[1], p_holder_boot[1],
                         p_late_horizon_ms[1]) AS c;
        RETURN;
    END IF;

    RETURN QUERY
    WITH firsts AS (
        SELECT DISTINCT ON (u.s COLLATE "C", u.e COLLATE "C")
               u.s, u.e, u.fp, u.lease_ms, u.ttl_ms, u.rcpt, u.nc, u.late, u.hi, u.hb,
               CASE WHEN u.hz IS NULL THEN '-infinity'::timestamptz
                    ELSE v_now - u.hz * interval '1 ms' END AS since
          FROM unnest(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms, p_on_receipt,
                      p_nonce, p_late, p_holder_instance, p_holder_boot, p_late_horizon_ms)
               WITH ORDINALITY AS u(s, e, fp, lease_ms, ttl_ms, rcpt, nc, late, hi, hb, hz, i)
         WHERE u.i <= v_n
         ORDER BY u.s COLLATE "C", u.e COLLATE "C", u.i
    ), ins AS (
        INSERT INTO dedup AS d (source, event_id, state, attempt, nonce, fingerprint, first_seen,
                                lease_until, expires_at, holder_instance, holder_boot)
        SELECT f.s, f.e, CASE WHEN f.rcpt THEN 'done' ELSE 'processing' END, 1, f.nc, f.fp, v_now,
               CASE WHEN f.rcpt THEN NULL ELSE v_now + f.lease_ms * interval '1 ms' END,
               v_now + f.ttl_ms * interval '1 ms',
               CASE WHEN f.rcpt THEN NULL ELSE f.hi END,
               CASE WHEN f.rcpt THEN NULL ELSE f.hb END
          FROM firsts f
               -- Partitioned mode: a live record in another partition (the key's uniqueness
               -- across partitions is the advisory lock's, above).
               LEFT JOIN LATERAL (SELECT 1 AS hit FROM dedup x
                                   WHERE v_partitioned AND x.source = f.s AND x.event_id = f.e
                                     AND x.expires_at > v_now
                                   LIMIT 1) live ON true
               -- A key with any history within its late-duplicate horizon may be a late
               -- duplicate: claim_one decides. The horizon prunes the partitions before it.
               LEFT JOIN LATERAL (SELECT 1 AS hit FROM history h
                                   WHERE f.late <> 'off' AND h.source = f.s AND h.event_id = f.e
                                     AND h.received_at >= f.since
                                   LIMIT 1) seen ON true
         -- Lateral probes, not NOT EXISTS under OR: that becomes a subplan the planner may hash
         -- (reading the whole table on every batch) when the tables looked empty at planning,
         -- and the generic plan keeps it.
         WHERE live.hit IS NULL AND seen.hit IS NULL
         ORDER BY f.s COLLATE "C", f.e COLLATE "C"
        ON CONFLICT DO NOTHING
        RETURNING d.source, d.event_id, d.nonce, d.fingerprint, d.state, d.expires_at
    ), hist AS (
        INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms,
                             fingerprint)
        SELECT ins.source, ins.event_id, 'claimed', ins.state = 'done', 1, v_now, NULL,
               ins.fingerprint
          FROM ins
    )
    -- Each won claim's place in the batch by its nonce (unique to it): array_position, not a
    -- join of the batch against itself (a nested loop, with hash and merge joins off).
    SELECT array_position(p_nonce, ins.nonce)::integer, 'claimed'::text, 1, ins.nonce,
           epoch_ms(v_now), NULL::text, NULL::bigint, epoch_ms(ins.expires_at), NULL::bigint
      FROM ins;
    GET DIAGNOSTICS v_won = ROW_COUNT;
    IF v_won = v_n THEN
        RETURN;
    END IF;

    -- The rest: elements whose nonce the fast path did not write (sorted, so read whole before
    -- the first claim_one runs).
    FOR v_rest IN
        SELECT u.*
          FROM unnest(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms, p_on_receipt,
                      p_nonce, p_late, p_holder_instance, p_holder_boot, p_late_horizon_ms)
               WITH ORDINALITY AS u(s, e, fp, lease_ms, ttl_ms, rcpt, nc, late, hi, hb, hz, i)
         WHERE u.i <= v_n
           AND NOT EXISTS (SELECT 1 FROM dedup d
                            WHERE d.source = u.s AND d.event_id = u.e AND d.nonce = u.nc)
         ORDER BY u.s COLLATE "C", u.e COLLATE "C", u.i
    LOOP
        r_idx := v_rest.i;
        SELECT c.r_outcome, c.r_attempt, c.r_nonce, c.r_first_seen_ms, c.r_state,
               c.r_retry_after_ms, c.r_expires_ms, c.r_late_first_ms
          INTO r_outcome, r_attempt, r_nonce, r_first_seen_ms, r_state, r_retry_after_ms,
               r_expires_ms, r_late_first_ms
          FROM claim_one(v_rest.s, v_rest.e, v_rest.fp, v_rest.lease_ms, v_rest.ttl_ms,
                         v_rest.rcpt, v_rest.nc, v_partitioned, v_rest.late, v_rest.hi,
                         v_rest.hb, v_rest.hz) AS c;
        RETURN NEXT;
    END LOOP;
END
$$;

-- enqueue_claim: as in schema 3, with the claim's horizon.
CREATE FUNCTION enqueue_claim(
    p_source        text,
    p_event_id      text,
    p_fingerprint   bytea,
    p_lease_ms      bigint,
    p_ttl_ms        bigint,
    p_nonce         bigint,
    p_late          text,
    p_body          bytea,
    p_content_type  text,
    p_header_names  text[],
    p_header_values text[],
    p_late_horizon_ms bigint,
    OUT r_outcome        text,
    OUT r_attempt        integer,
    OUT r_nonce          bigint,
    OUT r_first_seen_ms  bigint,
    OUT r_state          text,
    OUT r_retry_after_ms bigint,
    OUT r_expires_ms     bigint,
    OUT r_late_first_ms  bigint,
    OUT r_item           bigint
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_partitioned boolean;
    v_now         timestamptz;
BEGIN
    SELECT m.value = 'partitioned' INTO v_partitioned FROM meta m WHERE m.key = 'dedup_mode';
    IF v_partitioned THEN
        PERFORM pg_advisory_xact_lock(key_lock(p_source, p_event_id));
    END IF;

    SELECT c.r_outcome, c.r_attempt, c.r_nonce, c.r_first_seen_ms, c.r_state,
           c.r_retry_after_ms, c.r_expires_ms, c.r_late_first_ms
      INTO r_outcome, r_attempt, r_nonce, r_first_seen_ms, r_state, r_retry_after_ms,
           r_expires_ms, r_late_first_ms
      FROM claim_one(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms, true, p_nonce,
                     v_partitioned, p_late, NULL, NULL, p_late_horizon_ms) AS c;

    IF r_outcome = 'claimed' THEN
        v_now := clock_timestamp();
        INSERT INTO inbox (source, event_id, body, content_type, header_names, header_values,
                           received_at, due_at)
        VALUES (p_source, p_event_id, p_body, p_content_type,
                coalesce(p_header_names, '{}'), coalesce(p_header_values, '{}'), v_now, v_now)
        RETURNING id INTO r_item;
    END IF;
END
$$;

-- Schema 2's claim_one: no horizon.
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
LANGUAGE sql
AS $$
    SELECT * FROM claim_one(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms,
                            p_on_receipt, p_nonce, p_partitioned, p_late, p_holder_instance,
                            p_holder_boot, NULL::bigint)
$$;

-- Schema 2's claim_batch: no horizon.
CREATE OR REPLACE FUNCTION claim_batch(
    p_source          text[],
    p_event_id        text[],
    p_fingerprint     bytea[],
    p_lease_ms        bigint[],
    p_ttl_ms          bigint[],
    p_on_receipt      boolean[],
    p_nonce           bigint[],
    p_late            text[],
    p_holder_instance text[],
    p_holder_boot     bigint[]
)
RETURNS TABLE (
    r_idx            integer,
    r_outcome        text,
    r_attempt        integer,
    r_nonce          bigint,
    r_first_seen_ms  bigint,
    r_state          text,
    r_retry_after_ms bigint,
    r_expires_ms     bigint,
    r_late_first_ms  bigint
)
LANGUAGE sql
AS $$
    SELECT * FROM claim_batch(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms,
                              p_on_receipt, p_nonce, p_late, p_holder_instance, p_holder_boot,
                              '{}'::bigint[])
$$;

-- Schema 3's enqueue_claim: no horizon.
CREATE OR REPLACE FUNCTION enqueue_claim(
    p_source        text,
    p_event_id      text,
    p_fingerprint   bytea,
    p_lease_ms      bigint,
    p_ttl_ms        bigint,
    p_nonce         bigint,
    p_late          text,
    p_body          bytea,
    p_content_type  text,
    p_header_names  text[],
    p_header_values text[],
    OUT r_outcome        text,
    OUT r_attempt        integer,
    OUT r_nonce          bigint,
    OUT r_first_seen_ms  bigint,
    OUT r_state          text,
    OUT r_retry_after_ms bigint,
    OUT r_expires_ms     bigint,
    OUT r_late_first_ms  bigint,
    OUT r_item           bigint
)
LANGUAGE sql
AS $$
    SELECT * FROM enqueue_claim(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms,
                                p_nonce, p_late, p_body, p_content_type, p_header_names,
                                p_header_values, NULL::bigint)
$$;

-- The plan settings, on every function of the hot path (finish_batch and release_unanswered
-- have them already).
ALTER FUNCTION claim_one(text, text, bytea, bigint, bigint, boolean, bigint, boolean, text, text,
                         bigint, bigint)
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION claim_batch(text[], text[], bytea[], bigint[], bigint[], boolean[], bigint[],
                           text[], text[], bigint[], bigint[])
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION enqueue_claim(text, text, bytea, bigint, bigint, bigint, text, bytea, text,
                             text[], text[], bigint)
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION complete_claim(text, text, integer, bigint)
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION release_claim(text, text, integer, bigint)
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION renew_claim(text, text, integer, bigint, bigint)
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION heartbeat_boot(text, bigint, bigint)
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
-- Boot recovery reads dedup and the inbox once per boot: a sequential scan is its best plan.
ALTER FUNCTION register_boot(text, bigint, text, integer, text, bigint)
    SET enable_seqscan = on;
