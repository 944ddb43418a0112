-- HEADS (after prelude.lua and pick.lua). ARGV[5] limit. Brings the shard up to date (expired leases, due
-- requests and hosts) and returns the scores of the LIMIT best requests it would hand out now, best first
-- (its hosts' rooms and delays counted). A sharded frontier asks every shard and merges them: each shard's
-- share of the best LIMIT of all is what it LEASEs (its LEASE picks the same ones, best first).
for _, host in ipairs(stale) do schedule(host) end
local out = {}
for k = 1, NC do
  local i, r = CI[k], CR[k]
  if i == 0 then out[k] = (gq_parts(r)) else out[k] = fetched[i][2 * r] end
end
return out
