-- replay. KEYS: meta, ev:S. ARGV: S, after (a sequence number).
-- Returns {0, finished, owner, seq, data, seq, data, ...} (owner -1 when none was recorded),
-- {1} when the id is unknown (session, stream, or a number not issued on this stream), {2}
-- when events after it are gone (trimmed by MAXLEN, or expired).
-- The finished flag is read with the events: when it is set, they are the stream's last.
local s = ARGV[1]
local after = tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[1], 'l:' .. s) or '0')
local owner = redis.call('HGET', KEYS[1], 'o:' .. s)
if (not owner) and last == 0 then
  return {1}
end
if after == nil or after < 1 or after > last then
  return {1}
end
local trimmed = tonumber(redis.call('HGET', KEYS[1], 't:' .. s) or '0')
if after < trimmed then
  return {2}
end
local finished = redis.call('HEXISTS', KEYS[1], 'f:' .. s)
local reply = {0, finished, tonumber(owner or '-1')}
if redis.call('EXISTS', KEYS[2]) == 0 then
  -- Expired: nothing is lost only when the client saw the last event.
  if after == last then
    return reply
  end
  return {2}
end
if after > trimmed then
  local here = redis.call('XRANGE', KEYS[2], after .. '-0', after .. '-0')
  if #here == 0 then
    return {1}
  end
end
for _, entry in ipairs(redis.call('XRANGE', KEYS[2], '(' .. after .. '-0', '+')) do
  table.insert(reply, tonumber(string.match(entry[1], '^(%d+)-')))
  table.insert(reply, entry[2][2])
end
return reply
