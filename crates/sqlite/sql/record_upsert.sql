INSERT INTO dedup (source, event_id, state, attempt, nonce, fingerprint, first_seen, lease_until,
                   expires_at, holder_instance, holder_boot, completed, result,
                   result_withheld)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
ON CONFLICT (source, event_id) DO UPDATE SET
    state           = excluded.state,
    attempt         = excluded.attempt,
    nonce           = excluded.nonce,
    fingerprint     = excluded.fingerprint,
    first_seen      = excluded.first_seen,
    lease_until     = excluded.lease_until,
    expires_at      = excluded.expires_at,
    holder_instance = excluded.holder_instance,
    holder_boot     = excluded.holder_boot,
    completed       = excluded.completed,
    result          = excluded.result,
    result_withheld = excluded.result_withheld
