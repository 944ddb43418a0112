-- KEYS: stream ; ARGV: group, id, consumer -> 1, or 0 when the entry was settled already or another
-- consumer holds it now (take.lua first, for held())
if not held() then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return 1
