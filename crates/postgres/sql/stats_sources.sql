SELECT source,
       count(*) FILTER (WHERE expires_at > now())::bigint AS live,
       count(*) FILTER (WHERE expires_at <= now())::bigint AS expired,
       epoch_ms(min(first_seen)) AS oldest_ms
  FROM dedup
 GROUP BY source
 ORDER BY source
