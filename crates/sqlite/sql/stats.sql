SELECT source,
       sum(expires_at > ?1)  AS live,
       sum(expires_at <= ?1) AS expired,
       min(first_seen)       AS oldest
FROM dedup
GROUP BY source
ORDER BY source
