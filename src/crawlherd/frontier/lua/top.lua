-- TOP (after prelude.lua and pick.lua). ARGV[5] limit, [6] cutoff. The scores of the LIMIT best requests
-- this shard would hand out now, up to the cutoff, best first: a sharded frontier merges them with the
-- other shards' (see heads.lua) and leases from each shard as many as it has among the best LIMIT of all
-- (LEASE picks the same ones, best first).
for _, host in ipairs(stale) do schedule(host) end
local out = {}
for i, c in ipairs(chosen) do
  if c[2] == 0 then out[i] = G_SS[c[3]] else out[i] = fetched[c[2]][2 * c[3]] end
end
return out
