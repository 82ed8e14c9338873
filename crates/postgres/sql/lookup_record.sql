-- The live record of one key (an expired one counts as absent).
SELECT state, attempt, nonce, fingerprint, epoch_ms(first_seen) AS first_seen_ms,
       epoch_ms(lease_until) AS lease_until_ms, epoch_ms(expires_at) AS expires_ms,
       holder_instance, holder_boot, completed IS TRUE AS completed, result, result_withheld
  FROM dedup
 WHERE source = $1::text AND event_id = $2::text AND expires_at > clock_timestamp()
 ORDER BY expires_at DESC
 LIMIT 1
