-- A new boot of instance $1: its number, when it started (epoch ms), and the claims it freed.
SELECT r_boot, r_started_ms, r_freed FROM register_boot($1::text)
