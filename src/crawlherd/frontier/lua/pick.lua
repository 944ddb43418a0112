-- PICK (after prelude.lua; the start of HEADS and LEASE). ARGV[5] limit. Brings the shard up to date
-- (expired leases, due requests and hosts), then picks the LIMIT best requests that may be handed out now:
-- what taking the best request whose host may give it now (room under its cap, no delay running, no
-- robots.txt pending) LIMIT times would give. Two sources, merged in score order:
--   - gq, the loose requests (see prelude.lua), read in slices of LIMIT from its best: a request whose host
--     may not give it now is passed over (LEASE moves it to its host's queue: it is not read again);
--   - the best LIMIT ready hosts' queues: of each, as many requests as its cap and delay allow. Each of
--     these hosts gives at least one request no later than its head (its head, or loose requests of its
--     own that came before it and took its room), so nothing scored after the LIMIT-th best head (the
--     cutoff) can be among the LIMIT best, from either source.
-- Leaves: hosts (the ready hosts read), fetched[i] (host i's requests read, member and score), taken[i]
-- (how many of host i's queue are picked), G_M/G_H/G_ID/G_B (gq's members, read without their scores, and
-- their hosts, ids and batches; G_ID false: the member is unreadable), gq_score(j) and gq_parts(j) (its
-- score as a number, read from the member when it is needed: mostly it is not; its score as written and
-- its member as a host's queue holds it), G_USED (how many of them were passed: picked or passed over),
-- passed (the gq indexes passed over), CI/CR (the picked, best first, NC of them: i, rank from a queue, 0, j
-- from gq), GOT (host -> picked; GL its hosts in the order first picked, NGL of them), LEFT (host -> room
-- left), INF/RA (ready host i's leases out and ready time), GINF/GRA (the same of a host read from gq only;
-- nil: 0), RB (robots states) and stale (ready hosts with nothing to hand out).
local LIMIT = tonumber(ARGV[5])
local match = string.match
refresh()
local top = redis.call('ZRANGE', K_READY, 0, LIMIT - 1, 'WITHSCORES')
local hosts = {}
for i = 1, #top, 2 do hosts[#hosts + 1] = top[i] end
-- no request scored after the LIMIT-th best head can be among the LIMIT best
local cutoff = math.huge
if #hosts == LIMIT then cutoff = tonumber(top[#top]) end
local states = {}
if #hosts > 0 then states = hmget(K_H, hosts) end
local RB = robots_states(hosts)
local CAP0, DELAY0 = uniform(K_PCAP, DEF_CAP), uniform(K_PDELAY, DEF_DELAY)
local heads, extras, fetched, INF, RA = {}, {}, {}, {}, {}
-- host -> room left in this pick; host -> true when it may not give loose requests now (mostly none: no
-- table filled a host at a time)
local LEFT, GNO = {}, {}
local stale = {}
for i = 1, #hosts do
  local host = hosts[i]
  local inf, ra = unpack_state(states[i])
  INF[i], RA[i] = inf, ra
  local room = (CAP0 or cap_of(host)) - inf
  if (DELAY0 or delay_of(host)) > 0 and room > 1 then room = 1 end
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
  LEFT[host] = room
  if RB[i] or ra > NOW then GNO[host] = true end
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
-- The loose requests, a slice at a time: their hosts' rooms from their states (one HMGET a slice).
local G_M, G_H, G_ID, G_B, G_S = {}, {}, {}, {}, {}
local G_N = 0
local GINF, GRA = {}, {}  -- host read from gq only -> its leases out, its ready time
local g_read, g_more = 0, true
local function load_loose()
  local part = redis.call('ZRANGE', K_GQ, g_read, g_read + LIMIT - 1)
  local np = #part
  g_more = np == LIMIT
  local new, nn, n = {}, 0, G_N
  local gm = G_M  -- the first slice (mostly the only one) is G_M itself: not copied
  if n == 0 then
    G_M = part
    gm = nil
  end
  for j = 1, np do
    local m = part[j]
    -- "<host>\t<score>\t<id>\t<batch>\t<body>": the score skipped (see gq_score)
    local h, id, b = match(m, '^([^\t]*)\t[^\t]*\t(%d+)\t(%d+)\t')
    if not h then  -- unreadable: moved aside if it is picked
      h = match(m, '^([^\t]*)\t') or ''
      id, b = false, false
    end
    n = n + 1
    if gm then gm[n] = m end
    G_H[n], G_ID[n], G_B[n] = h, id, b
    if LEFT[h] == nil then
      LEFT[h] = false
      nn = nn + 1
      new[nn] = h
    end
  end
  G_N = n
  g_read = g_read + np
  if nn == 0 then return end
  local st, rb = hmget(K_H, new), robots_states(new)
  for k = 1, nn do
    local h = new[k]
    local inf, ra = 0, 0  -- (mostly no state: no call)
    if st[k] then inf, ra = unpack_state(st[k]) end
    if inf ~= 0 then GINF[h] = inf end
    if ra ~= 0 then GRA[h] = ra end
    local room = (CAP0 or cap_of(h)) - inf
    if room > 1 and (DELAY0 or delay_of(h)) > 0 then room = 1 end
    LEFT[h] = room
    if rb[k] or ra > NOW then GNO[h] = true end
  end
end
-- The LIMIT best candidates. The heads come in the ready set's order (by score): only the extras (later
-- requests of a host) need a sort, then the three lists are merged -- a sort of all with a Lua comparator
-- cost more than the rest of the script's Lua.
local function before(x, y) return x[1] < y[1] end
for j = 2, #heads do
  if heads[j][1] < heads[j - 1][1] then table.sort(heads, before) break end
end
if #extras > 1 then table.sort(extras, before) end
-- Where a loose request's score ends (the tab after it; nil: none), found when it is needed (mostly never).
local function score_end(j) return string.find(G_M[j], '\t', #G_H[j] + 2, true) end
-- A loose request's score, as a number (the member's, else gq's: an unreadable member).
local function gq_score(j)
  local s = G_S[j]
  if not s then
    local p2 = score_end(j)  -- (the score starts after the host's tab)
    if p2 then s = tonumber(string.sub(G_M[j], #G_H[j] + 2, p2 - 1)) end
    if not s then s = tonumber(redis.call('ZSCORE', K_GQ, G_M[j])) end
    G_S[j] = s
  end
  return s
end
-- A loose request's score as written and its member as its host's queue holds it ("<id>\t<batch>\t<body>").
local function gq_parts(j)
  local m, p2 = G_M[j], score_end(j)
  if p2 then return string.sub(m, #G_H[j] + 2, p2 - 1), string.sub(m, p2 + 1) end
  return fmt(gq_score(j)), string.sub(m, #G_H[j] + 2)
end
local HUGE = math.huge
local taken, passed, GOT = {}, {}, {}
local GL, NGL = {}, 0  -- the hosts of GOT, in the order first picked (walked without pairs: a C call a step)
local CI, CR, NC = {}, {}, 0  -- the picked (two arrays: no table a request)
-- A pick (room taken, GOT/GL/CI/CR kept) is written out in each of the three places below: as a local
-- function it cost LEASE 1.25k instructions a lease more (callgrind, the benchmark's workload).
local a, b, g = 1, 1, 1
if #heads == 0 and #extras == 0 and cutoff == HUGE then
  -- nothing from the hosts' queues (mostly, without delays): the loose requests alone, in their order
  while NC < LIMIT do
    if g > G_N then
      if g_more then load_loose() end
      if g > G_N then break end
    end
    local host = G_H[g]
    local left = LEFT[host]
    if left > 0 and not GNO[host] then
      LEFT[host] = left - 1
      local got = GOT[host]
      if not got then
        got = 0
        NGL = NGL + 1
        GL[NGL] = host
      end
      GOT[host] = got + 1
      NC = NC + 1
      CI[NC], CR[NC] = 0, g
    else
      passed[#passed + 1] = g
    end
    g = g + 1
  end
end
while NC < LIMIT do
  if g > G_N and g_more then load_loose() end
  local x, y = heads[a], extras[b]
  local c
  if x and (not y or x[1] <= y[1]) then c = x else c = y end
  -- the loose request's score is read only when it is compared (mostly nothing is queued by host)
  local take_g = false
  if g <= G_N then
    if c then take_g = gq_score(g) < c[1] else take_g = cutoff == HUGE or gq_score(g) <= cutoff end
  end
  if c and not take_g then
    if c == x then a = a + 1 else b = b + 1 end
    local i, r = c[2], c[3]
    local host = hosts[i]
    -- a host's requests are taken in rank order: once one is passed (no room left), so are the rest
    if (taken[i] or 0) == r - 1 and LEFT[host] > 0 then
      taken[i] = r
      LEFT[host] = LEFT[host] - 1
      if not GOT[host] then
        NGL = NGL + 1
        GL[NGL] = host
      end
      GOT[host] = (GOT[host] or 0) + 1
      NC = NC + 1
      CI[NC], CR[NC] = i, r
    end
  elseif take_g then
    local host = G_H[g]
    if not GNO[host] and LEFT[host] > 0 then
      LEFT[host] = LEFT[host] - 1
      if not GOT[host] then
        NGL = NGL + 1
        GL[NGL] = host
      end
      GOT[host] = (GOT[host] or 0) + 1
      NC = NC + 1
      CI[NC], CR[NC] = 0, g
    else
      passed[#passed + 1] = g
    end
    g = g + 1
  else
    break
  end
end
local G_USED = g - 1
