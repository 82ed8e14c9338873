SELECT (SELECT count(*) FROM history)::bigint AS history_rows,
       (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('dedup'))::bigint
     + (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('history'))::bigint
     + pg_total_relation_size('inbox') + pg_total_relation_size('inbox_attempts')
       AS size_bytes
