-- HEADS (after prelude.lua and pick.lua). ARGV[5] limit. Brings the shard up to date (expired leases, due
-- requests and hosts) and returns the scores of the LIMIT best requests it would hand out now, best first
-- (its hosts' rooms and delays counted). A sharded frontier asks every shard and merges them: each shard's
-- share of the best LIMIT of all is what it LEASEs (its LEASE picks the same ones, best first).
for _, host in ipairs(stale) do schedule(host) end
local out = {}
for i, c in ipairs(chosen) do
  if c[2] == 0 then out[i] = G_SS[c[3]] else out[i] = fetched[c[2]][2 * c[3]] end
end
return out
