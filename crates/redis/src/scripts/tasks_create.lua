-- Creates a task. KEYS: t:ID, own, exp, p:P. ARGV: the id, the record (JSON), CREATED (20
-- digits), P, the expiry (ms since the epoch, or '' for none), the bound in all, the bound per
-- principal, BASE, how many expired tasks to forget at most.
-- Returns 0 (created), -1 (the id is taken), 1 (full: the bound in all), 2 (full: the bound per
-- principal), with the count that was at the bound.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {-1, 0}
end
-- An index entry whose record is gone (expired, not forgotten yet) is forgotten first.
forget(ARGV[8], ARGV[1])
local function full()
  local all = redis.call('HLEN', KEYS[2])
  if all >= tonumber(ARGV[6]) then
    return 1, all
  end
  local mine = redis.call('ZCARD', KEYS[4])
  if mine >= tonumber(ARGV[7]) then
    return 2, mine
  end
  return 0, 0
end
local why, count = full()
if why ~= 0 then
  purge(ARGV[8], now_ms(), tonumber(ARGV[9]))
  why, count = full()
end
if why ~= 0 then
  return {why, count}
end
redis.call('HSET', KEYS[1], 'v', 1, 'r', ARGV[2])
if ARGV[5] ~= '' then
  redis.call('PEXPIREAT', KEYS[1], ARGV[5])
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. '|' .. ARGV[4])
redis.call('ZADD', KEYS[4], 0, ARGV[3] .. ':' .. ARGV[1])
return {0, 0}
