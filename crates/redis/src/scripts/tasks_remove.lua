-- Forgets one task. KEYS: t:ID, own, exp. ARGV: BASE, the id. Returns 1 or 0 (there was none).
return forget(ARGV[1], ARGV[2])
