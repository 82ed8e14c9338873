-- abandon: what a new boot of an instance does to one event whose claim an earlier boot of it may
-- hold. KEYS and ARGV[1..4]: see common.lua. ARGV[5] = the instance, ARGV[6] = the new boot.
-- A live processing record held by that instance under an earlier boot, with its lease still
-- running by this server's clock, gets its lease ended now and an 'abandoned' history row; any
-- other record is left alone.
-- Returns {'abandoned', attempt, stream_failed (1 or 0)} when freed, else {'untouched'}.
-- (Decoded by src/reply.rs.)
local function abandon(KEYS, ARGV)
  local now = server_now()
  local rec, ev = load(KEYS, now)
  if rec and rec.err then
    return rec
  end
  if not rec or rec.state ~= 'p' or rec.hi ~= ARGV[5] or not rec.hb
      or tonumber(rec.hb) >= tonumber(ARGV[6])
      or not rec.lease_until or rec.lease_until <= now then
    return {'untouched'}
  end
  rec.lease_until = now
  local failed = write(KEYS, ARGV, ev, ms(now), 'abandoned', false, ms(rec.attempt), '', rec.fp,
    encode_rec(ev, rec), holder(rec.hi, rec.hb))
  return {'abandoned', rec.attempt, flag(failed)}
end

register('abandon', abandon)
