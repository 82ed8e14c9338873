-- complete / release: only the token that holds the live record may finish it.
-- KEYS[1] = record, KEYS[2] = history.
-- ARGV[1] = history retention (ms), ARGV[2] = history cap, ARGV[3] = "complete" or "release",
-- ARGV[4] = the token's attempt, ARGV[5] = the token's nonce (16 hex digits).
-- Returns 1 when done (or nothing to do), 0 when the token is stale.
local now = server_now()
local rec = live(now)
if rec and rec.err then
  return rec
end
if not rec or rec.attempt ~= tonumber(ARGV[4]) or rec.nonce ~= ARGV[5] then
  return 0
end
if ARGV[3] == 'release' then
  redis.call('DEL', KEYS[1])
  history(now, 'released', false, rec.attempt, nil, rec.fp, nil)
  return 1
end
if rec.state == 'd' then
  return 1
end
rec.state = 'd'
rec.lease_until = nil
redis.call('SET', KEYS[1], encode(rec), 'PXAT', ms(rec.expires_at))
history(now, 'completed', true, rec.attempt, nil, rec.fp, nil)
return 1
