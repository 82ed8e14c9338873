-- lookup: the live record (or false), its result and the history of one event, read at one
-- instant. KEYS and ARGV[1..2]: see common.lua; KEYS[2] = the event's result key.
-- Returns {r or false, g or false, o or false, history rows oldest first, result or false}: r as
-- stored, when live, and g and o beside it (src/store/record.rs reads r and rows with them); the
-- result key's value when the record is live and completed (its nonce says whose it is).
local function lookup(KEYS, ARGV)
  local now = server_now()
  local rec, ev = load(KEYS, now)
  if rec and rec.err then
    return rec
  end
  local stored, result = false, false
  if rec then
    stored = ev.r
    if rec.state == 'c' then
      result = redis.call('GET', KEYS[2])
    end
  end
  return {stored, ev.g or false, ev.o or false, rows(KEYS, ARGV, ev.n), result}
end

-- It writes nothing: as a function it says so, and so still answers when the server is out of
-- memory (a writing function is refused then, before it runs).
register('lookup', lookup, {'no-writes'})
