-- replay_dead_letters(source $1 or every source when NULL, died within $2 ms or ever when NULL,
-- reason $3; none when an event $4 is given: one source's event is inbox_replay_event.sql's): the
-- chosen dead letters are due now with a fresh budget
-- (tries 0; the attempt number goes on), each with a 'replayed' history row noting the reason.
-- One statement: all of them move, or none.
WITH moved AS (
    UPDATE inbox
       SET dead_at = NULL, tries = 0, due_at = now(), lease_until = NULL,
           holder_instance = NULL, holder_boot = NULL
     WHERE dead_at IS NOT NULL
       AND ($1::text IS NULL OR source = $1::text)
       AND ($2::bigint IS NULL OR dead_at >= now() - $2::bigint * interval '1 ms')
       AND $4::text IS NULL
    RETURNING source, event_id, attempt
), hist AS (
    INSERT INTO history (source, event_id, outcome, processed, attempt, received_at, note)
    SELECT m.source, m.event_id, 'replayed', false, m.attempt, now(), $3::text
      FROM moved m
)
SELECT count(*)::bigint AS moved FROM moved
