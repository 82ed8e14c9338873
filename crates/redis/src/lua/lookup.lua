-- lookup: the live record (or false) and the history of one event, read at one instant.
-- KEYS and ARGV[1..2]: see common.lua.
-- Returns {record or false, history rows oldest first}.
local now = server_now()
local rec, n = load(now)
if rec and rec.err then
  return rec
end
local value = false
if rec then
  value = encode(rec)
end
return {value, rows(n)}
