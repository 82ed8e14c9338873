-- idemgate PostgreSQL schema, version 8: each boot's liveness lease.
--
-- A boot holds its instance name while its lease runs (renewed by its heartbeat, ended when it
-- stops), and says where it runs. A new boot registers, and frees the claims and inbox items of
-- the boots before it, only when the latest one is provably dead: its lease lapsed, or it ended
-- it. A second process under a live name is refused with the live boot's host and pid and
-- changes nothing. Before this version a second start under a running name freed every claim
-- the running process held, and its retries were processed again.
--
-- Quick on any schema: columns with a constant default or none (catalog changes), and functions.
-- A boot registered before this version has no lease (alive_until NULL) and is taken for dead,
-- as every earlier boot was. A build of schema 7 still running keeps calling register_boot(text),
-- which now takes the same care: it registers with a 30 s lease it never renews (so a restart of
-- it waits at most that long), and is refused while another boot of its name is alive.

ALTER TABLE instances
    ADD COLUMN alive_until timestamptz,
    ADD COLUMN host        text    NOT NULL DEFAULT '',
    ADD COLUMN pid         integer NOT NULL DEFAULT 0,
    -- Who the process is, for a later process on the same machine to tell whether it still runs.
    ADD COLUMN process     text    NOT NULL DEFAULT '';

-- A new boot of p_instance with a liveness lease of p_lease_ms, from p_host as p_pid (the
-- process p_process), in one transaction by the database's clock. r_live is true when the
-- instance's latest boot is alive and is not p_supersede (a boot the caller proved dead): then
-- nothing changed, and r_boot, r_started_ms, r_host, r_pid, r_process and r_alive_until_ms
-- describe that boot. Otherwise r_boot is the new boot, which freed r_freed claims and r_items_freed inbox
-- items of the boots before it, as schema 3's register_boot did.
--
-- Concurrent boots of one name serialize on its row: the upsert's condition is judged against
-- the row as the winner committed it, so of two processes starting at once exactly one
-- registers and the other hears r_live.
CREATE FUNCTION register_boot(p_instance text, p_lease_ms bigint, p_host text, p_pid integer,
                              p_process text, p_supersede bigint)
RETURNS TABLE (r_live boolean, r_boot bigint, r_started_ms bigint, r_host text, r_pid integer,
               r_process text, r_alive_until_ms bigint, r_now_ms bigint, r_freed bigint,
               r_items_freed bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_boot bigint;
BEGIN
    r_now_ms := epoch_ms(v_now);
    INSERT INTO instances AS i (instance, boot, started_at, alive_until, host, pid, process)
    VALUES (p_instance, 1, v_now, v_now + p_lease_ms * interval '1 ms', p_host, p_pid,
            p_process)
    ON CONFLICT (instance) DO UPDATE
       SET boot = i.boot + 1, started_at = excluded.started_at,
           alive_until = excluded.alive_until, host = excluded.host, pid = excluded.pid,
           process = excluded.process
     WHERE i.alive_until IS NULL OR i.alive_until <= v_now OR i.boot = p_supersede
    RETURNING i.boot INTO v_boot;

    IF NOT FOUND THEN
        SELECT true, i.boot, epoch_ms(i.started_at), i.host, i.pid, i.process,
               epoch_ms(i.alive_until)
          INTO r_live, r_boot, r_started_ms, r_host, r_pid, r_process, r_alive_until_ms
          FROM instances i WHERE i.instance = p_instance;
        r_freed := 0;
        r_items_freed := 0;
        RETURN NEXT;
        RETURN;
    END IF;

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

    r_live := false;
    r_boot := v_boot;
    r_started_ms := epoch_ms(v_now);
    r_host := p_host;
    r_pid := p_pid;
    r_process := p_process;
    r_alive_until_ms := epoch_ms(v_now + p_lease_ms * interval '1 ms');
    RETURN NEXT;
END
$$;

-- Schema 3's signature, for a build of schema 7 still running: the same care, with a 30 s lease
-- it never renews, refused (an error naming the live boot) while another boot of its name lives.
DROP FUNCTION register_boot(text);

CREATE FUNCTION register_boot(p_instance text)
RETURNS TABLE (r_boot bigint, r_started_ms bigint, r_freed bigint, r_items_freed bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v record;
BEGIN
    SELECT * INTO v FROM register_boot(p_instance, 30000, '', 0, '', NULL);
    IF v.r_live THEN
        RAISE EXCEPTION 'idemgate: instance % is held by a live process (boot %, pid % on %)',
            p_instance, v.r_boot, v.r_pid, v.r_host;
    END IF;
    r_boot := v.r_boot;
    r_started_ms := v.r_started_ms;
    r_freed := v.r_freed;
    r_items_freed := v.r_items_freed;
    RETURN NEXT;
END
$$;

-- heartbeat(p_instance, p_boot, p_lease_ms): the boot's liveness lease runs p_lease_ms from now,
-- or (p_lease_ms NULL) ends now. Answers the lease's new end and the instance's latest boot; no
-- row changes when p_boot is not the latest (a newer boot superseded it), and r_until is NULL.
CREATE FUNCTION heartbeat_boot(p_instance text, p_boot bigint, p_lease_ms bigint)
RETURNS TABLE (r_until_ms bigint, r_latest bigint)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    UPDATE instances i
       SET alive_until = v_now + coalesce(p_lease_ms, 0) * interval '1 ms'
     WHERE i.instance = p_instance AND i.boot = p_boot
    RETURNING epoch_ms(i.alive_until), i.boot INTO r_until_ms, r_latest;
    IF NOT FOUND THEN
        r_until_ms := NULL;
        SELECT i.boot INTO r_latest FROM instances i WHERE i.instance = p_instance;
        r_latest := coalesce(r_latest, 0);
    END IF;
    RETURN NEXT;
END
$$;

-- release_unanswered(keys, nonces): a claim batch was sent and its connection broke before the
-- answer came (a database that stopped answering): its claims may have been won, and nobody
-- holds their tokens. Each record that still carries the nonce its claim would have written,
-- and was not completed, is deleted with a 'released' history row, so the sender's retry is
-- processed at once instead of waiting out the lease. A record another claim took over (a new
-- nonce) is left alone. Answers how many went.
CREATE FUNCTION release_unanswered(p_source text[], p_event_id text[], p_nonce bigint[])
RETURNS bigint
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_n   bigint;
BEGIN
    WITH gone AS (
        DELETE FROM dedup d
         USING unnest(p_source, p_event_id, p_nonce) AS u(s, e, nc)
         WHERE d.source = u.s AND d.event_id = u.e AND d.nonce = u.nc
           AND d.completed IS NOT TRUE
        RETURNING d.source, d.event_id, d.attempt, d.fingerprint
    ), hist AS (
        INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, gap_ms,
                             fingerprint)
        SELECT g.source, g.event_id, 'released', false, g.attempt, v_now, NULL, g.fingerprint
          FROM gone g
    )
    SELECT count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;
