-- remove_stream. KEYS: meta, ev:S. ARGV: S.
local s = ARGV[1]
redis.call('HDEL', KEYS[1], 'o:' .. s, 'p:' .. s, 'f:' .. s, 'l:' .. s, 't:' .. s, 'b:' .. s)
if redis.call('HGET', KEYS[1], 'sa') == s then
  redis.call('HDEL', KEYS[1], 'sa')
end
return redis.call('UNLINK', KEYS[2])
