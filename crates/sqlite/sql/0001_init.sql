-- idemgate SQLite schema, version 1.
--
-- Two tables, two lifetimes: `dedup` holds one live record per (source, event_id) for as long as
-- the sender can retry; `history` keeps one row per delivery attempt or state change, for audit
-- and late-duplicate detection, under its own retention. Times are Unix milliseconds (UTC) read
-- from the store's clock.

CREATE TABLE dedup (
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('processing', 'done')),
    attempt     INTEGER NOT NULL CHECK (attempt >= 1),
    nonce       INTEGER NOT NULL,
    fingerprint BLOB             CHECK (fingerprint IS NULL OR length(fingerprint) = 32),
    first_seen  INTEGER NOT NULL,
    lease_until INTEGER,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (source, event_id)
) WITHOUT ROWID;

-- The sweeper walks this index oldest first.
CREATE INDEX dedup_by_expiry ON dedup (expires_at);

CREATE TABLE history (
    id          INTEGER PRIMARY KEY,
    source      TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    -- 1 when, as of this row, the event counts as processed (a completion, a mark-on-receipt
    -- claim, a rejected late duplicate); a later 'released' row undoes it.
    processed   INTEGER NOT NULL DEFAULT 0,
    attempt     INTEGER,
    received_at INTEGER NOT NULL,
    gap_ms      INTEGER,
    fingerprint BLOB
);

-- "Did we process X, and when?" and late-duplicate lookups.
CREATE INDEX history_by_key ON history (source, event_id, id);
-- Retention deletes and the TTL advisor's time ranges.
CREATE INDEX history_by_time ON history (received_at);
