-- Shared by every store-mode operation: the library's first part (see src/store/script.rs).
--
-- One event is one hash under KEYS[1]:
--   r      the record: state|attempt|nonce|fingerprint|first_seen|lease_until|expires_at
--   o      who holds the record: holder_instance|holder_boot, empty or absent for nobody
--   g      the event's fingerprint: the first one its history or record stored (never changed)
--   n      history rows written so far
--   h<i>   history row i (from 1): outcome|processed|attempt|at|gap|fingerprint
--   f      when the first row was written (the event's first receipt, as history knows it)
--   p      "1" when the last row that is processed or released is processed, "0" when it is
--          released, absent before either (idemgate_core::Prior, kept whole however many rows
--          the cap drops)
-- state is "p" (processing), "d" (done: marked on receipt, or a rejected late duplicate) or "c"
-- (done by a completion, which no release may undo); nonce is 16 hex digits; times are milliseconds since
-- the Unix epoch by this server's clock; lease_until is empty once done; holder_instance is an
-- instance name ([A-Za-z0-9._-]) and holder_boot its boot (decimal), set only on a processing
-- record whose claim named a holder. processed is 1 when, as of the row, the event counts as
-- processed (a completion, a claim in mark-on-receipt mode, a rejected late duplicate), else 0;
-- attempt, gap and fingerprint may be empty. A fingerprint in r or a row is empty (none), "="
-- (the one in g) or 64 hex digits (another one, as a conflict's row has).
--
-- Every value stays within 64 bytes (with an attempt below 10), so Redis keeps the hash as a
-- listpack (hash-max-listpack-value, 64 by default) rather than a hash table: that is what makes
-- a claim cheap on the server, and small. That is why the fingerprint (64 hex digits) and the
-- holder live beside the record rather than in it, and rows name the usual fingerprint by "=".
--
-- Earlier versions wrote the fingerprint into r and rows, and the holder at the end of r
-- (...|expires_at|holder_instance|holder_boot; records older still have no holder), with no g
-- or o. Those still read as what they say; an operation that rewrites such a record writes it
-- in the layout above.
--
-- Only the last ARGV[2] rows are kept. Whenever a record is made, the hash's expiry is set to the
-- record's expires_at plus the history retention, so history outlives every record by the
-- retention and can tell a late duplicate. A record past its expires_at is absent to every
-- operation and stays only as an inert field until a claim replaces it or the hash expires.
-- Keeping the record and the history in one hash makes a first claim one read and one write.
--
-- Every operation on an event takes ARGV[1] = history retention (ms), ARGV[2] = rows kept per
-- event. When ARGV[3] is not "0" (a standalone server), each history row is also added to the
-- source's capped stream, the last of the KEYS: ARGV[3] = its approximate MAXLEN, ARGV[4] = the
-- event id. That addition is best-effort: its failure never fails the operation, only makes
-- `write` answer true.
--
-- A completed record's result (idemgate_core::StoredResult) lives beside the hash, under the
-- event's result key (KEYS[2] of finish and lookup, in the event's hash slot): the record's nonce
-- (16 hex digits), then "s" and the stored result's bytes, or "w" and the decimal size of a
-- result withheld as too large. It is written by the completion and expires at the record's
-- expires_at (PXAT), so it goes with its record rather than with the history; its nonce ties it
-- to the record it was written for, so it never reads as a later record's. Bodies stay out of the
-- hash, whose values are kept within a listpack's 64 bytes (below).
--
-- A first claim is the commonest call. Past its four commands, its cost is mostly calls into C
-- (`string.format`, `tonumber`, `unpack`, ...), each about as dear as the Lua around it: so the
-- hot paths join texts with `..` (one `string.format('%d')` per number), let arithmetic turn the
-- replies' and ARGV's numeric strings into numbers (Lua does that without a call), and build a
-- first claim's HSET without a table.

-- This server's clock, in ms. (Arithmetic reads TIME's two numeric strings.)
local function server_now()
  local t = redis.call('TIME')
  local us = t[2] % 1000
  return t[1] * 1000 + (t[2] - us) / 1000
end

local function ms(n)
  return string.format('%d', n)
end

-- The record r (of either layout) with its fingerprint and holder: `g` and `o` as read.
local function parse(KEYS, value, g, o)
  local state, attempt, nonce, fp, first_seen, lease_until, expires_at, hi, hb =
    string.match(value, '^([pdc])|(%d+)|(%x+)|([%x=]*)|(%d+)|(%d*)|(%d+)|([%w%._%-]+)|(%d+)$')
  if not state then
    state, attempt, nonce, fp, first_seen, lease_until, expires_at =
      string.match(value, '^([pdc])|(%d+)|(%x+)|([%x=]*)|(%d+)|(%d*)|(%d+)$')
    if state and o and o ~= '' then
      hi, hb = string.match(o, '^([%w%._%-]+)|(%d+)$')
    end
  end
  if fp == '=' then
    fp = g
  end
  if not state or not fp then
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
-- already counts as absent) and what the hash says beside it: `ev.n` history rows written,
-- `ev.prior` what history says of the event (idemgate_core::Prior: nil without history), `ev.r`,
-- `ev.g` and `ev.o` as stored (nil when absent). For a new event: nil, {n = 0}.
local function load(KEYS, now)
  local got = redis.call('HMGET', KEYS[1], 'r', 'n', 'f', 'p', 'g', 'o')
  -- (new_g, set by fp_ref, is in the constructor so that setting it needs no larger table.)
  local ev = {n = 0, r = got[1] or nil, g = got[5] or nil, o = got[6] or nil, new_g = false}
  local rec = nil
  if got[1] then
    rec = parse(KEYS, got[1], ev.g, ev.o)
    if rec.err then
      return rec
    end
    if now >= rec.expires_at then
      rec = nil
    elseif not ev.g and rec.fp ~= '' then
      -- A live record of the earlier layout: its fingerprint becomes the event's at the next
      -- write.
      ev.g, ev.new_g = rec.fp, true
    end
  end
  if got[2] then
    ev.n = tonumber(got[2])
  end
  if got[3] then
    ev.prior = {first_seen = tonumber(got[3]), processed = got[4] == '1'}
  end
  return rec, ev
end

-- Milliseconds from `from` to `now`, never negative (a clock stepped back reads as no time).
local function since(now, from)
  if now > from then
    return now - from
  end
  return 0
end

-- How `fp` is stored in the event's hash: empty, "=" for the event's fingerprint, or itself. The
-- first fingerprint stored becomes the event's (`ev.g`, which `write` then stores).
local function fp_ref(ev, fp)
  if fp == '' then
    return ''
  end
  if not ev.g then
    ev.g, ev.new_g = fp, true
  end
  if fp == ev.g then
    return '='
  end
  return fp
end

-- r's text from its fields' texts: `lease` empty once done, `fp` as `fp_ref` stores it.
local function encode(state, attempt, nonce, fp, first_seen, lease, expires_at)
  return state .. '|' .. attempt .. '|' .. nonce .. '|' .. fp .. '|' .. first_seen .. '|' .. lease
    .. '|' .. expires_at
end

-- r's text for a record read by `parse` (and changed since).
local function encode_rec(ev, rec)
  local lease = ''
  if rec.lease_until then
    lease = ms(rec.lease_until)
  end
  return encode(rec.state, ms(rec.attempt), rec.nonce, fp_ref(ev, rec.fp), ms(rec.first_seen),
    lease, ms(rec.expires_at))
end

-- o's text for a record's holder: empty for nobody.
local function holder(hi, hb)
  if hi and hi ~= '' then
    return hi .. '|' .. hb
  end
  return ''
end

-- Writes history row n + 1 (and, when `record` is given, r = `record` and o = `held`, o's text)
-- in one HSET, with the fields that summarise the history, drops the row that falls off the
-- cap, and adds the row to the source's stream when the call was given it. `at` (the time), `a`
-- (the attempt) and `g` (the gap) are texts, `a` and `g` empty for none. Answers true when the
-- stream refused the row.
local function write(KEYS, ARGV, ev, at, outcome, processed, a, g, fp, record, held)
  local p = '0'
  if processed then
    p = '1'
  end
  local row = outcome .. '|' .. p .. '|' .. a .. '|' .. at .. '|' .. g .. '|' .. fp_ref(ev, fp)
  local n = ev.n
  local marks = processed or outcome == 'released'
  -- o is written when there is a holder, or one to clear.
  local o = record and (held ~= '' or (ev.o and ev.o ~= ''))
  if n == 0 and record and ev.new_g and not marks then
    -- A first claim with a fingerprint in on-success mode, the commonest write: the general case
    -- below, without building a table.
    if o then
      redis.call('HSET', KEYS[1], 'n', '1', 'h1', row, 'r', record, 'f', at, 'g', ev.g, 'o', held)
    else
      redis.call('HSET', KEYS[1], 'n', '1', 'h1', row, 'r', record, 'f', at, 'g', ev.g)
    end
  else
    local i = ms(n + 1)
    -- n and the row, then (each when due) the record and its holder, when the history began,
    -- whether the event now counts as processed, and the event's fingerprint.
    local fields, k = {'n', i, 'h' .. i, row}, 4
    if record then
      fields[k + 1], fields[k + 2], k = 'r', record, k + 2
    end
    if o then
      fields[k + 1], fields[k + 2], k = 'o', held, k + 2
    end
    if n == 0 then
      fields[k + 1], fields[k + 2], k = 'f', at, k + 2
    end
    if marks then
      fields[k + 1], fields[k + 2], k = 'p', p, k + 2
    end
    if ev.new_g then
      fields[k + 1], fields[k + 2], k = 'g', ev.g, k + 2
    end
    redis.call('HSET', KEYS[1], unpack(fields, 1, k))
  end
  ev.new_g = false
  if n + 1 > ARGV[2] + 0 then
    redis.call('HDEL', KEYS[1], 'h' .. ms(n + 1 - ARGV[2]))
  end
  if ARGV[3] ~= '0' then
    local added = redis.pcall('XADD', KEYS[#KEYS], 'MAXLEN', '~', ARGV[3], '*', 'id', ARGV[4],
      'outcome', outcome, 'attempt', a, 'gap_ms', g)
    return type(added) == 'table' and added.err ~= nil
  end
  return false
end

-- The history rows kept, oldest first (rows lost to a smaller cap are skipped).
local function rows(KEYS, ARGV, n)
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

-- 1 when the stream refused a row, else 0 (the last element of the answers that write one).
local function flag(failed)
  if failed then
    return 1
  end
  return 0
end
