-- take(source $1, limit $2, lease $3 ms, holder $4/$5): up to $2 due items of one source, oldest
-- due first, each under a new lease with its attempt (the fence) and tries incremented. An item
-- whose lease lapsed is due again. SKIP LOCKED: another dispatcher's take in progress is passed
-- by, and one it committed meanwhile is re-checked (its lease now runs), so no item goes to two
-- dispatchers. One statement, one transaction, the database's clock.
WITH picked AS (
    SELECT id
      FROM inbox
     WHERE source = $1::text AND dead_at IS NULL AND due_at <= now()
       AND (lease_until IS NULL OR lease_until <= now())
     ORDER BY due_at, id
     LIMIT $2::bigint
       FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE inbox i
       SET attempt = i.attempt + 1, tries = i.tries + 1,
           lease_until = now() + $3::bigint * interval '1 ms',
           holder_instance = $4::text, holder_boot = $5::bigint
      FROM picked p
     WHERE i.id = p.id
    RETURNING i.id, i.attempt, i.tries, i.source, i.event_id, i.body, i.content_type,
              i.header_names, i.header_values, i.due_at, epoch_ms(i.received_at) AS received_ms,
              epoch_ms(i.lease_until) AS lease_until_ms
)
SELECT id, attempt, tries, source, event_id, body, content_type, header_names, header_values,
       received_ms, lease_until_ms
  FROM taken
 ORDER BY due_at, id
