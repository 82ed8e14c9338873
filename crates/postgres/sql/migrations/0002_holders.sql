-- idemgate PostgreSQL schema, version 2: who holds each claim, each gateway instance's boots,
-- lease renewal, the store's identity, and a claim function that reads a key's history in one
-- statement.
--
-- Applied by migrate.rs as 0001 is (one transaction, the schema's migration lock, search_path on
-- the store's schema), to new schemas right after 0001 and to schemas of version 1 in place.
-- Everything here is quick on a large schema: the new columns are nullable without a default
-- (a catalog change, no rewrite), and the history CHECK is replaced NOT VALID (no scan; every
-- existing row passed the narrower check it replaces).
--
-- A build of schema 1 refuses to start on schema 2, but one already running keeps calling
-- claim_batch with 8 arrays: that signature stays, as a wrapper of the new one (with no holder),
-- so it gets the fixed claim rules too.

-- The store's identity: created once, with the schema (or by this migration for a schema of
-- version 1), never changed. A Redis tier in front of this store only answers from cache entries
-- written for this id, so a schema dropped and created again never sees its predecessor's
-- duplicates. A database restored from a backup keeps the id it had.
INSERT INTO meta (key, value) VALUES ('store_id', replace(gen_random_uuid()::text, '-', ''))
ON CONFLICT (key) DO NOTHING;

-- Who holds a processing claim: the gateway instance and its boot (both NULL when the claim
-- named no holder, and once done). No index: a new boot finds its predecessors' claims by a scan
-- (boots are rare), while an index on these columns would make every takeover (which changes
-- them) a non-HOT update, and one whose columns or predicate include state would do the same to
-- every completion.
ALTER TABLE dedup
    ADD COLUMN holder_instance text COLLATE "C",
    ADD COLUMN holder_boot     bigint;

-- Each gateway instance's latest boot (counted from 1) and when it started, by the database's
-- clock.
CREATE TABLE instances (
    instance   text COLLATE "C" PRIMARY KEY,
    boot       bigint      NOT NULL CHECK (boot >= 1),
    started_at timestamptz NOT NULL
);

-- 'abandoned': a processing claim whose holder's instance started again and ended its lease.
ALTER TABLE history DROP CONSTRAINT history_outcome_check;
ALTER TABLE history ADD CONSTRAINT history_outcome_check
    CHECK (outcome IN ('claimed', 'duplicate', 'in_flight', 'conflict', 'reclaimed', 'completed',
                       'released', 'late_duplicate', 'abandoned')) NOT VALID;

-- One claim against an existing record, or one that lost the fast path's insert: the rules table
-- of idemgate-core's machine.rs, one key at a time. Writes the claim's history row.
--
-- Every statement here takes a fresh snapshot (READ COMMITTED, volatile function), so a row that a
-- concurrent claim committed while our INSERT ... ON CONFLICT waited for it is visible to the
-- SELECT below: "inserted nothing, saw nothing" turns into another turn of the loop, never into an
-- answer. Writes to an existing row are compare-and-set on what the decision read (nonce and
-- state; for a takeover also that the lease is still over, since a renewal changes only the
-- lease); losing one means somebody else changed the record, and the loop reads it again.
--
-- What history says of an absent key (its first receipt, and whether its last processed or
-- released row was processed) is read in ONE statement, so from one snapshot, on every turn that
-- finds no live record. Schema 1 read it with two statements, once per call: a concurrent claim
-- committing between them gave "processed, first receipt unknown", and the claim then built a
-- record without first_seen (a NOT NULL violation); and a later turn could decide on what history
-- said before a concurrent claim was released.
DROP FUNCTION claim_one(text, text, bytea, bigint, bigint, boolean, bigint, boolean, text);

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
                                          ELSE p_holder_boot END
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

-- A batch of claims in one call: what the group-committing batcher sends.
--
-- Answers one row per input element (r_idx is its 1-based position). Two claims of one key in a
-- batch resolve as if sent one after the other in input order. The holder arrays may be shorter
-- than the others (empty, say): missing elements claim with no holder.
--
-- 1. Partitioned mode first takes the advisory lock of every key, in hash order (so two batches
--    never wait for each other's locks in a cycle).
-- 2. Fast path, one statement: the first claim of each key that has no record (no live record, in
--    partitioned mode) and no history (when late duplicates are looked for) inserts it, with its
--    history row. Rows go in in key order, so two batches wait on each other's keys in one order.
--    Its probes and its insert share one snapshot, and it only ever builds a first receipt
--    (first_seen = now): a row a concurrent claim committed since makes the insert do nothing,
--    and the element goes to step 3.
-- 3. Every other element goes through claim_one, in key order then input order; it sees the
--    writes of this batch's earlier elements. With distinct fresh keys (the common case) there is
--    no such element and the whole batch is two statements. A batch of one goes straight to
--    claim_one.
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
                         p_late[1], p_holder_instance[1], p_holder_boot[1]) AS c;
        RETURN;
    END IF;

    RETURN QUERY
    WITH firsts AS (
        SELECT DISTINCT ON (u.s COLLATE "C", u.e COLLATE "C")
               u.s, u.e, u.fp, u.lease_ms, u.ttl_ms, u.rcpt, u.nc, u.late, u.hi, u.hb
          FROM unnest(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms, p_on_receipt,
                      p_nonce, p_late, p_holder_instance, p_holder_boot)
               WITH ORDINALITY AS u(s, e, fp, lease_ms, ttl_ms, rcpt, nc, late, hi, hb, i)
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
               -- A key with any history may be a late duplicate: claim_one decides.
               LEFT JOIN LATERAL (SELECT 1 AS hit FROM history h
                                   WHERE f.late <> 'off' AND h.source = f.s AND h.event_id = f.e
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
    SELECT u.i::integer, 'claimed'::text, 1, u.nc, epoch_ms(v_now), NULL::text, NULL::bigint,
           epoch_ms(ins.expires_at), NULL::bigint
      FROM ins JOIN unnest(p_nonce) WITH ORDINALITY AS u(nc, i) ON u.nc = ins.nonce;
    GET DIAGNOSTICS v_won = ROW_COUNT;
    IF v_won = v_n THEN
        RETURN;
    END IF;

    -- The rest: elements whose nonce the fast path did not write (sorted, so read whole before
    -- the first claim_one runs).
    FOR v_rest IN
        SELECT u.*
          FROM unnest(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms, p_on_receipt,
                      p_nonce, p_late, p_holder_instance, p_holder_boot)
               WITH ORDINALITY AS u(s, e, fp, lease_ms, ttl_ms, rcpt, nc, late, hi, hb, i)
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
                         v_rest.hb) AS c;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Schema 1's signature, for a build of schema 1 still running: the same claims, with no holder.
CREATE OR REPLACE FUNCTION claim_batch(
    p_source      text[],
    p_event_id    text[],
    p_fingerprint bytea[],
    p_lease_ms    bigint[],
    p_ttl_ms      bigint[],
    p_on_receipt  boolean[],
    p_nonce       bigint[],
    p_late        text[]
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
                              p_on_receipt, p_nonce, p_late, '{}'::text[], '{}'::bigint[])
$$;

-- complete(token): true when the token holds the live record (now done, with no holder), false
-- when stale. Touches no indexed column: a HOT update.
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
                     holder_boot = NULL
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

-- renew(token, lease): the lease of the processing record the token holds moves to now + lease,
-- never beyond expires_at; answers the new lease_until (epoch ms). A record done under this very
-- token answers its expires_at, unchanged. NULL when the token is stale (taken over, released,
-- expired). A holder whose lease lapsed may renew while nobody took the claim over. No history
-- row (renewals would flood it); touches no indexed column: a HOT update.
CREATE FUNCTION renew_claim(p_source text, p_event_id text, p_attempt integer, p_nonce bigint,
                            p_lease_ms bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_until timestamptz;
BEGIN
    UPDATE dedup SET lease_until = least(v_now + p_lease_ms * interval '1 ms', expires_at)
     WHERE source = p_source AND event_id = p_event_id AND expires_at > v_now
       AND attempt = p_attempt AND nonce = p_nonce AND state = 'processing'
    RETURNING lease_until INTO v_until;
    IF NOT FOUND THEN
        SELECT d.expires_at INTO v_until FROM dedup d
         WHERE d.source = p_source AND d.event_id = p_event_id AND d.expires_at > v_now
           AND d.attempt = p_attempt AND d.nonce = p_nonce AND d.state = 'done';
    END IF;
    RETURN epoch_ms(v_until);
END
$$;

-- A new boot of gateway instance p_instance, in one transaction by the database's clock: its boot
-- counter goes up by one (the first boot is 1), and every live processing claim that an earlier
-- boot of it holds under a running lease gets its lease ended now, with one 'abandoned' history
-- row (with the claim's attempt) each, so the next delivery takes it over at once. Other
-- instances' claims, claims of this boot, and claims with no holder are left alone.
--
-- Finding those claims scans dedup (live partitions only, in partitioned mode): there is
-- deliberately no index on the holder (see the columns above). Concurrent boots of one instance
-- serialize on its row in instances.
CREATE FUNCTION register_boot(p_instance text)
RETURNS TABLE (r_boot bigint, r_started_ms bigint, r_freed bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_boot bigint;
BEGIN
    INSERT INTO instances AS i (instance, boot, started_at) VALUES (p_instance, 1, v_now)
    ON CONFLICT (instance) DO UPDATE SET boot = i.boot + 1, started_at = excluded.started_at
    RETURNING i.boot INTO v_boot;

    WITH freed AS (
        UPDATE dedup d SET lease_until = v_now
         WHERE d.holder_instance = p_instance AND d.holder_boot < v_boot
           AND d.state = 'processing' AND d.lease_until > v_now AND d.expires_at > v_now
        RETURNING d.source, d.event_id, d.attempt, d.fingerprint
    ), hist AS (
        INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms,
                             fingerprint)
        SELECT f.source, f.event_id, 'abandoned', false, f.attempt, v_now, NULL, f.fingerprint
          FROM freed f
    )
    SELECT count(*) INTO r_freed FROM freed;

    r_boot := v_boot;
    r_started_ms := epoch_ms(v_now);
    RETURN NEXT;
END
$$;
