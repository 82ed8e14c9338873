-- Takes up to ?3 of source ?1's items due at ?2 (not dead, never taken or their lease lapsed),
-- oldest first, under a lease until ?4 for holder (?5, ?6). Walks inbox_by_due. RETURNING comes
-- in no set order: the caller sorts by id.
UPDATE inbox_items
SET attempt = attempt + 1,
    tries = tries + 1,
    lease_until = ?4,
    holder_instance = ?5,
    holder_boot = ?6
WHERE id IN (
    SELECT id FROM inbox_items
    WHERE source = ?1 AND dead_at IS NULL AND due_at <= ?2
      AND (lease_until IS NULL OR lease_until <= ?2)
    ORDER BY id
    LIMIT ?3
)
RETURNING id, event_id, body, content_type, received_at, attempt, tries
