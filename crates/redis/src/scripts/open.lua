-- open_stream. KEYS: meta. ARGV: S, owner, pending ids (JSON), idle.
-- A stream already known is left as it is.
local s = ARGV[1]
if redis.call('HSETNX', KEYS[1], 'o:' .. s, ARGV[2]) == 1 then
  redis.call('HSET', KEYS[1], 'p:' .. s, ARGV[3])
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
