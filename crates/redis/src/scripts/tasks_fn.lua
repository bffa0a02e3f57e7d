-- The task store's shared functions (put before each task script). Every key of the store
-- starts with BASE (`PREFIX:{tasks}:`, one hash tag: one Redis Cluster slot for all of them):
--   BASE t:ID   hash: `v` the record's version, `r` the record (JSON); expires at created + ttl
--   BASE own    hash: ID -> `CREATED|P`, CREATED the creation time (20 digits), P the principal
--   BASE exp    sorted set: ID scored by its expiry (ms since the epoch), tasks with a ttl only
--   BASE p:P    sorted set, all scores 0: `CREATED:ID` of principal P's tasks (creation order)

-- Redis's clock, in milliseconds since the epoch.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Forgets task `id`: its record and its entries in the indexes. Returns 1, or 0 when the store
-- did not hold it.
local function forget(base, id)
  local own = redis.call('HGET', base .. 'own', id)
  redis.call('UNLINK', base .. 't:' .. id)
  redis.call('ZREM', base .. 'exp', id)
  if not own then
    return 0
  end
  local sep = string.find(own, '|', 1, true)
  local created = string.sub(own, 1, sep - 1)
  redis.call('ZREM', base .. 'p:' .. string.sub(own, sep + 1), created .. ':' .. id)
  redis.call('HDEL', base .. 'own', id)
  return 1
end

-- Forgets at most `max` tasks expired at `now`. Returns how many.
local function purge(base, now, max)
  local ids = redis.call('ZRANGEBYSCORE', base .. 'exp', '-inf', string.format('%.0f', now),
    'LIMIT', 0, max)
  local n = 0
  for _, id in ipairs(ids) do
    n = n + forget(base, id)
  end
  return n
end
