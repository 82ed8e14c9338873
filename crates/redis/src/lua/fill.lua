-- Tier mode: caches a done record's answer until (just before) the record expires.
-- KEYS[1] = cache entry (one per event and inner store id).
-- ARGV[1] = the entry (d|first_seen|expires_at|fingerprint), ARGV[2] = expire at (ms since the
-- epoch), ARGV[3] = the tombstone a release leaves (x).
-- Returns {'cached'}, or {'released'} when a release's tombstone is there, or {'expiring'} when the
-- answer would expire before it is written. (Decoded by src/reply.rs.)
if redis.call('GET', KEYS[1]) == ARGV[3] then
  return {'released'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ARGV[2]) <= now then
  return {'expiring'}
end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
return {'cached'}
