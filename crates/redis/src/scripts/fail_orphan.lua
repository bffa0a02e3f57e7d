-- fail_orphan. KEYS: seq, ev:S, meta, ch. ARGV: S, owner, max, age, idle, then one error
-- response per pending request.
-- Only when the stream is not finished and is still the owner's (a compare-and-set: of all
-- the followers that find the owner gone, one completes the stream). Appends the errors, then
-- finishes the stream. Returns how many errors were appended, or -1 when it did nothing.
local s = ARGV[1]
if redis.call('HEXISTS', KEYS[3], 'f:' .. s) == 1 then
  return -1
end
if redis.call('HGET', KEYS[3], 'o:' .. s) ~= ARGV[2] then
  return -1
end
local max = tonumber(ARGV[3])
for i = 6, #ARGV do
  append_event(KEYS[1], KEYS[2], KEYS[3], KEYS[4], s, ARGV[i], max, ARGV[4], ARGV[5])
end
redis.call('HSET', KEYS[3], 'f:' .. s, 1)
redis.call('PUBLISH', KEYS[4], 'fin ' .. s)
return #ARGV - 5
