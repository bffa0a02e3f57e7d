-- append. KEYS: seq, ev:S, meta, ch. ARGV: S, data, max, age, idle.
return append_event(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2],
  tonumber(ARGV[3]), ARGV[4], ARGV[5])
