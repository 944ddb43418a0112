-- LEASE (after prelude.lua). ARGV[5] limit, [6] lease timeout, [7] liveness. Returns the time the leases were made at
-- ('%.17g'), then token, member, attempt, score (its place in the queue: a sharded frontier merges the
-- leases of its shards by it) and host for each lease; members found unreadable are moved aside.
--
-- The batch is what taking the best ready head LIMIT times would give, in a few calls per host: the
-- candidates are the best LIMIT ready hosts (no other host's head can be among the LIMIT best) and, of
-- each, as many requests as its cap and delay allow; the LIMIT best candidates are taken.
local LIMIT = tonumber(ARGV[5])
-- A lease ends at its deadline (lease timeout: the bound of one page), or sooner when its holder stops
-- renewing it (RENEW, every third of the liveness bound): it expires LIVENESS after it was made or last
-- renewed. The deadline travels in the token ('@'), for RENEW.
local DEADLINE = NOW + tonumber(ARGV[6])
local EXPIRES = math.min(DEADLINE, NOW + tonumber(ARGV[7]))
local AT = '@'..fmt(DEADLINE)
refresh()
local out = {fmt(NOW)}
local top = redis.call('ZRANGE', K_READY, 0, LIMIT - 1, 'WITHSCORES')
if #top == 0 then return out end
local hosts = {}
for i = 1, #top, 2 do hosts[#hosts + 1] = top[i] end
-- no request scored after the LIMIT-th best head can be among the LIMIT best
local cutoff = math.huge
if #hosts == LIMIT then cutoff = tonumber(top[#top]) end
local states = hmget(K_H, hosts)
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
    stale[#stale + 1] = host  -- not fetchable now after all: placed again below
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
local taken = {}
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
end
local serial = redis.call('INCR', P..':lseq')
local ready_add, ready_rem, states_set, leases, lexp, ids, picked = {}, {}, {}, {}, {}, {}, {}
local batches, n_taken = {}, 0
for i, host in ipairs(hosts) do
  local k = taken[i]
  if k then
    local items = fetched[i]
    if not RB[i] then redis.call('ZREMRANGEBYRANK', qkey(host), 0, k - 1) end
    n_taken = n_taken + k
    local good = 0
    for r = 1, k do
      local member = items[2 * r - 1]
      local prio = -math.floor(tonumber(items[2 * r]) / SHIFT)
      local id, b = string.match(member, '^(%d+)\t(%d+)\t')
      if RB[i] then  -- the robots request is out: the host stays pending until it is settled
        if id then redis.call('HSET', K_RB, host, 'out\t'..id) else redis.call('HDEL', K_RB, host) end
      end
      if id then
        batches[b] = (batches[b] or 0) + 1
        good = good + 1
        local token = id..':'..serial..'.'..(#picked + 1)..AT
        leases[#leases + 1] = id
        leases[#leases + 1] = token..'\t'..prio..'\t'..host..'\t'..member
        lexp[#lexp + 1] = EXPIRES
        lexp[#lexp + 1] = id
        ids[#ids + 1] = id
        picked[#picked + 1] = {token, member, items[2 * r], host}
      else
        bury(string.match(member, '^(%d+)') or redis.call('INCR', K_SEQ), 'unreadable entry header', member)
      end
    end
    local inf, ra = INF[i] + good, RA[i]
    local d = delay_of(host)
    if d > 0 and good > 0 then ra = NOW + d end
    if inf > 0 or ra > NOW then
      states_set[#states_set + 1] = host
      states_set[#states_set + 1] = state_str(inf, ra)
    end
    local has_next = #items / 2 > k
    if not has_next or inf >= cap_of(host) then
      ready_rem[#ready_rem + 1] = host
    elseif ra > NOW then
      ready_rem[#ready_rem + 1] = host
      redis.call('ZADD', K_TIMERS, ra, host)
    else
      ready_add[#ready_add + 1] = items[2 * k + 2]
      ready_add[#ready_add + 1] = host
    end
  end
end
for _, host in ipairs(stale) do schedule(host) end
if #ready_rem > 0 then bulk('ZREM', K_READY, ready_rem) end
if #ready_add > 0 then bulk('ZADD', K_READY, ready_add) end
if #states_set > 0 then bulk('HSET', K_H, states_set) end
if n_taken > 0 then
  redis.call('HINCRBY', K_C, 'queued', -n_taken)
end
batches_done(batches)
if #leases > 0 then
  bulk('HSET', K_LEASE, leases)
  bulk('ZADD', K_LEXP, lexp)
  local atts = nil
  if redis.call('EXISTS', K_ATT) == 1 then atts = hmget(K_ATT, ids) end
  for i, p in ipairs(picked) do
    out[#out + 1] = p[1]
    out[#out + 1] = p[2]
    local att = 1
    if atts and atts[i] then att = tonumber(atts[i]) + 1 end
    out[#out + 1] = att
    out[#out + 1] = p[3]
    out[#out + 1] = p[4]
  end
end
return out
