-- claim: the claim rules of idemgate_core::machine, in one atomic step on this server's clock.
-- KEYS and ARGV[1..4]: see common.lua. ARGV[5] = mode ("s" on success, "r" on receipt),
-- ARGV[6] = fingerprint (hex or empty), ARGV[7] = lease (ms), ARGV[8] = ttl (ms), ARGV[9] = the
-- nonce a won claim gets (16 hex digits), ARGV[10] = late duplicates ("off", "flag", "reject").
-- Returns {answer, n, gap, expires_at, late_first_seen} (-1 where none):
--   "claimed", "reclaimed", "late_claimed": n = the attempt;
--   "late_rejected", "duplicate", "conflict": n = the first receipt;
--   "in_flight": n = the wait in ms.
local now = server_now()
local fp = ARGV[6]
local rec, n = load(now)
if rec and rec.err then
  return rec
end

if not rec then
  local on_receipt = ARGV[5] == 'r'
  local policy = ARGV[10]
  local expires_at = now + tonumber(ARGV[8])
  local late = nil
  if policy ~= 'off' and n > 0 then
    local p = prior(n)
    if p and p.processed then
      late = p.first_seen
    end
  end
  local new = {
    state = 'p', attempt = 1, nonce = ARGV[9], fp = fp, first_seen = late or now,
    lease_until = now + tonumber(ARGV[7]), expires_at = expires_at,
  }
  if on_receipt or (late and policy == 'reject') then
    new.state = 'd'
    new.lease_until = nil
  end
  local answer, gap = {'claimed', 1, -1, expires_at, -1}, nil
  if not late then
    write(n, now, 'claimed', on_receipt, 1, nil, fp, new)
  else
    gap = now - late
    if policy == 'reject' then
      write(n, now, 'late_duplicate', true, nil, gap, fp, new)
      answer = {'late_rejected', late, gap, expires_at, late}
    else
      write(n, now, 'late_duplicate', on_receipt, 1, gap, fp, new)
      answer = {'late_claimed', 1, gap, expires_at, late}
    end
  end
  -- The history outlives the record by the retention, counted from now.
  local keep = now + tonumber(ARGV[1])
  if expires_at > keep then
    keep = expires_at
  end
  redis.call('PEXPIREAT', KEYS[1], ms(keep))
  return answer
end

local gap = now - rec.first_seen
if fp ~= '' and rec.fp ~= '' and fp ~= rec.fp then
  write(n, now, 'conflict', false, rec.attempt, gap, fp, nil)
  return {'conflict', rec.first_seen, gap, rec.expires_at, -1}
end
if rec.state == 'p' and rec.lease_until and rec.lease_until > now then
  write(n, now, 'in_flight', false, rec.attempt, gap, fp, nil)
  return {'in_flight', rec.lease_until - now, gap, rec.expires_at, -1}
end
if rec.state == 'p' then
  -- The holder's lease lapsed: take the claim over, keeping first receipt and expiry.
  rec.attempt = rec.attempt + 1
  rec.nonce = ARGV[9]
  rec.lease_until = now + tonumber(ARGV[7])
  if rec.fp == '' then
    rec.fp = fp
  end
  write(n, now, 'reclaimed', false, rec.attempt, gap, fp, rec)
  return {'reclaimed', rec.attempt, gap, rec.expires_at, -1}
end
write(n, now, 'duplicate', false, rec.attempt, gap, fp, nil)
return {'duplicate', rec.first_seen, gap, rec.expires_at, -1}
