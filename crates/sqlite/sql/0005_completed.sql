-- idemgate SQLite schema, version 5: a record says whether a completion made it done.
--
-- A done record is either completed (its claim's work succeeded) or marked done on receipt. A
-- release may undo the second (mark-on-receipt's undo when its work fails), never the first: a
-- release of a completed claim would delete the record, and the next delivery would be processed
-- again. Records done before this version read as not completed, as they did. A new column with a
-- constant default: no rewrite of the table.
ALTER TABLE dedup ADD COLUMN completed INTEGER NOT NULL DEFAULT 0;
