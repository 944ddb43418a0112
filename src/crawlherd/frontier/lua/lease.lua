-- LEASE (after prelude.lua and pick.lua). ARGV[5] limit, [6] lease timeout, [7] liveness. Leases what
-- pick.lua picked. Returns the time the leases were made at ('%.17g'), the call's serial, the leases'
-- deadline ('%.17g'), their attempts (0: all first attempts, else a list, one a lease) and then
-- "<host>\t<score>\t<id>\t<batch>\t<body>" for each lease (as gq holds it: the score is its place in the
-- queue, by which a sharded frontier merges the leases of its shards): the client reads the id from it and
-- makes each token, "<id>:<serial>.<n>@<deadline>" (n: its place in the reply). Members found unreadable are
-- moved aside. The loose requests pick.lua passed over (their host may not give them now) go to their hosts'
-- queues, which hold them until the host may give again.
-- A lease ends at its deadline (lease timeout: the bound of one page), or sooner when its holder stops
-- renewing it (RENEW, every third of the liveness bound): it expires LIVENESS after it was made or last
-- renewed. The deadline travels in the token ('@'), for RENEW.
local DEADLINE = NOW + tonumber(ARGV[6])
local EXPIRES = math.min(DEADLINE, NOW + tonumber(ARGV[7]))
local out = {fmt(NOW), 0, fmt(DEADLINE), 0}  -- the time, the call's serial (0: no lease), the deadline, attempts
-- the loose requests read: the picked and the passed over leave gq (they are its best G_USED)
if G_USED > 0 then redis.call('ZREMRANGEBYRANK', K_GQ, 0, G_USED - 1) end
-- passed-over loose requests to their hosts' queues (after the queues' picked requests are trimmed)
local function move_passed()
  if #passed == 0 then return {} end
  local byhost, order = {}, {}
  for k = 1, #passed do
    local j = passed[k]
    local host = G_H[j]
    local q = byhost[host]
    if not q then
      q = {}
      byhost[host] = q
      order[#order + 1] = host
    end
    local score, member = gq_parts(j)
    q[#q + 1] = score
    q[#q + 1] = member
  end
  for _, host in ipairs(order) do bulk('ZADD', qkey(host), byhost[host]) end
  return order  -- placed again by the caller
end
if NC == 0 then
  for _, host in ipairs(stale) do schedule(host) end
  for _, host in ipairs(move_passed()) do schedule(host) end
  return out
end
local serial = redis.call('INCR', P..':lseq')
out[2] = serial
-- The leases, in the order picked (best first): the reply is in priority order, FIFO among equals.
-- leases: the live leases (id, host); the reply's members are the call's lines (see prelude.lua)
local leases, batches = {}, {}
local n, nl, o = 0, 0, 4
for k = 1, NC do
  local i, r = CI[k], CR[k]
  local host, hm, id, b  -- hm: "<host>\t<score>\t<member>", the lease's line and the reply's member
  if i == 0 then
    host, hm, id, b = G_H[r], G_M[r], G_ID[r], G_B[r]
  else
    local items = fetched[i]
    local member = items[2 * r - 1]
    host = hosts[i]
    id, b = match(member, '^(%d+)\t(%d+)\t')
    hm = host..'\t'..items[2 * r]..'\t'..member
    if RB[i] then  -- the robots request is out: the host stays pending until it is settled
      if id then redis.call('HSET', K_RB, host, 'out\t'..id) else redis.call('HDEL', K_RB, host) end
    end
  end
  if id then
    batches[b] = (batches[b] or 0) + 1
    n = n + 1
    leases[nl + 1], leases[nl + 2] = id, host
    nl = nl + 2
    o = o + 1
    out[o] = hm
  else
    GOT[host] = GOT[host] - 1
    local member
    if i == 0 then member = select(2, gq_parts(r)) else member = fetched[i][2 * r - 1] end
    bury(string.match(member, '^(%d+)') or redis.call('INCR', K_SEQ), 'unreadable entry header', member)
  end
end
-- the hosts' new states (leases out, the delay running) and places
local ready_add, ready_rem, states_set = {}, {}, {}
local replace = {}  -- hosts picked from gq that may now be held back: placed again once their state is set
local n_taken = NC
local ns = 0
local function new_state(host, inf, ra)
  local good = GOT[host] or 0
  inf = inf + good
  local d = DELAY0 or delay_of(host)
  if d > 0 and good > 0 then ra = NOW + d end
  if inf > 0 or ra > NOW then
    states_set[ns + 1] = host
    if ra == 0 then states_set[ns + 2] = ISTR[inf] or istr(inf) else states_set[ns + 2] = state_str(inf, ra) end
    ns = ns + 2
  end
  return inf, ra
end
for i = 1, #hosts do
  local host = hosts[i]
  local k = taken[i] or 0
  if k > 0 or GOT[host] then
    local items = fetched[i]
    if k > 0 and not RB[i] then redis.call('ZREMRANGEBYRANK', qkey(host), 0, k - 1) end
    local inf, ra = new_state(host, INF[i], RA[i])
    GOT[host] = nil
    local has_next = #items / 2 > k
    if not has_next or inf >= (CAP0 or cap_of(host)) then
      ready_rem[#ready_rem + 1] = host
    elseif ra > NOW then
      ready_rem[#ready_rem + 1] = host
      redis.call('ZADD', K_TIMERS, ra, host)
    elseif k > 0 then
      ready_add[#ready_add + 1] = items[2 * k + 2]
      ready_add[#ready_add + 1] = host
    end
  end
end
for j = 1, NGL do
  local host = GL[j]
  local good = GOT[host]  -- (nil: a ready host's, placed above)
  if good then
    local inf, ra = new_state(host, GINF[host] or 0, GRA[host] or 0)
    -- at its cap, or its delay running: out of ready if its queue has requests (mostly it has none)
    if good > 0 and (inf >= (CAP0 or cap_of(host)) or ra > NOW) then replace[#replace + 1] = host end
  end
end
if #ready_rem > 0 then bulk('ZREM', K_READY, ready_rem) end
if #ready_add > 0 then bulk('ZADD', K_READY, ready_add) end
if #states_set > 0 then
  states_set[#states_set + 1], states_set[#states_set + 2] = PIN_FIELD, PIN
  bulk('HSET', K_H, states_set)
end
for _, host in ipairs(stale) do schedule(host) end
for _, host in ipairs(move_passed()) do schedule(host) end
for _, host in ipairs(replace) do schedule(host) end
redis.call('HINCRBY', K_C, 'queued', -n_taken)
batches_done(batches)
if n > 0 then
  -- the call's leases, their lines and one expiry entry (see the key layout)
  leases[nl + 1], leases[nl + 2] = PIN_FIELD, PIN
  bulk('HSET', lease_key(serial), leases)
  for i = 5, o, 4000 do redis.call('RPUSH', lease_lines(serial), unpack(out, i, math.min(i + 3999, o))) end
  redis.call('ZADD', K_LEXP, EXPIRES, serial)
  redis.call('HINCRBY', K_C, 'out', n)
  if redis.call('EXISTS', K_ATT) == 1 then
    local ids = {}
    for j = 1, n do ids[j] = leases[2 * j - 1] end
    local atts = hmget(K_ATT, ids)
    for j = 1, n do atts[j] = (tonumber(atts[j]) or 0) + 1 end
    out[4] = atts
  end
end
return out
