-- A new boot of one gateway instance, and its liveness lease. KEYS[1] = the instance's hash:
-- boot = its latest boot (from 1), started_at = when it started, alive_until = the end of its
-- liveness lease (ms, this server's clock; absent for a boot registered before boots had leases,
-- which is taken for dead), host and pid = where it runs.
--
-- ARGV[1] = "boot", "beat" or "end". "boot": ARGV[2] = the lease (ms), ARGV[3] = the host, ARGV[4]
-- = the pid, ARGV[5] = the process, ARGV[6] = the boot the caller proved dead (empty for none);
-- returns {'booted', boot, started_at}, or {'live', boot, started_at, host, pid, alive_until,
-- now, process} when the latest boot is alive and is not ARGV[6] (nothing changed). "beat": ARGV[2] = the boot,
-- ARGV[3] = the lease (ms); "end": ARGV[2] = the boot (its lease ends now); both return
-- {'until', alive_until}, or {'superseded', latest boot (0 for none)} when ARGV[2] is not the
-- latest boot (nothing changed).
local function boot(KEYS, ARGV)
  local now = server_now()
  local cur = redis.call('HMGET', KEYS[1], 'boot', 'started_at', 'alive_until', 'host', 'pid',
    'process')
  local latest = tonumber(cur[1]) or 0
  local alive_until = tonumber(cur[3])
  if ARGV[1] == 'boot' then
    if alive_until and alive_until > now and tostring(latest) ~= ARGV[6] then
      return {'live', latest, tonumber(cur[2]), cur[4] or '', tonumber(cur[5]) or 0, alive_until,
        now, cur[6] or ''}
    end
    local n = redis.call('HINCRBY', KEYS[1], 'boot', 1)
    redis.call('HSET', KEYS[1], 'started_at', ms(now), 'alive_until', ms(now + ARGV[2]),
      'host', ARGV[3], 'pid', ARGV[4], 'process', ARGV[5])
    return {'booted', n, now}
  end
  if latest ~= tonumber(ARGV[2]) then
    return {'superseded', latest}
  end
  local new_until = now
  if ARGV[1] == 'beat' then
    new_until = now + ARGV[3]
  end
  redis.call('HSET', KEYS[1], 'alive_until', ms(new_until))
  return {'until', new_until}
end

register('boot', boot)
