SELECT state, attempt, nonce, fingerprint, first_seen, lease_until, expires_at, holder_instance,
       holder_boot, completed, result, result_withheld
FROM dedup
WHERE source = ?1 AND event_id = ?2
