-- BLOCK_HOST (after prelude.lua). ARGV[5] host, [6] until.
local host, untilt = ARGV[5], tonumber(ARGV[6])
local inf, ra = state_of(host)
if untilt > ra then set_state(host, inf, untilt) end
-- the send gate (send.lua) holds back requests already leased too, until then
if untilt > NOW then
  local k_hold = P..':hold:'..host
  if untilt > tonumber(redis.call('GET', k_hold) or '0') then
    redis.call('SET', k_hold, fmt(untilt), 'PX', math.ceil((untilt - NOW) * 1000) + 1000)
  end
end
schedule(host)
-- for stats (hosts.lua) only: which hosts are held by a back-off, not just their delay; past ones pruned
redis.call('ZADD', P..':blocked', 'GT', untilt, host)
redis.call('ZREMRANGEBYSCORE', P..':blocked', '-inf', NOW)
return 1
