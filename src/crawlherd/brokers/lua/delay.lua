-- KEYS: zset, hash ; ARGV: uid, delay_ms, k, b, h, n (now_ms.lua first)
redis.call('HSET', KEYS[2], ARGV[1] .. ':k', ARGV[3], ARGV[1] .. ':b', ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], ARGV[1] .. ':h', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[2], ARGV[1] .. ':n', ARGV[6]) end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
