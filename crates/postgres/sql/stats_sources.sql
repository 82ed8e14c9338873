SELECT source,
       count(*) FILTER (WHERE expires_at > now())::bigint,
       count(*) FILTER (WHERE expires_at <= now())::bigint,
       epoch_ms(min(first_seen))
  FROM dedup
 GROUP BY source
 ORDER BY source
