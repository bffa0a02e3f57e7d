-- finish_stream. KEYS: meta, ch. ARGV: S.
-- A stream the store does not know is left alone. Returns 1 when the stream was known.
local s = ARGV[1]
if redis.call('HEXISTS', KEYS[1], 'o:' .. s) == 0 and redis.call('HEXISTS', KEYS[1], 'l:' .. s) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'f:' .. s, 1)
redis.call('PUBLISH', KEYS[2], 'fin ' .. s)
return 1
