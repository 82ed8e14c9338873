-- complete / release: only the token that holds the live record may finish it.
-- KEYS and ARGV[1..4]: see common.lua. ARGV[5] = "complete" or "release", ARGV[6] = the token's
-- attempt, ARGV[7] = the token's nonce (16 hex digits).
-- Returns 1 when done, 2 when done but the source stream could not take the row, 3 when there was
-- nothing to do (completing a done record), 0 when the token is stale.
local now = server_now()
local rec, n = load(now)
if rec and rec.err then
  return rec
end
if not rec or rec.attempt ~= tonumber(ARGV[6]) or rec.nonce ~= ARGV[7] then
  return 0
end
if ARGV[5] == 'release' then
  redis.call('HDEL', KEYS[1], 'r')
  write(n, now, 'released', false, rec.attempt, nil, rec.fp, nil)
elseif rec.state == 'd' then
  return 3
else
  rec.state = 'd'
  rec.lease_until = nil
  hold(rec, nil, nil)
  write(n, now, 'completed', true, rec.attempt, nil, rec.fp, rec)
end
if stream_failed then
  return 2
end
return 1
