-- Partitions for history rows up to $1 ms from now and dedup rows expiring up to $2 ms from now.
SELECT ensure_partitions(now() + $1::bigint * interval '1 ms', now() + $2::bigint * interval '1 ms')
       AS created
