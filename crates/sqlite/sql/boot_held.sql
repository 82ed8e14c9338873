-- The live processing claims that earlier boots (below ?2) of instance ?1 hold under a lease
-- still running at ?3: what a new boot frees. Reads dedup whole (no index on the holder: boots
-- are rare, claims are not).
SELECT source, event_id,
       state, attempt, nonce, fingerprint, first_seen, lease_until, expires_at, holder_instance,
       holder_boot, completed, result, result_withheld
FROM dedup
WHERE holder_instance = ?1 AND holder_boot < ?2 AND state = 'processing'
  AND lease_until > ?3 AND expires_at > ?3
