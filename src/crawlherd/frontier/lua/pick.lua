-- PICK (after prelude.lua; the start of TOP and LEASE). ARGV[5] limit, [6] a cutoff score ('' none: no
-- request scored after it is wanted). Brings the shard up to date (expired leases, due requests and
-- hosts), then picks the LIMIT best requests that may be handed out now:
-- what taking the best ready head LIMIT times would give, in a few calls per host. The candidates are the
-- best LIMIT ready hosts (no other host's head can be among the LIMIT best) and, of each, as many requests
-- as its cap and delay allow; the LIMIT best candidates are picked. Leaves: hosts (the candidate hosts),
-- fetched[i] (host i's requests read, member and score), taken[i] (how many of host i's are picked),
-- chosen (the picked scores, best first), INF/RA (host i's leases out and ready time), RB (robots states)
-- and stale (hosts found with nothing to hand out now).
local LIMIT = tonumber(ARGV[5])
local CUT = tonumber(ARGV[6])
refresh()
local top
if CUT then
  top = redis.call('ZRANGE', K_READY, '-inf', ARGV[6], 'BYSCORE', 'LIMIT', 0, LIMIT, 'WITHSCORES')
else
  top = redis.call('ZRANGE', K_READY, 0, LIMIT - 1, 'WITHSCORES')
end
local hosts = {}
for i = 1, #top, 2 do hosts[#hosts + 1] = top[i] end
-- no request scored after the LIMIT-th best head can be among the LIMIT best
local cutoff = CUT or math.huge
if #hosts == LIMIT and tonumber(top[#top]) < cutoff then cutoff = tonumber(top[#top]) end
local states = {}
if #hosts > 0 then states = hmget(K_H, hosts) end
local RB = robots_states(hosts)
local heads, extras, fetched, INF, RA = {}, {}, {}, {}, {}
local stale = {}
for i, host in ipairs(hosts) do
  local inf, ra = unpack_state(states[i])
  INF[i], RA[i] = inf, ra
  local room = cap_of(host) - inf
  if delay_of(host) > 0 and room > 1 then room = 1 end
  if room > LIMIT then room = LIMIT end
  local items = {}
  if RB[i] then
    -- robots-pending: its robots request alone (while it is leased, nothing)
    local score, member = string.match(RB[i], '^q\t([^\t]+)\t(.*)$')
    if score and room > 0 and ra <= NOW then items = {member, score} end
    if room > 1 then room = 1 end
  elseif room > 0 and ra <= NOW then
    -- usually only the head is taken: read two (and the one after, the next head), more when they may be
    local n = math.min(room, 2)
    items = redis.call('ZRANGE', qkey(host), 0, n, 'WITHSCORES')
    if room > n and #items == 2 * n + 2 and tonumber(items[#items]) <= cutoff then
      items = redis.call('ZRANGE', qkey(host), 0, room, 'WITHSCORES')
    end
  end
  fetched[i] = items
  if #items == 0 then
    stale[#stale + 1] = host  -- not fetchable now after all: placed again by LEASE
  else
    for r = 1, math.min(room, #items / 2) do
      local score = tonumber(items[2 * r])
      if score > cutoff then break end
      if r == 1 then heads[#heads + 1] = {score, i, r} else extras[#extras + 1] = {score, i, r} end
    end
  end
end
-- The LIMIT best candidates. The heads come in the ready set's order (by score): only the extras (later
-- requests of a host) need a sort, then the two lists are merged -- a sort of all with a Lua comparator
-- cost more than the rest of the script's Lua.
local function before(x, y) return x[1] < y[1] end
for j = 2, #heads do
  if heads[j][1] < heads[j - 1][1] then table.sort(heads, before) break end
end
if #extras > 1 then table.sort(extras, before) end
local taken, chosen = {}, {}
local a, b = 1, 1
for _ = 1, LIMIT do
  local x, y = heads[a], extras[b]
  local c
  if x and (not y or x[1] <= y[1]) then
    c, a = x, a + 1
  elseif y then
    c, b = y, b + 1
  else
    break
  end
  taken[c[2]] = c[3]  -- ranks are taken in order within a host: the count is the last rank
  chosen[#chosen + 1] = c
end
