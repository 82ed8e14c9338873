SELECT state, attempt, nonce, fingerprint, first_seen, lease_until, expires_at, holder_instance,
       holder_boot, completed
FROM dedup
WHERE source = ?1 AND event_id = ?2
