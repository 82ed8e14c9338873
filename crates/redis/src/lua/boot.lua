-- A new boot of one gateway instance. KEYS[1] = the instance's hash: boot = its latest boot
-- (from 1), started_at = when it started (ms, this server's clock).
-- Returns {boot, started_at}.
local function boot(KEYS)
  local now = server_now()
  local n = redis.call('HINCRBY', KEYS[1], 'boot', 1)
  redis.call('HSET', KEYS[1], 'started_at', ms(now))
  return {n, now}
end

register('boot', boot)
