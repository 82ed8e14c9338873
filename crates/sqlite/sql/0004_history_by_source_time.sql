-- idemgate SQLite schema, version 4: history by source and time.
--
-- The dashboard counts one source's deliveries per outcome over the last hour and day. This
-- index holds every column that count reads, so it walks one source's time range in the index
-- alone, however long the history is.
CREATE INDEX history_by_source_time ON history (source, received_at, outcome);
