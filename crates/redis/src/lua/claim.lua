-- claim: the claim rules of idemgate_core::machine, in one atomic step on this server's clock.
-- KEYS and ARGV[1..4]: see common.lua. ARGV[5] = mode ("s" on success, "r" on receipt),
-- ARGV[6] = fingerprint (hex or empty), ARGV[7] = lease (ms), ARGV[8] = ttl (ms), ARGV[9] = the
-- nonce a won claim gets (16 hex digits), ARGV[10] = late duplicates ("off", "flag", "reject"),
-- ARGV[11] = the holder's instance (empty for none), ARGV[12] = its boot, ARGV[13] = the
-- late-duplicate horizon (ms): an event first received longer ago is no late duplicate.
-- Returns {answer, n, gap, expires_at, late_first_seen, stream_failed}, decoded by src/reply.rs
-- (-1 where none; stream_failed is 1 when the source stream could not take the row, else 0):
--   "claimed", "reclaimed", "late_claimed": n = the attempt;
--   "late_rejected", "duplicate", "conflict": n = the first receipt;
--   "in_flight": n = the wait in ms.
-- A first claim is four commands: TIME, HMGET, HSET, PEXPIREAT (and XADD with a source stream).
local function claim(KEYS, ARGV)
  local now = server_now()
  local fp = ARGV[6]
  local rec, ev = load(KEYS, now)
  if rec and rec.err then
    return rec
  end

  if not rec then
    local at = ms(now)
    local policy = ARGV[10]
    local expires_at = now + ARGV[8]
    local expires = ms(expires_at)
    local late = nil
    if policy ~= 'off' and ev.prior and ev.prior.processed
       and since(now, ev.prior.first_seen) <= tonumber(ARGV[13]) then
      late = ev.prior.first_seen
    end
    local on_receipt = ARGV[5] == 'r'
    local held = ''
    if not on_receipt and not (late and policy == 'reject') then
      held = holder(ARGV[11], ARGV[12])
    end
    local ref = fp_ref(ev, fp)
    local answer, first, gap, failed
    if not late then
      local record
      if on_receipt then
        record = encode('d', '1', ARGV[9], ref, at, '', expires)
      else
        record = encode('p', '1', ARGV[9], ref, at, ms(now + ARGV[7]), expires)
      end
      failed = write(KEYS, ARGV, ev, at, 'claimed', on_receipt, '1', '', fp, record, held)
      answer, first, gap, late = 'claimed', 1, -1, -1
    else
      gap = since(now, late)
      if policy == 'reject' then
        local record = encode('d', '1', ARGV[9], ref, ms(late), '', expires)
        failed = write(KEYS, ARGV, ev, at, 'late_duplicate', true, '', ms(gap), fp, record, held)
        answer, first = 'late_rejected', late
      else
        local lease = ''
        if not on_receipt then
          lease = ms(now + ARGV[7])
        end
        local record = encode(on_receipt and 'd' or 'p', '1', ARGV[9], ref, ms(late), lease, expires)
        failed = write(KEYS, ARGV, ev, at, 'late_duplicate', on_receipt, '1', ms(gap), fp, record,
          held)
        answer, first = 'late_claimed', 1
      end
    end
    -- History outlives the record by the retention, so a late duplicate can still be told.
    -- (PEXPIREAT, not PEXPIRE with ttl + retention: the server rewrites a relative expiry into an
    -- absolute one, which costs more than formatting it here.)
    redis.call('PEXPIREAT', KEYS[1], ms(expires_at + ARGV[1]))
    return {answer, first, gap, expires_at, late, flag(failed)}
  end

  local at = ms(now)
  local gap = since(now, rec.first_seen)
  local a, g = ms(rec.attempt), ms(gap)
  if fp ~= '' and rec.fp ~= '' and fp ~= rec.fp then
    local failed = write(KEYS, ARGV, ev, at, 'conflict', false, a, g, fp)
    return {'conflict', rec.first_seen, gap, rec.expires_at, -1, flag(failed)}
  end
  if rec.state == 'p' and rec.lease_until and rec.lease_until > now then
    local failed = write(KEYS, ARGV, ev, at, 'in_flight', false, a, g, fp)
    return {'in_flight', rec.lease_until - now, gap, rec.expires_at, -1, flag(failed)}
  end
  if rec.state == 'p' then
    -- The holder's lease lapsed: take the claim over, keeping first receipt and expiry.
    rec.attempt = rec.attempt + 1
    rec.nonce = ARGV[9]
    rec.lease_until = now + ARGV[7]
    if rec.fp == '' then
      rec.fp = fp
    end
    local failed = write(KEYS, ARGV, ev, at, 'reclaimed', false, ms(rec.attempt), g, fp,
      encode_rec(ev, rec), holder(ARGV[11], ARGV[12]))
    return {'reclaimed', rec.attempt, gap, rec.expires_at, -1, flag(failed)}
  end
  local failed = write(KEYS, ARGV, ev, at, 'duplicate', false, a, g, fp)
  return {'duplicate', rec.first_seen, gap, rec.expires_at, -1, flag(failed)}
end

register('claim', claim)
