-- A page of principal P's tasks, in creation order, after forgetting expired tasks. KEYS: own,
-- exp, p:P. ARGV: BASE, where to start (`-`, or `(CREATED:ID` to start after that entry), how
-- many records at most, how many expired tasks to forget at most.
-- Returns {entry, record, entry, record, ...}; entries whose record is gone are skipped.
purge(ARGV[1], now_ms(), tonumber(ARGV[4]))
local want = tonumber(ARGV[3])
local start = ARGV[2]
local out = {}
while #out < 2 * want do
  local entries = redis.call('ZRANGEBYLEX', KEYS[3], start, '+', 'LIMIT', 0, want)
  if #entries == 0 then
    break
  end
  for _, entry in ipairs(entries) do
    local id = string.sub(entry, 22)
    local record = redis.call('HGET', ARGV[1] .. 't:' .. id, 'r')
    if record and #out < 2 * want then
      table.insert(out, entry)
      table.insert(out, record)
    end
  end
  start = '(' .. entries[#entries]
end
return out
