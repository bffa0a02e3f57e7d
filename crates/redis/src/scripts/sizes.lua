-- sizes of one session. KEYS: meta. ARGV: the start of the session's stream keys.
-- Returns {streams, events, bytes}.
local seen = {}
local streams, events, bytes = 0, 0, 0
for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
  local kind, s = string.match(field, '^(%a):(%d+)$')
  if s and (kind == 'o' or kind == 'l') and not seen[s] then
    seen[s] = true
    streams = streams + 1
    local n = redis.call('XLEN', ARGV[1] .. s)
    events = events + n
    if n > 0 then
      bytes = bytes + tonumber(redis.call('HGET', KEYS[1], 'b:' .. s) or '0')
    end
  end
end
return {streams, events, bytes}
