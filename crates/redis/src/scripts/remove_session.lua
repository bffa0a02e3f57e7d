-- remove_session. KEYS: seq, meta. ARGV: the start of the session's stream keys.
-- Unlinks the counter, the table, and every stream the table names.
local keys = {KEYS[1], KEYS[2]}
local seen = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[2])) do
  local stream = string.match(field, '^%a:(%d+)$')
  if stream and not seen[stream] then
    seen[stream] = true
    table.insert(keys, ARGV[1] .. stream)
  end
end
return redis.call('UNLINK', unpack(keys))
