-- idemgate PostgreSQL schema, version 3: the inbox. A delivery to an inbox source is
-- claimed and queued in one transaction; dispatchers take queued items under a lease
-- (FOR UPDATE SKIP LOCKED, so several gateways share one queue), deliver them, retry them later,
-- or keep them as dead letters with every attempt until they are replayed or purged.
--
-- Applied by migrate.rs as 0001 and 0002 are (one transaction, the schema's migration lock,
-- search_path on the store's schema), after whatever version the schema is at. Quick on a large
-- schema: two new empty tables, a nullable column without a default on history (a catalog
-- change on the parent, inherited by every partition; no rewrite), and the history CHECK
-- replaced NOT VALID (no scan; every existing row passed the narrower check it replaces).

-- One queued delivery: what the dispatcher sends downstream, and where the item stands.
--   due_at       when the item may next be taken (the receipt, or a retry's delay after it).
--   attempt      the fence: + 1 on every take, never reset (a replay keeps counting).
--   tries        takes in the current budget: + 1 on every take, 0 again on a replay.
--   lease_until  set while a dispatcher holds the item (a lapsed one makes it takeable again);
--                NULL when nobody took it since its receipt, its last retry or its replay.
--   holder_*     the dispatcher's gateway instance and boot, so that its next boot frees it.
--   dead_at      set once the item is a dead letter; such an item is never taken.
-- Items outlive their dedup record (a dead letter is kept for its own retention), so there is
-- no foreign key to dedup, and (source, event_id) is not unique: an event delivered again after
-- its TTL (late duplicates 'off' or 'flag') is claimed and queued again.
CREATE TABLE inbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source          text COLLATE "C" NOT NULL,
    event_id        text COLLATE "C" NOT NULL,
    body            bytea       NOT NULL,
    content_type    text,
    -- The headers the downstream needs, in order: name i goes with value i.
    header_names    text[]      NOT NULL DEFAULT '{}',
    header_values   text[]      NOT NULL DEFAULT '{}',
    received_at     timestamptz NOT NULL,
    due_at          timestamptz NOT NULL,
    attempt         integer     NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    tries           integer     NOT NULL DEFAULT 0 CHECK (tries >= 0),
    lease_until     timestamptz,
    holder_instance text COLLATE "C",
    holder_boot     bigint,
    dead_at         timestamptz,
    CHECK (cardinality(header_names) = cardinality(header_values))
);

-- take: one source's live items in due order. A take changes no indexed column (attempt, tries,
-- lease and holder are not in it), so it is a HOT update when the page has room.
CREATE INDEX inbox_due ON inbox (source, due_at, id) WHERE dead_at IS NULL;
-- dead_letters and purge_dead_letters: dead letters, oldest death first.
CREATE INDEX inbox_dead ON inbox (dead_at) WHERE dead_at IS NOT NULL;

-- Every failed attempt of an item, as retry_later and dead_letter log it; gone with the item.
CREATE TABLE inbox_attempts (
    item_id bigint      NOT NULL REFERENCES inbox (id) ON DELETE CASCADE,
    attempt integer     NOT NULL,
    at      timestamptz NOT NULL,
    status  integer,
    error   text        NOT NULL,
    PRIMARY KEY (item_id, attempt)
);

-- An operator's words on a history row: a replay's reason (NULL on every other row).
ALTER TABLE history ADD COLUMN note text;

-- 'dead_lettered': the event's queue item may not be tried again and is kept as a dead letter.
-- 'replayed': a dead letter moved back to the queue (note says why).
ALTER TABLE history DROP CONSTRAINT history_outcome_check;
ALTER TABLE history ADD CONSTRAINT history_outcome_check
    CHECK (outcome IN ('claimed', 'duplicate', 'in_flight', 'conflict', 'reclaimed', 'completed',
                       'released', 'late_duplicate', 'abandoned', 'dead_lettered', 'replayed'))
    NOT VALID;

-- enqueue(req, item): the claim of one key, done at once (mark-on-receipt, no holder), and, when
-- it is won, the queue item, in one call and so in one transaction: both are written or neither
-- is. The answer is claim_one's, plus the new item's id (NULL when nothing was queued: a
-- duplicate, an in-flight or conflicting record, a rejected late duplicate).
--
-- Races are claim_one's to settle: in batched mode the loser of the dedup insert waits for the
-- winner's transaction (which holds the item insert too) and then reads its record; in
-- partitioned mode the key's advisory lock, taken here as claim_batch takes it, serializes them.
-- One key's lock only, so no cycle with a claim batch's locks.
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
                     v_partitioned, p_late, NULL, NULL) AS c;

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

-- register_boot, as in schema 2, and besides: every live inbox item an earlier boot of the
-- instance holds under a running lease is no longer held (lease and holder cleared), so any
-- dispatcher takes it at once (its attempt goes up then) and the gone boot's report on it is
-- stale even before that. r_items_freed counts them; r_freed still counts claims only. Items
-- carry no history row here: nothing happened to the event. Like dedup, inbox has no index on
-- the holder: a boot scans the live items once.
DROP FUNCTION register_boot(text);

CREATE FUNCTION register_boot(p_instance text)
RETURNS TABLE (r_boot bigint, r_started_ms bigint, r_freed bigint, r_items_freed bigint)
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

    WITH items AS (
        UPDATE inbox q SET lease_until = NULL, holder_instance = NULL, holder_boot = NULL
         WHERE q.holder_instance = p_instance AND q.holder_boot < v_boot
           AND q.dead_at IS NULL AND q.lease_until > v_now
        RETURNING q.id
    )
    SELECT count(*) INTO r_items_freed FROM items;

    r_boot := v_boot;
    r_started_ms := epoch_ms(v_now);
    RETURN NEXT;
END
$$;
