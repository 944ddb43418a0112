-- BLOCK_HOST (after prelude.lua). ARGV[5] host, [6] until.
local host, untilt = ARGV[5], tonumber(ARGV[6])
local inf, ra = state_of(host)
if untilt > ra then set_state(host, inf, untilt) end
schedule(host)
-- for stats (hosts.lua) only: which hosts are held by a back-off, not just their delay; past ones pruned
redis.call('ZADD', P..':blocked', 'GT', untilt, host)
redis.call('ZREMRANGEBYSCORE', P..':blocked', '-inf', NOW)
return 1
