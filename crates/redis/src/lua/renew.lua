-- renew: a new lease for the processing record the token holds, never past its expiry.
-- KEYS and ARGV[1..4]: see common.lua. ARGV[5] = the token's attempt, ARGV[6] = its nonce (16
-- hex digits), ARGV[7] = the lease (ms).
-- Returns {'renewed', lease_until}, {'already_done', expires_at} when the record is already done
-- under this token (nothing written), or {'stale'} when the token does not hold the live record.
-- Writes no history row. (Decoded by src/reply.rs.)
local function renew(KEYS, ARGV)
  local now = server_now()
  local rec, ev = load(KEYS, now)
  if rec and rec.err then
    return rec
  end
  if not rec or rec.attempt ~= tonumber(ARGV[5]) or rec.nonce ~= ARGV[6] then
    return {'stale'}
  end
  if rec.state ~= 'p' then
    return {'already_done', rec.expires_at}
  end
  local until_ms = now + tonumber(ARGV[7])
  if until_ms > rec.expires_at then
    until_ms = rec.expires_at
  end
  rec.lease_until = until_ms
  -- r alone, with o (and g) when a record of the earlier layout is rewritten in this one.
  local record = encode_rec(ev, rec)
  local held = holder(rec.hi, rec.hb)
  if ev.new_g then
    redis.call('HSET', KEYS[1], 'r', record, 'o', held, 'g', ev.g)
  elseif held ~= '' and held ~= ev.o then
    redis.call('HSET', KEYS[1], 'r', record, 'o', held)
  else
    redis.call('HSET', KEYS[1], 'r', record)
  end
  return {'renewed', until_ms}
end

register('renew', renew)
