-- A new boot of instance $1 with a liveness lease of $2 ms, from host $3 as pid $4 (the process
-- $5), over boot $6 if the caller proved it dead; or, when the instance's latest boot is alive
-- (r_live), that boot, unchanged (see migrations/0008).
SELECT r_live, r_boot, r_started_ms, r_host, r_pid, r_process, r_alive_until_ms, r_now_ms,
       r_freed, r_items_freed
  FROM register_boot($1::text, $2::bigint, $3::text, $4::integer, $5::text, $6::bigint)
