-- A completion keeping its result (complete_keeping in migrations/0011_stored_results.sql): $1
-- source, $2 event id, $3 attempt, $4 nonce, $5 the stored result's bytes, $6 a withheld
-- result's size ($5 and $6 NULL for none). r_held: false when the token is stale.
SELECT complete_keeping($1::text, $2::text, $3::integer, $4::bigint, $5::bytea, $6::bigint)
       AS r_held
