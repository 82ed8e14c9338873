-- Renews boot $2 of instance $1 for $3 ms (or, with $3 NULL, ends its lease now): the lease's
-- new end, NULL when a newer boot (r_latest) superseded it.
SELECT r_until_ms, r_latest FROM heartbeat_boot($1::text, $2::bigint, $3::bigint)
