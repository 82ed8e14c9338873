SELECT (SELECT count(*) FROM history)::bigint AS history_rows,
       (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('dedup'))::bigint
     + (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('history'))::bigint
       AS size_bytes
