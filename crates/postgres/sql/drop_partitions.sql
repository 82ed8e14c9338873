-- Whole partitions past their time: dedup once expired, history past the retention ($1 ms).
SELECT drop_expired_partitions($1::bigint * interval '1 ms') AS dropped
