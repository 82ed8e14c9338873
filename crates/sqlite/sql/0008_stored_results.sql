-- idemgate SQLite schema, version 8: a completed record keeps its result.
--
-- result: what the completion stored for the event's duplicates (idemgate_core::StoredResult in
-- its one layout: status, headers, body); result_withheld: the size of a result refused as over
-- the limit, the claim completed without it. Both NULL on every record but a completed one, and
-- written by the same upsert as the completion; a record written again (a claim of an expired
-- one) clears them. They go with their row, so a result expires with its record. New columns
-- without a default: no rewrite of the table.
ALTER TABLE dedup ADD COLUMN result BLOB;
ALTER TABLE dedup ADD COLUMN result_withheld INTEGER;
