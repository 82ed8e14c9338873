-- The migrations applied to this schema. Created (if absent) under the migration lock before
-- anything else, so the version check below it always has a table to read.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    bigint      PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
