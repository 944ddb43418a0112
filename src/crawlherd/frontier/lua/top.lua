-- TOP (after prelude.lua). ARGV[5] limit. Brings the shard up to date (expired leases, due requests and
-- hosts) and returns the scores of its best LIMIT ready hosts' heads: a sharded frontier asks every shard
-- first, then leases from each as many as it has among the best LIMIT of all.
refresh()
local top = redis.call('ZRANGE', K_READY, 0, tonumber(ARGV[5]) - 1, 'WITHSCORES')
local out = {}
for i = 2, #top, 2 do out[#out + 1] = top[i] end
return out
