-- HEADS (after prelude.lua and pick.lua). ARGV[5] limit. Brings the shard up to date (expired leases, due
-- requests and hosts) and returns the scores of the LIMIT best requests it would hand out now, best first,
-- each followed by 0 (no more to ask of this one: they are the shard's own best, its rooms and delays
-- counted). A sharded frontier asks every shard and merges them: each shard's share of the best LIMIT of
-- all is what it LEASEs (its LEASE picks the same ones, best first). A 1 after a score would ask for the
-- shard's TOP up to the cutoff (see _shards.py); pick.lua's answer is exact, so it is never sent.
for _, host in ipairs(stale) do schedule(host) end
local out = {}
for i, c in ipairs(chosen) do
  if c[2] == 0 then out[2 * i - 1] = G_SS[c[3]] else out[2 * i - 1] = fetched[c[2]][2 * c[3]] end
  out[2 * i] = 0
end
return out
