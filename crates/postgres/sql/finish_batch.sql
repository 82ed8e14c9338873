-- One group-committed batch of completions and releases (see finish_batch in
-- migrations/0004_finish_batch.sql).
SELECT r_idx, r_held
  FROM finish_batch($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::boolean[])
