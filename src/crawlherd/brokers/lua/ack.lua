-- KEYS: stream ; ARGV: group, id -> 1, or 0 when the entry was settled already
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
