-- complete / release: only the token that holds the live record may finish it.
-- KEYS and ARGV[1..4]: see common.lua; KEYS[2] = the event's result key. ARGV[5] = "complete" or
-- "release", ARGV[6] = the token's attempt, ARGV[7] = the token's nonce (16 hex digits),
-- ARGV[8] = the result a completion keeps: "" (none), "s" (stored: ARGV[9] its bytes) or "w"
-- (withheld: ARGV[9] its size), written with the completion (see common.lua).
-- Returns {'completed', stream_failed} or {'released', stream_failed} (stream_failed is 1 when the
-- source stream could not take the row, else 0), {'already_done'} when there was nothing to do
-- (completing a done record), {'completed_claim'} when a release names a record its token
-- completed (refused: nothing written), {'stale'} when the token does not hold the live record.
-- (Decoded by src/reply.rs.)
local function finish(KEYS, ARGV)
  local now = server_now()
  local rec, ev = load(KEYS, now)
  if rec and rec.err then
    return rec
  end
  if not rec or rec.attempt ~= tonumber(ARGV[6]) or rec.nonce ~= ARGV[7] then
    return {'stale'}
  end
  if ARGV[5] == 'release' then
    if rec.state == 'c' then
      return {'completed_claim'}
    end
    redis.call('HDEL', KEYS[1], 'r', 'o')
    local failed = write(KEYS, ARGV, ev, ms(now), 'released', false, ms(rec.attempt), '', rec.fp)
    return {'released', flag(failed)}
  end
  if rec.state ~= 'p' then
    return {'already_done'}
  end
  rec.state = 'c'
  rec.lease_until = nil
  if ARGV[8] ~= '' then
    redis.call('SET', KEYS[2], rec.nonce .. ARGV[8] .. ARGV[9], 'PXAT', ms(rec.expires_at))
  end
  local failed = write(KEYS, ARGV, ev, ms(now), 'completed', true, ms(rec.attempt), '', rec.fp,
    encode_rec(ev, rec), '')
  return {'completed', flag(failed)}
end

register('finish', finish)
