-- Shared by every idemgate script (prepended to each by the Rust side).
--
-- A record is one string value, kept under KEYS[1] with PXAT = its expires_at:
--   state|attempt|nonce|fingerprint|first_seen|lease_until|expires_at
-- state is "p" (processing) or "d" (done); nonce is 16 hex digits; fingerprint is 64 hex digits
-- or empty; times are milliseconds since the Unix epoch by this server's clock; lease_until is
-- empty once done.
--
-- A history row is one list element under KEYS[2]:
--   outcome|processed|attempt|at|gap|fingerprint
-- processed is 1 when, as of the row, the event counts as processed (a completion, a claim in
-- mark-on-receipt mode, a rejected late duplicate), else 0; attempt, gap and fingerprint may be
-- empty.

local function server_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function ms(n)
  return string.format('%d', n)
end

local function parse(value)
  if not value then
    return nil
  end
  local state, attempt, nonce, fp, first_seen, lease_until, expires_at =
    string.match(value, '^([pd])|(%d+)|(%x+)|(%x*)|(%d+)|(%d*)|(%d+)$')
  if not state then
    return redis.error_reply('idemgate: unreadable record under ' .. KEYS[1])
  end
  return {
    state = state,
    attempt = tonumber(attempt),
    nonce = nonce,
    fp = fp,
    first_seen = tonumber(first_seen),
    lease_until = tonumber(lease_until),
    expires_at = tonumber(expires_at),
  }
end

-- The live record under KEYS[1]: nil when absent or expired by `now` (Redis may keep a key until
-- the millisecond after its PXAT; a record at its expires_at already counts as absent).
local function live(now)
  local rec = parse(redis.call('GET', KEYS[1]))
  if rec and rec.err then
    return rec
  end
  if rec and now < rec.expires_at then
    return rec
  end
  return nil
end

local function encode(rec)
  local lease = ''
  if rec.lease_until then
    lease = ms(rec.lease_until)
  end
  return rec.state .. '|' .. rec.attempt .. '|' .. rec.nonce .. '|' .. rec.fp .. '|' ..
    ms(rec.first_seen) .. '|' .. lease .. '|' .. ms(rec.expires_at)
end

-- Appends one history row and keeps the per-event history capped. A row that creates a record
-- passes its expires_at: the history then lives for max(history retention, the record's life).
-- Other rows need a live record, whose history already outlives it, so they leave the expiry be
-- (one command fewer on the duplicate path).
-- ARGV[1] = history retention (ms), ARGV[2] = most rows kept per event.
local function history(now, outcome, processed, attempt, gap, fp, expires_at)
  local a = ''
  if attempt then
    a = attempt
  end
  local g = ''
  if gap then
    g = ms(gap)
  end
  local p = '0'
  if processed then
    p = '1'
  end
  local row = outcome .. '|' .. p .. '|' .. a .. '|' .. ms(now) .. '|' .. g .. '|' .. fp
  local n = redis.call('RPUSH', KEYS[2], row)
  local cap = tonumber(ARGV[2])
  if n > cap then
    redis.call('LTRIM', KEYS[2], -cap, -1)
  end
  -- n == 1: the list was just made (its history evicted or deleted): give it an expiry too.
  if expires_at or n == 1 then
    local keep = now + tonumber(ARGV[1])
    if expires_at and expires_at > keep then
      keep = expires_at
    end
    redis.call('PEXPIREAT', KEYS[2], ms(keep))
  end
end

-- What history says of an event whose record is absent (idemgate_core::Prior): its first receipt
-- (the oldest row kept) and whether it counts as processed (the last row that is processed or
-- released is processed). nil without history.
local function prior()
  local rows = redis.call('LRANGE', KEYS[2], 0, -1)
  if #rows == 0 then
    return nil
  end
  local first_seen = tonumber(string.match(rows[1], '^[%a_]+|[01]|%d*|(%d+)|'))
  local processed = false
  for i = #rows, 1, -1 do
    local outcome, p = string.match(rows[i], '^([%a_]+)|([01])|')
    if p == '1' then
      processed = true
      break
    end
    if outcome == 'released' then
      break
    end
  end
  return {first_seen = first_seen, processed = processed}
end
