-- claim: the claim rules of idemgate_core::machine, in one atomic step on this server's clock.
-- KEYS[1] = record, KEYS[2] = history (one hash tag: one slot).
-- ARGV[1] = history retention (ms), ARGV[2] = history cap, ARGV[3] = mode ("s" on success,
-- "r" on receipt), ARGV[4] = fingerprint (hex or empty), ARGV[5] = lease (ms), ARGV[6] = ttl (ms),
-- ARGV[7] = the nonce a won claim gets (16 hex digits), ARGV[8] = late duplicates ("off",
-- "flag" or "reject").
-- Returns {answer, n, gap, expires_at, late_first_seen} (-1 where none):
--   "claimed", "reclaimed", "late_claimed": n = the attempt;
--   "late_rejected", "duplicate", "conflict": n = the first receipt;
--   "in_flight": n = the wait in ms.
local now = server_now()
local fp = ARGV[4]
local rec = live(now)
if rec and rec.err then
  return rec
end

if not rec then
  local on_receipt = ARGV[3] == 'r'
  local expires_at = now + tonumber(ARGV[6])
  local late = nil
  if ARGV[8] ~= 'off' then
    local p = prior()
    if p and p.processed then
      late = p.first_seen
    end
  end
  local new = {
    state = 'p', attempt = 1, nonce = ARGV[7], fp = fp, first_seen = late or now,
    lease_until = now + tonumber(ARGV[5]), expires_at = expires_at,
  }
  if on_receipt or (late and ARGV[8] == 'reject') then
    new.state = 'd'
    new.lease_until = nil
  end
  redis.call('SET', KEYS[1], encode(new), 'PXAT', ms(expires_at))
  if not late then
    history(now, 'claimed', on_receipt, 1, nil, fp, expires_at)
    return {'claimed', 1, -1, expires_at, -1}
  end
  local gap = now - late
  if ARGV[8] == 'reject' then
    history(now, 'late_duplicate', true, nil, gap, fp, expires_at)
    return {'late_rejected', late, gap, expires_at, late}
  end
  history(now, 'late_duplicate', on_receipt, 1, gap, fp, expires_at)
  return {'late_claimed', 1, gap, expires_at, late}
end

local gap = now - rec.first_seen
if fp ~= '' and rec.fp ~= '' and fp ~= rec.fp then
  history(now, 'conflict', false, rec.attempt, gap, fp, nil)
  return {'conflict', rec.first_seen, gap, rec.expires_at, -1}
end
if rec.state == 'p' and rec.lease_until and rec.lease_until > now then
  history(now, 'in_flight', false, rec.attempt, gap, fp, nil)
  return {'in_flight', rec.lease_until - now, gap, rec.expires_at, -1}
end
if rec.state == 'p' then
  -- The holder's lease lapsed: take the claim over, keeping first receipt and expiry.
  rec.attempt = rec.attempt + 1
  rec.nonce = ARGV[7]
  rec.lease_until = now + tonumber(ARGV[5])
  if rec.fp == '' then
    rec.fp = fp
  end
  redis.call('SET', KEYS[1], encode(rec), 'PXAT', ms(rec.expires_at))
  history(now, 'reclaimed', false, rec.attempt, gap, fp, nil)
  return {'reclaimed', rec.attempt, gap, rec.expires_at, -1}
end
history(now, 'duplicate', false, rec.attempt, gap, fp, nil)
return {'duplicate', rec.first_seen, gap, rec.expires_at, -1}
