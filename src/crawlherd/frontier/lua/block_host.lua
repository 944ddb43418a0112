-- BLOCK_HOST (after prelude.lua). ARGV[5] host, [6] until.
local host, untilt = ARGV[5], tonumber(ARGV[6])
local ra = tonumber(redis.call('HGET', K_HREADY, host) or '0')
if untilt > ra then redis.call('HSET', K_HREADY, host, ARGV[6]) end
schedule(host)
return 1
