-- Forgets the tasks expired by now, at most ARGV[2]; then counts what is held. KEYS: own, exp.
-- ARGV: BASE, the most to forget. Returns {forgotten, held}.
local n = purge(ARGV[1], now_ms(), tonumber(ARGV[2]))
return {n, redis.call('HLEN', KEYS[1])}
