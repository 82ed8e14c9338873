-- Shared by every store-mode script (prepended to each by the Rust side).
--
-- One event is one hash under KEYS[1]:
--   r      the record: state|attempt|nonce|fingerprint|first_seen|lease_until|expires_at
--   n      history rows written so far
--   h<i>   history row i (from 1): outcome|processed|attempt|at|gap|fingerprint
-- state is "p" (processing) or "d" (done); nonce is 16 hex digits; fingerprint is 64 hex digits
-- or empty; times are milliseconds since the Unix epoch by this server's clock; lease_until is
-- empty once done. processed is 1 when, as of the row, the event counts as processed (a
-- completion, a claim in mark-on-receipt mode, a rejected late duplicate), else 0; attempt, gap
-- and fingerprint may be empty.
--
-- Only the last ARGV[2] rows are kept. The hash expires at max(now + history retention, the
-- record's expires_at), set whenever a record is made; a record past its expires_at is absent to
-- every script and stays only as an inert field until a claim replaces it or the hash expires.
-- Keeping the record and the history in one hash makes a first claim one read and one write.
--
-- Every script takes ARGV[1] = history retention (ms), ARGV[2] = rows kept per event. When
-- KEYS[2] is given (a standalone server), each history row is also added to the source's capped
-- stream KEYS[2]: ARGV[3] = its approximate MAXLEN, ARGV[4] = the event id.

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

-- The event's live record (nil when absent or expired by `now`: a record at its expires_at
-- already counts as absent) and how many history rows it has had.
local function load(now)
  local got = redis.call('HMGET', KEYS[1], 'r', 'n')
  local rec = parse(got[1])
  if rec and rec.err then
    return rec
  end
  if rec and now >= rec.expires_at then
    rec = nil
  end
  return rec, tonumber(got[2]) or 0
end

local function encode(rec)
  local lease = ''
  if rec.lease_until then
    lease = ms(rec.lease_until)
  end
  return rec.state .. '|' .. ms(rec.attempt) .. '|' .. rec.nonce .. '|' .. rec.fp .. '|' ..
    ms(rec.first_seen) .. '|' .. lease .. '|' .. ms(rec.expires_at)
end

-- Writes history row n + 1 (and `rec` as the record, when given) in one HSET, drops the row that
-- falls off the cap, and copies the row to the source's stream when the script was given it.
local function write(n, now, outcome, processed, attempt, gap, fp, rec)
  local i = n + 1
  local a, g, p = '', '', '0'
  if attempt then
    a = ms(attempt)
  end
  if gap then
    g = ms(gap)
  end
  if processed then
    p = '1'
  end
  local row = outcome .. '|' .. p .. '|' .. a .. '|' .. ms(now) .. '|' .. g .. '|' .. fp
  if rec then
    redis.call('HSET', KEYS[1], 'r', encode(rec), 'n', ms(i), 'h' .. ms(i), row)
  else
    redis.call('HSET', KEYS[1], 'n', ms(i), 'h' .. ms(i), row)
  end
  local cap = tonumber(ARGV[2])
  if i > cap then
    redis.call('HDEL', KEYS[1], 'h' .. ms(i - cap))
  end
  if KEYS[2] then
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'id', ARGV[4], 'outcome', outcome,
      'attempt', a, 'gap_ms', g)
  end
end

-- The history rows kept, oldest first (rows lost to a smaller cap are skipped).
local function rows(n)
  if n == 0 then
    return {}
  end
  local first = n - tonumber(ARGV[2]) + 1
  if first < 1 then
    first = 1
  end
  local fields = {}
  for i = first, n do
    fields[#fields + 1] = 'h' .. ms(i)
  end
  local got = redis.call('HMGET', KEYS[1], unpack(fields))
  local out = {}
  for _, row in ipairs(got) do
    if row then
      out[#out + 1] = row
    end
  end
  return out
end

-- What history says of an event whose record is absent (idemgate_core::Prior): its first receipt
-- (the oldest row kept) and whether it counts as processed (the last row that is processed or
-- released is processed). nil without history.
local function prior(n)
  local kept = rows(n)
  if #kept == 0 then
    return nil
  end
  local first_seen = tonumber(string.match(kept[1], '^[%a_]+|[01]|%d*|(%d+)|'))
  local processed = false
  for i = #kept, 1, -1 do
    local outcome, p = string.match(kept[i], '^([%a_]+)|([01])|')
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
