-- idemgate SQLite schema, version 3: the inbox queue, its attempts, and a note on history rows.
--
-- An inbox delivery is claimed (done at once) and queued in one transaction. The dispatcher takes
-- due items under a lease, fenced by `attempt` (+1 on each take): a report with an older attempt,
-- or on an item no longer taken (`lease_until` NULL), is stale. `tries` counts the takes of the
-- current budget (a replay sets it back to 0). A dead letter keeps its body, headers and every
-- attempt until `purge_dead_letters`. Times are Unix milliseconds from the store's clock.

-- An operator's words on a history row: a replay's reason.
ALTER TABLE history ADD COLUMN note TEXT;

CREATE TABLE inbox_items (
    -- AUTOINCREMENT: an id is never given out twice, so a report on a delivered (deleted) item
    -- can never match a newer item that got its id.
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    source          TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    body            BLOB    NOT NULL,
    content_type    TEXT,
    received_at     INTEGER NOT NULL,
    -- Not taken before this.
    due_at          INTEGER NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    tries           INTEGER NOT NULL DEFAULT 0 CHECK (tries >= 0),
    -- Set while taken (a lapsed lease is due again); NULL once reported, replayed or freed by the
    -- holder's next boot.
    lease_until     INTEGER,
    holder_instance TEXT,
    holder_boot     INTEGER,
    -- Set on dead letters.
    dead_at         INTEGER,
    CHECK (dead_at IS NULL OR lease_until IS NULL)
);

-- take: a source's due items, dead letters left out.
CREATE INDEX inbox_by_due ON inbox_items (source, due_at) WHERE dead_at IS NULL;
-- inbox_stats and dead_letters by source: covering, so counting never reads a body.
CREATE INDEX inbox_by_source ON inbox_items (source, dead_at, lease_until, received_at);
-- purge_dead_letters and replay's `since`.
CREATE INDEX inbox_dead ON inbox_items (dead_at) WHERE dead_at IS NOT NULL;

-- The headers the downstream needs, in the sender's order.
CREATE TABLE inbox_headers (
    item_id  INTEGER NOT NULL REFERENCES inbox_items (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name     TEXT    NOT NULL,
    value    TEXT    NOT NULL,
    PRIMARY KEY (item_id, position)
) WITHOUT ROWID;

-- One row per failed attempt (retried or dead-lettered), kept across replays.
CREATE TABLE inbox_attempts (
    item_id INTEGER NOT NULL REFERENCES inbox_items (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    status  INTEGER,
    error   TEXT    NOT NULL,
    PRIMARY KEY (item_id, attempt)
) WITHOUT ROWID;
