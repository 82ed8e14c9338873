-- idemgate SQLite schema, version 2: who holds each claim, each gateway instance's boots, and the
-- store's identity.
--
-- A claim records the instance and boot that hold it while it is processing. When an instance
-- starts again, it registers a new boot and ends the leases its earlier boots still hold, so a
-- crash costs seconds, not a lease. That scan reads dedup whole: boots are rare, and an index on
-- the holder would cost every claim.

ALTER TABLE dedup ADD COLUMN holder_instance TEXT;
ALTER TABLE dedup ADD COLUMN holder_boot INTEGER;

-- Each gateway instance's latest boot (counted from 1) and when it started (Unix ms, the store's
-- clock).
CREATE TABLE instances (
    instance   TEXT    NOT NULL PRIMARY KEY,
    boot       INTEGER NOT NULL CHECK (boot >= 1),
    started_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Facts about the store itself. store_id is created once, with the schema, and never changes:
-- a Redis tier in front of this store only answers from cache entries written for this id, so
-- a deleted and recreated database never sees its predecessor's duplicates.
CREATE TABLE meta (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

INSERT INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))));
