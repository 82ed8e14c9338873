-- A new boot of one gateway instance. KEYS[1] = the instance's hash: boot = its latest boot
-- (from 1), started_at = when it started (ms, this server's clock).
-- Returns {boot, started_at}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local boot = redis.call('HINCRBY', KEYS[1], 'boot', 1)
redis.call('HSET', KEYS[1], 'started_at', string.format('%d', now))
return {boot, now}
