-- replay_dead_letters of one event (source $1, event $4, found through inbox_key; died within $2
-- ms or ever when NULL; reason $3): as inbox_replay.sql.
WITH moved AS (
    UPDATE inbox
       SET dead_at = NULL, tries = 0, due_at = now(), lease_until = NULL,
           holder_instance = NULL, holder_boot = NULL
     WHERE source = $1::text AND event_id = $4::text AND dead_at IS NOT NULL
       AND ($2::bigint IS NULL OR dead_at >= now() - $2::bigint * interval '1 ms')
    RETURNING source, event_id, attempt
), hist AS (
    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, note)
    SELECT m.source, m.event_id, 'replayed', false, m.attempt, now(), $3::text
      FROM moved m
)
SELECT count(*)::bigint AS moved FROM moved
