-- The claims scenario's ceiling: scratch tables of the shape idemgate-postgres writes a claim
-- into (crates/postgres/sql/migrations, batched mode, after 0005), created in the bench's own
-- schema (search_path) and dropped with it. Same columns, collations, keys, indexes and checks;
-- history is range-partitioned on received_at as the store's is, here with one default partition
-- (the store keeps monthly ones; an insert routes to either the same way).

CREATE TABLE dedup (
    source          text COLLATE "C" NOT NULL,
    event_id        text COLLATE "C" NOT NULL,
    state           text        NOT NULL CHECK (state IN ('processing', 'done')),
    attempt         integer     NOT NULL,
    nonce           bigint      NOT NULL,
    fingerprint     bytea,
    first_seen      timestamptz NOT NULL,
    lease_until     timestamptz,
    expires_at      timestamptz NOT NULL,
    holder_instance text COLLATE "C",
    holder_boot     bigint,
    PRIMARY KEY (source, event_id)
) WITH (fillfactor = 80);

CREATE INDEX dedup_expiry ON dedup (expires_at) WHERE first_seen IS NOT NULL;

CREATE TABLE history (
    id          bigserial,
    source      text COLLATE "C" NOT NULL,
    event_id    text COLLATE "C" NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('claimed', 'duplicate', 'in_flight',
                    'conflict', 'reclaimed', 'completed', 'released', 'late_duplicate',
                    'abandoned', 'dead_lettered', 'replayed', 'attempt_failed')),
    processed   boolean     NOT NULL DEFAULT false,
    attempt     integer,
    received_at timestamptz NOT NULL,
    gap_ms      bigint,
    fingerprint bytea,
    note        text
) PARTITION BY RANGE (received_at);

CREATE TABLE history_default PARTITION OF history DEFAULT;

CREATE INDEX history_key ON history (source, event_id);

-- Schema 9's: the dashboard's counts of one source's recent deliveries.
CREATE INDEX history_reporting ON history (source, received_at, outcome) WHERE outcome <> '';
