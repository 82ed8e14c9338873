-- lookup: the live record (or false) and the history of one event, read at one instant.
-- KEYS and ARGV[1..2]: see common.lua.
-- Returns {r or false, g or false, o or false, history rows oldest first}: r as stored, when
-- live, and g and o beside it (src/store/record.rs reads r and rows with them).
local function lookup(KEYS, ARGV)
  local now = server_now()
  local rec, ev = load(KEYS, now)
  if rec and rec.err then
    return rec
  end
  local stored = false
  if rec then
    stored = ev.r
  end
  return {stored, ev.g or false, ev.o or false, rows(KEYS, ARGV, ev.n)}
end

-- It writes nothing: as a function it says so, and so still answers when the server is out of
-- memory (a writing function is refused then, before it runs).
register('lookup', lookup, {'no-writes'})
