-- Shared by every store-mode script (prepended to each by the Rust side).
--
-- One event is one hash under KEYS[1]:
--   r      the record: state|attempt|nonce|fingerprint|first_seen|lease_until|expires_at, then
--          |holder_instance|holder_boot while a holder holds it (records written before holders
--          existed have 7 fields, and read as held by nobody)
--   n      history rows written so far
--   h<i>   history row i (from 1): outcome|processed|attempt|at|gap|fingerprint
--   f      when the first row was written (the event's first receipt, as history knows it)
--   p      "1" when the last row that is processed or released is processed, "0" when it is
--          released, absent before either (idemgate_core::Prior, kept whole however many rows
--          the cap drops)
-- state is "p" (processing) or "d" (done); nonce is 16 hex digits; fingerprint is 64 hex digits
-- or empty; times are milliseconds since the Unix epoch by this server's clock; lease_until is
-- empty once done; holder_instance is an instance name ([A-Za-z0-9._-]) and holder_boot its boot
-- (decimal), present only on a processing record whose claim named a holder. processed is 1 when, as of the row, the event counts as processed (a
-- completion, a claim in mark-on-receipt mode, a rejected late duplicate), else 0; attempt, gap
-- and fingerprint may be empty.
--
-- Only the last ARGV[2] rows are kept. Whenever a record is made, the hash's expiry is set to the
-- record's expires_at plus the history retention, so history outlives every record by the
-- retention and can tell a late duplicate. A record past its expires_at is absent to every
-- script and stays only as an inert field until a claim replaces it or the hash expires.
-- Keeping the record and the history in one hash makes a first claim one read and one write.
--
-- Every script takes ARGV[1] = history retention (ms), ARGV[2] = rows kept per event. When
-- KEYS[2] is given (a standalone server), each history row is also added to the source's capped
-- stream KEYS[2]: ARGV[3] = its approximate MAXLEN, ARGV[4] = the event id. That addition is
-- best-effort: its failure never fails the script, only sets stream_failed.

local stream_failed = false

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
  local state, attempt, nonce, fp, first_seen, lease_until, expires_at, hi, hb =
    string.match(value, '^([pd])|(%d+)|(%x+)|(%x*)|(%d+)|(%d*)|(%d+)|([%w%._%-]+)|(%d+)$')
  if not state then
    state, attempt, nonce, fp, first_seen, lease_until, expires_at =
      string.match(value, '^([pd])|(%d+)|(%x+)|(%x*)|(%d+)|(%d*)|(%d+)$')
  end
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
    hi = hi,
    hb = hb,
  }
end

-- The event's live record (nil when absent or expired by `now`: a record at its expires_at
-- already counts as absent), how many history rows it has had, and what its history says of it
-- (idemgate_core::Prior: nil without history).
local function load(now)
  local got = redis.call('HMGET', KEYS[1], 'r', 'n', 'f', 'p')
  local rec = parse(got[1])
  if rec and rec.err then
    return rec
  end
  if rec and now >= rec.expires_at then
    rec = nil
  end
  local prior = nil
  if got[3] then
    prior = {first_seen = tonumber(got[3]), processed = got[4] == '1'}
  end
  return rec, tonumber(got[2]) or 0, prior
end

-- Milliseconds from `from` to `now`, never negative (a clock stepped back reads as no time).
local function since(now, from)
  if now > from then
    return now - from
  end
  return 0
end

local function encode(rec)
  local lease = ''
  if rec.lease_until then
    lease = ms(rec.lease_until)
  end
  local holder = ''
  if rec.hi then
    holder = '|' .. rec.hi .. '|' .. rec.hb
  end
  return rec.state .. '|' .. ms(rec.attempt) .. '|' .. rec.nonce .. '|' .. rec.fp .. '|' ..
    ms(rec.first_seen) .. '|' .. lease .. '|' .. ms(rec.expires_at) .. holder
end

-- Sets who holds rec: instance and boot, or nobody when instance is empty.
local function hold(rec, instance, boot)
  if instance and instance ~= '' then
    rec.hi = instance
    rec.hb = boot
  else
    rec.hi = nil
    rec.hb = nil
  end
end

-- Writes history row n + 1 (and `rec` as the record, when given) in one HSET, with the fields
-- that summarise the history, drops the row that falls off the cap, and adds the row to the
-- source's stream when the script was given it.
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
  local fields = {'n', ms(i), 'h' .. ms(i), row}
  if rec then
    fields[#fields + 1] = 'r'
    fields[#fields + 1] = encode(rec)
  end
  if n == 0 then
    fields[#fields + 1] = 'f'
    fields[#fields + 1] = ms(now)
  end
  if processed or outcome == 'released' then
    fields[#fields + 1] = 'p'
    fields[#fields + 1] = p
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  local cap = tonumber(ARGV[2])
  if i > cap then
    redis.call('HDEL', KEYS[1], 'h' .. ms(i - cap))
  end
  if KEYS[2] then
    local added = redis.pcall('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'id', ARGV[4],
      'outcome', outcome, 'attempt', a, 'gap_ms', g)
    if type(added) == 'table' and added.err then
      stream_failed = true
    end
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
