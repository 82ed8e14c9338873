-- lookup: the live record (or false) and the history of one event, read at one instant.
-- KEYS[1] = record, KEYS[2] = history.
-- Returns {record or false, history rows oldest first}.
local now = server_now()
local rec = live(now)
if rec and rec.err then
  return rec
end
local value = false
if rec then
  value = encode(rec)
end
return {value, redis.call('LRANGE', KEYS[2], 0, -1)}
