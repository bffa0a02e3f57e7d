-- Appends one event to a session's stream: the shared part of `append` and `fail_orphan`.
-- seq_key: the session's counter; ev: the stream; meta: the session's stream table; ch: the
-- session's channel; s: the stream id; data: the event; max: MAXLEN; age, idle: ms.
-- Returns the event's sequence number.
local function append_event(seq_key, ev, meta, ch, s, data, max, age, idle)
  local seq = redis.call('INCR', seq_key)
  local prev = tonumber(redis.call('HGET', meta, 'l:' .. s) or '0')
  local len = redis.call('XLEN', ev)
  if len == 0 then
    -- A new stream, or one whose events all expired: what came before is gone.
    redis.call('HSET', meta, 'b:' .. s, 0)
    if prev > 0 then
      redis.call('HSET', meta, 't:' .. s, prev)
    end
  elseif len >= max then
    -- The oldest entries that MAXLEN is about to trim: remember the last of them, and their
    -- bytes no longer count.
    local out = redis.call('XRANGE', ev, '-', '+', 'COUNT', len - max + 1)
    local freed = 0
    for _, entry in ipairs(out) do
      freed = freed + string.len(entry[2][2])
    end
    local last = string.match(out[#out][1], '^(%d+)-')
    redis.call('HSET', meta, 't:' .. s, last)
    redis.call('HINCRBY', meta, 'b:' .. s, -freed)
  end
  redis.call('XADD', ev, 'MAXLEN', '=', max, seq .. '-0', 'd', data)
  redis.call('HSET', meta, 'l:' .. s, seq)
  redis.call('HINCRBY', meta, 'b:' .. s, string.len(data))
  redis.call('PEXPIRE', ev, age)
  redis.call('PEXPIRE', meta, idle)
  redis.call('PEXPIRE', seq_key, idle)
  redis.call('PUBLISH', ch, s .. ' ' .. prev .. ' ' .. seq .. '\n' .. data)
  return seq
end
