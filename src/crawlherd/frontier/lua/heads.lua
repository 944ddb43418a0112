-- HEADS (after prelude.lua). ARGV[5] limit. Brings the shard up to date (expired leases, due requests and
-- hosts) and returns its best LIMIT ready hosts' heads, best first: each head's score, then 1 when its host
-- may give more than its head now (room for more than one lease: no delay, below its cap less one, no
-- robots.txt pending), else 0. A sharded frontier asks every shard, merges the heads: the LIMIT-th best is
-- the cutoff (nothing after it can be among the best LIMIT); only shards with a host that may give more
-- are asked for their best requests up to the cutoff (TOP).
local LIMIT = tonumber(ARGV[5])
refresh()
local top = redis.call('ZRANGE', K_READY, 0, LIMIT - 1, 'WITHSCORES')
local out = {}
if #top == 0 then return out end
local hosts = {}
for i = 1, #top, 2 do hosts[#hosts + 1] = top[i] end
local states = hmget(K_H, hosts)
local RB = robots_states(hosts)
for i, host in ipairs(hosts) do
  local more = 0
  if not RB[i] and delay_of(host) <= 0 and cap_of(host) - unpack_state(states[i]) > 1 then more = 1 end
  out[2 * i - 1] = top[2 * i]
  out[2 * i] = more
end
return out
