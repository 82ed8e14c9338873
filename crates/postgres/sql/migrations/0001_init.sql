-- idemgate PostgreSQL schema, version 1.
--
-- Applied by migrate.rs inside one transaction that holds the schema's migration advisory lock,
-- with search_path set to the store's schema, and with two settings for this transaction:
--   idemgate.dedup_mode         'batched' or 'partitioned'
--   idemgate.partition_width_s  the dedup partition width in seconds ('' in batched mode)
-- Every object below is unqualified: it lands in (and is later found through) that schema.

-- What this schema was created for. The store refuses to run in another expiry mode.
CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

INSERT INTO meta (key, value) VALUES
    ('dedup_mode', current_setting('idemgate.dedup_mode')),
    ('partition_width_s', current_setting('idemgate.partition_width_s'));

-- The hot dedup table: one row per live (or expired, not yet removed) claim.
--   batched mode:     a plain table, unique on (source, event_id); expired rows are removed by
--                     bounded deletes.
--   partitioned mode: range-partitioned on expires_at; a partition is dropped whole once its upper
--                     bound has passed. PostgreSQL needs the partition key in the primary key, so
--                     (source, event_id) alone is unique only by idemgate's own rule: every claim
--                     takes an advisory lock on the key's hash and looks across live partitions.
DO $$
BEGIN
    IF current_setting('idemgate.dedup_mode') = 'partitioned' THEN
        CREATE TABLE dedup (
            source      text COLLATE "C" NOT NULL,
            event_id    text COLLATE "C" NOT NULL,
            state       text        NOT NULL CHECK (state IN ('processing', 'done')),
            attempt     integer     NOT NULL,
            nonce       bigint      NOT NULL,
            fingerprint bytea,
            first_seen  timestamptz NOT NULL,
            lease_until timestamptz,
            expires_at  timestamptz NOT NULL,
            PRIMARY KEY (source, event_id, expires_at)
        ) PARTITION BY RANGE (expires_at);
    ELSIF current_setting('idemgate.dedup_mode') = 'batched' THEN
        -- fillfactor leaves room on each page so complete and takeover (which touch no indexed
        -- column) stay HOT updates.
        CREATE TABLE dedup (
            source      text COLLATE "C" NOT NULL,
            event_id    text COLLATE "C" NOT NULL,
            state       text        NOT NULL CHECK (state IN ('processing', 'done')),
            attempt     integer     NOT NULL,
            nonce       bigint      NOT NULL,
            fingerprint bytea,
            first_seen  timestamptz NOT NULL,
            lease_until timestamptz,
            expires_at  timestamptz NOT NULL,
            PRIMARY KEY (source, event_id)
        ) WITH (fillfactor = 80);
    ELSE
        RAISE EXCEPTION 'idemgate.dedup_mode must be batched or partitioned, not %',
            current_setting('idemgate.dedup_mode');
    END IF;
END
$$;

-- The sweeper's bounded deletes walk this index oldest first.
CREATE INDEX dedup_expires_at ON dedup (expires_at);

-- The audit log: append-only, one row per outcome, partitioned by month on received_at and
-- retained by dropping whole partitions.
CREATE TABLE history (
    id          bigserial,
    source      text COLLATE "C" NOT NULL,
    event_id    text COLLATE "C" NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('claimed', 'duplicate', 'in_flight',
                    'conflict', 'reclaimed', 'completed', 'released', 'late_duplicate')),
    -- As of this row the event counts as processed (a completion, a mark-on-receipt claim, a
    -- rejected late duplicate); a later 'released' row undoes it.
    processed   boolean     NOT NULL DEFAULT false,
    attempt     integer,
    received_at timestamptz NOT NULL,
    -- For answers about an existing record: milliseconds since its first receipt.
    gap_ms      bigint,
    fingerprint bytea
) PARTITION BY RANGE (received_at);

CREATE INDEX history_key ON history (source, event_id);

-- Timestamps travel to Rust as epoch milliseconds (core's Timestamp).
CREATE FUNCTION epoch_ms(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT floor(extract(epoch FROM t) * 1000)::bigint $$;

-- The advisory lock key of one (source, event_id). Source names hold no ':'.
CREATE FUNCTION key_lock(p_source text, p_event_id text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT hashtextextended(p_source || ':' || p_event_id, 0) $$;

-- One claim against an existing record, or one that lost the fast path's insert: the rules table
-- of idemgate-core's machine.rs, one key at a time. Writes the claim's history row.
--
-- Every statement here takes a fresh snapshot (READ COMMITTED, volatile function), so a row that a
-- concurrent claim committed while our INSERT ... ON CONFLICT waited for it is visible to the
-- SELECT below: "inserted nothing, saw nothing" turns into another turn of the loop, never into an
-- answer. Writes to an existing row are compare-and-set on its nonce and state; losing one means
-- somebody else changed the record, and the loop reads it again.
CREATE FUNCTION claim_one(
    p_source      text,
    p_event_id    text,
    p_fingerprint bytea,
    p_lease_ms    bigint,
    p_ttl_ms      bigint,
    p_on_receipt  boolean,
    p_nonce       bigint,
    p_partitioned boolean,
    p_late        text,
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
    v_state      text := CASE WHEN p_on_receipt THEN 'done' ELSE 'processing' END;
    v_now        timestamptz;
    v_rec        dedup%ROWTYPE;
    v_history    text;
    v_gap        bigint;
    v_turns      integer := 0;
    v_processed  boolean := false;
    -- What history says of the key when its record is absent (read once, lazily).
    v_prior_read boolean := false;
    v_prior_first timestamptz;
    v_prior_done boolean;
    v_late       boolean := false;
    v_first      timestamptz;
    v_new_state  text;
    v_found      boolean;
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
            IF p_late <> 'off' AND NOT v_prior_read THEN
                SELECT h.received_at INTO v_prior_first FROM history h
                 WHERE h.source = p_source AND h.event_id = p_event_id
                 ORDER BY h.id LIMIT 1;
                SELECT h.processed INTO v_prior_done FROM history h
                 WHERE h.source = p_source AND h.event_id = p_event_id
                   AND (h.processed OR h.outcome = 'released')
                 ORDER BY h.id DESC LIMIT 1;
                v_prior_read := true;
            END IF;
            v_late := p_late <> 'off' AND coalesce(v_prior_done, false);
            v_first := CASE WHEN v_late THEN v_prior_first ELSE v_now END;
            v_new_state := CASE WHEN v_late AND p_late = 'reject' THEN 'done' ELSE v_state END;
            IF NOT v_found THEN
                -- Partitioned mode holds the key's lock, so nobody races this insert; in batched
                -- mode a concurrent claim may win it, and we read again.
                INSERT INTO dedup (source, event_id, state, attempt, nonce, fingerprint,
                                   first_seen, lease_until, expires_at)
                VALUES (p_source, p_event_id, v_new_state, 1, p_nonce, p_fingerprint, v_first,
                        CASE WHEN v_new_state = 'done' THEN NULL
                             ELSE v_now + p_lease_ms * interval '1 ms' END,
                        v_now + p_ttl_ms * interval '1 ms')
                ON CONFLICT DO NOTHING;
            ELSE
                UPDATE dedup
                   SET state = v_new_state, attempt = 1, nonce = p_nonce,
                       fingerprint = p_fingerprint, first_seen = v_first,
                       lease_until = CASE WHEN v_new_state = 'done' THEN NULL
                                          ELSE v_now + p_lease_ms * interval '1 ms' END,
                       expires_at = v_now + p_ttl_ms * interval '1 ms'
                 WHERE source = p_source AND event_id = p_event_id AND nonce = v_rec.nonce;
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
            -- The lease lapsed: take the claim over, same expires_at, attempt + 1.
            UPDATE dedup
               SET attempt = CASE WHEN v_rec.attempt < 2147483647 THEN v_rec.attempt + 1
                                  ELSE v_rec.attempt END,
                   nonce = p_nonce,
                   lease_until = v_now + p_lease_ms * interval '1 ms',
                   fingerprint = coalesce(v_rec.fingerprint, p_fingerprint)
             WHERE source = p_source AND event_id = p_event_id
               AND expires_at = v_rec.expires_at AND nonce = v_rec.nonce
               AND state = 'processing';
            IF FOUND THEN
                r_outcome := 'claimed';
                v_history := 'reclaimed';
                r_attempt := CASE WHEN v_rec.attempt < 2147483647 THEN v_rec.attempt + 1
                                  ELSE v_rec.attempt END;
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
-- batch resolve as if sent one after the other in input order.
--
-- 1. Partitioned mode first takes the advisory lock of every key, in hash order (so two batches
--    never wait for each other's locks in a cycle).
-- 2. Fast path, one statement: the first claim of each key that has no record (no live record, in
--    partitioned mode) inserts it, with its history row. Rows go in in key order, so two batches
--    wait on each other's keys in one order.
-- 3. Every other element goes through claim_one, in key order then input order; it sees the
--    writes of this batch's earlier elements. With distinct fresh keys (the common case) there is
--    no such element and the whole batch is two statements. A batch of one goes straight to
--    claim_one.
CREATE FUNCTION claim_batch(
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
                         p_late[1]) AS c;
        RETURN;
    END IF;

    RETURN QUERY
    WITH firsts AS (
        SELECT DISTINCT ON (u.s COLLATE "C", u.e COLLATE "C")
               u.s, u.e, u.fp, u.lease_ms, u.ttl_ms, u.rcpt, u.nc, u.late
          FROM unnest(p_source, p_event_id, p_fingerprint, p_lease_ms, p_ttl_ms, p_on_receipt,
                      p_nonce, p_late)
               WITH ORDINALITY AS u(s, e, fp, lease_ms, ttl_ms, rcpt, nc, late, i)
         ORDER BY u.s COLLATE "C", u.e COLLATE "C", u.i
    ), ins AS (
        INSERT INTO dedup AS d (source, event_id, state, attempt, nonce, fingerprint, first_seen,
                                lease_until, expires_at)
        SELECT f.s, f.e, CASE WHEN f.rcpt THEN 'done' ELSE 'processing' END, 1, f.nc, f.fp, v_now,
               CASE WHEN f.rcpt THEN NULL ELSE v_now + f.lease_ms * interval '1 ms' END,
               v_now + f.ttl_ms * interval '1 ms'
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
                      p_nonce, p_late)
               WITH ORDINALITY AS u(s, e, fp, lease_ms, ttl_ms, rcpt, nc, late, i)
         WHERE NOT EXISTS (SELECT 1 FROM dedup d
                            WHERE d.source = u.s AND d.event_id = u.e AND d.nonce = u.nc)
         ORDER BY u.s COLLATE "C", u.e COLLATE "C", u.i
    LOOP
        r_idx := v_rest.i;
        SELECT c.r_outcome, c.r_attempt, c.r_nonce, c.r_first_seen_ms, c.r_state,
               c.r_retry_after_ms, c.r_expires_ms, c.r_late_first_ms
          INTO r_outcome, r_attempt, r_nonce, r_first_seen_ms, r_state, r_retry_after_ms,
               r_expires_ms, r_late_first_ms
          FROM claim_one(v_rest.s, v_rest.e, v_rest.fp, v_rest.lease_ms, v_rest.ttl_ms,
                         v_rest.rcpt, v_rest.nc, v_partitioned, v_rest.late) AS c;
        RETURN NEXT;
    END LOOP;
END
$$;

-- complete(token): true when the token holds the live record (now done), false when stale.
CREATE FUNCTION complete_claim(p_source text, p_event_id text, p_attempt integer, p_nonce bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_fp  bytea;
BEGIN
    UPDATE dedup SET state = 'done', lease_until = NULL
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

-- release(token): deletes the live record the token holds; false when the token is stale.
CREATE FUNCTION release_claim(p_source text, p_event_id text, p_attempt integer, p_nonce bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_fp  bytea;
BEGIN
    DELETE FROM dedup
     WHERE source = p_source AND event_id = p_event_id AND expires_at > v_now
       AND attempt = p_attempt AND nonce = p_nonce
    RETURNING fingerprint INTO v_fp;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO history (source, event_id, outcome, attempt, received_at, gap_ms, fingerprint)
    VALUES (p_source, p_event_id, 'released', p_attempt, v_now, NULL, v_fp);
    RETURN true;
END
$$;

-- Creates the partitions that rows written up to p_history_until / p_dedup_until need: history by
-- calendar month (UTC), dedup (partitioned mode) by the width recorded in meta, aligned to the
-- epoch. Returns the names of the partitions it created. Serialized per schema by an advisory lock.
CREATE FUNCTION ensure_partitions(p_history_until timestamptz, p_dedup_until timestamptz)
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
DECLARE
    v_width  interval;
    v_month  timestamp;
    v_lo     timestamptz;
    v_name   text;
    v_count  integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('idemgate:partitions:' || current_schema(), 0));

    -- Month arithmetic on UTC wall time, whatever the session's TimeZone.
    v_month := date_trunc('month', now() AT TIME ZONE 'UTC');
    WHILE v_month AT TIME ZONE 'UTC' <= p_history_until LOOP
        v_name := 'history_' || to_char(v_month, '"y"YYYY"m"MM');
        IF to_regclass(v_name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF history FOR VALUES FROM (%L) TO (%L)',
                           v_name, v_month AT TIME ZONE 'UTC',
                           (v_month + interval '1 month') AT TIME ZONE 'UTC');
            RETURN NEXT v_name;
        END IF;
        v_month := v_month + interval '1 month';
    END LOOP;

    SELECT make_interval(secs => m.value::bigint) INTO v_width
      FROM meta m WHERE m.key = 'partition_width_s' AND m.value <> '';
    IF v_width IS NULL THEN
        RETURN;
    END IF;
    v_count := ceil(extract(epoch FROM p_dedup_until - now()) / extract(epoch FROM v_width));
    IF v_count > 10000 THEN
        RAISE EXCEPTION 'idemgate: % dedup partitions of % would be needed to reach %; choose a wider partition width',
            v_count, v_width, p_dedup_until;
    END IF;
    v_lo := to_timestamp(floor(extract(epoch FROM now()) / extract(epoch FROM v_width))
                         * extract(epoch FROM v_width));
    WHILE v_lo <= p_dedup_until LOOP
        v_name := 'dedup_' || to_char(v_lo AT TIME ZONE 'UTC', '"p"YYYYMMDD"t"HH24MISS');
        IF to_regclass(v_name) IS NULL THEN
            EXECUTE format('CREATE TABLE %I PARTITION OF dedup FOR VALUES FROM (%L) TO (%L)',
                           v_name, v_lo, v_lo + v_width);
            RETURN NEXT v_name;
        END IF;
        v_lo := v_lo + v_width;
    END LOOP;
END
$$;

-- Drops dedup partitions whose upper bound has passed (every row in them expired) and history
-- partitions whose upper bound is older than p_history_retention. Returns the dropped names.
CREATE FUNCTION drop_expired_partitions(p_history_retention interval)
RETURNS SETOF text
LANGUAGE plpgsql
AS $$
DECLARE
    v_part record;
    v_upper timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('idemgate:partitions:' || current_schema(), 0));
    FOR v_part IN
        SELECT c.relname AS name, parent.relname AS parent,
               pg_get_expr(c.relpartbound, c.oid) AS bound
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
          JOIN pg_class parent ON parent.oid = i.inhparent
         WHERE i.inhparent IN ('dedup'::regclass, 'history'::regclass)
         ORDER BY 1
    LOOP
        v_upper := substring(v_part.bound FROM 'TO \(''([^'']+)''\)')::timestamptz;
        CONTINUE WHEN v_upper IS NULL;
        IF (v_part.parent = 'dedup' AND v_upper <= now())
           OR (v_part.parent = 'history' AND v_upper <= now() - p_history_retention) THEN
            EXECUTE format('DROP TABLE %I', v_part.name);
            RETURN NEXT v_part.name;
        END IF;
    END LOOP;
END
$$;
