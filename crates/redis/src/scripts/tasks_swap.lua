-- Replaces a task's record if it is still the version read. KEYS: t:ID. ARGV: the version read,
-- the new record (JSON). Returns 1 (replaced; its expiry kept) or 0 (changed or gone since).
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'v', tonumber(ARGV[1]) + 1, 'r', ARGV[2])
return 1
