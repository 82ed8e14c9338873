-- A new boot of instance $1: its number, when it started (epoch ms), the claims it freed, and
-- the inbox items it freed.
SELECT r_boot, r_started_ms, r_freed, r_items_freed FROM register_boot($1::text)
