-- claim: the claim rules of idemgate_core::machine, in one atomic step on this server's clock.
-- KEYS and ARGV[1..4]: see common.lua. ARGV[5] = mode ("s" on success, "r" on receipt),
-- ARGV[6] = fingerprint (hex or empty), ARGV[7] = lease (ms), ARGV[8] = ttl (ms), ARGV[9] = the
-- nonce a won claim gets (16 hex digits), ARGV[10] = late duplicates ("off", "flag", "reject"),
-- ARGV[11] = the holder's instance (empty for none), ARGV[12] = its boot.
-- Returns {answer, n, gap, expires_at, late_first_seen, stream_failed}, decoded by src/reply.rs
-- (-1 where none; stream_failed is 1 when the source stream could not take the row, else 0):
--   "claimed", "reclaimed", "late_claimed": n = the attempt;
--   "late_rejected", "duplicate", "conflict": n = the first receipt;
--   "in_flight": n = the wait in ms.
local now = server_now()
local fp = ARGV[6]
local rec, n, prior = load(now)
if rec and rec.err then
  return rec
end

local function answer(a, first, gap, expires_at, late)
  local failed = 0
  if stream_failed then
    failed = 1
  end
  return {a, first, gap or -1, expires_at, late or -1, failed}
end

if not rec then
  local on_receipt = ARGV[5] == 'r'
  local policy = ARGV[10]
  local expires_at = now + tonumber(ARGV[8])
  local late = nil
  if policy ~= 'off' and prior and prior.processed then
    late = prior.first_seen
  end
  local new = {
    state = 'p', attempt = 1, nonce = ARGV[9], fp = fp, first_seen = late or now,
    lease_until = now + tonumber(ARGV[7]), expires_at = expires_at,
  }
  if on_receipt or (late and policy == 'reject') then
    new.state = 'd'
    new.lease_until = nil
  else
    hold(new, ARGV[11], ARGV[12])
  end
  local result
  if not late then
    write(n, now, 'claimed', on_receipt, 1, nil, fp, new)
    result = {'claimed', 1, nil, expires_at, nil}
  else
    local gap = since(now, late)
    if policy == 'reject' then
      write(n, now, 'late_duplicate', true, nil, gap, fp, new)
      result = {'late_rejected', late, gap, expires_at, late}
    else
      write(n, now, 'late_duplicate', on_receipt, 1, gap, fp, new)
      result = {'late_claimed', 1, gap, expires_at, late}
    end
  end
  -- History outlives the record by the retention, so a late duplicate can still be told.
  redis.call('PEXPIREAT', KEYS[1], ms(expires_at + tonumber(ARGV[1])))
  return answer(result[1], result[2], result[3], result[4], result[5])
end

local gap = since(now, rec.first_seen)
if fp ~= '' and rec.fp ~= '' and fp ~= rec.fp then
  write(n, now, 'conflict', false, rec.attempt, gap, fp, nil)
  return answer('conflict', rec.first_seen, gap, rec.expires_at, nil)
end
if rec.state == 'p' and rec.lease_until and rec.lease_until > now then
  write(n, now, 'in_flight', false, rec.attempt, gap, fp, nil)
  return answer('in_flight', rec.lease_until - now, gap, rec.expires_at, nil)
end
if rec.state == 'p' then
  -- The holder's lease lapsed: take the claim over, keeping first receipt and expiry.
  rec.attempt = rec.attempt + 1
  rec.nonce = ARGV[9]
  rec.lease_until = now + tonumber(ARGV[7])
  if rec.fp == '' then
    rec.fp = fp
  end
  hold(rec, ARGV[11], ARGV[12])
  write(n, now, 'reclaimed', false, rec.attempt, gap, fp, rec)
  return answer('reclaimed', rec.attempt, gap, rec.expires_at, nil)
end
write(n, now, 'duplicate', false, rec.attempt, gap, fp, nil)
return answer('duplicate', rec.first_seen, gap, rec.expires_at, nil)
