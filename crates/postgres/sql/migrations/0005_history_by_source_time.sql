-- idemgate PostgreSQL schema, version 5: history by source and time.
--
-- The dashboard counts one source's deliveries per outcome over the last hour and day
-- (sql/timeline.sql). This index holds every column that count reads, so it is an index-only
-- range scan of one source's recent rows, in the recent partitions only, however long the
-- history is. Created on the parent, it is created on every partition, and on each one made
-- later. Building it on a large history takes a while under the migration's lock (history
-- writes wait); on such a store, create it by hand beforehand, partition by partition, with
-- CREATE INDEX CONCURRENTLY, then attach: this migration then only checks it exists.

CREATE INDEX IF NOT EXISTS history_by_source_time ON history (source, received_at, outcome);
