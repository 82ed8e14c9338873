-- History's partitions wholly older than the retention ($1 ms) by the store's clock, oldest
-- first: what an archiving retention job exports, confirms and drops one at a time.
SELECT c.relname::text AS name, epoch_ms(b.lower) AS from_ms, epoch_ms(b.upper) AS until_ms
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
 CROSS JOIN LATERAL (
       SELECT substring(pg_get_expr(c.relpartbound, c.oid)
                        FROM 'FROM \(''([^'']+)''\)')::timestamptz AS lower,
              substring(pg_get_expr(c.relpartbound, c.oid)
                        FROM 'TO \(''([^'']+)''\)')::timestamptz AS upper) b
 WHERE i.inhparent = 'history'::regclass
   AND b.upper <= now() - $1::bigint * interval '1 millisecond'
 ORDER BY b.lower
