-- ACK (after prelude.lua). ARGV[5] mode: 'ack' | 'fail'; [6] the leases, a MessagePack array: for each run
-- of leases of one LEASE call, in the order sent, the call's serial (a string), how many (an integer) and
-- their ids (strings), read from their tokens by the client (one argument for all, decoded in C; the serial
-- once a run: each string is one Lua makes). Returns the places (1-based, in the order sent) of those that
-- were not valid leases.
local MODE = ARGV[5]
-- [7] 'distinct' when the client sent each lease once: no table of the settled ids is needed to settle a
-- lease given twice once (one field a lease, rehashed as it grows)
local DISTINCT = ARGV[7] == 'distinct'
local ok, runs = pcall(cmsgpack.unpack, ARGV[6] or '')
if not ok or type(runs) ~= 'table' then return redis.error_reply('malformed ack argument') end
local sers, ids, n = {}, {}, 0
local j, nr = 1, #runs
while j <= nr do
  local ser, k = runs[j], runs[j + 1]
  if type(ser) ~= 'string' or type(k) ~= 'number' or k < 0 or k % 1 ~= 0 or j + 1 + k > nr then
    return redis.error_reply('malformed ack argument')
  end
  for x = j + 2, j + 1 + k do
    n = n + 1
    sers[n], ids[n] = ser, runs[x]
  end
  j = j + 2 + k
end
local lhosts = lease_hosts(sers, ids)
local bad, done, done_hosts, done_sers, perhost, hosts, settled = {}, {}, {}, {}, {}, {}, {}
local nd, nh, nb = 0, 0, 0
local one = sers[1]  -- the LEASE call of all of them (mostly one), else false
for i = 1, #ids do
  local id, host, ser = ids[i], lhosts[i], sers[i]
  if host and not DISTINCT then
    local mine = settled[ser]
    if not mine then
      mine = {}
      settled[ser] = mine
    end
    if mine[id] then host = false else mine[id] = true end  -- the same lease twice in one call: settled once
  end
  if host then
    nd = nd + 1
    done[nd], done_hosts[nd], done_sers[nd] = id, host, ser
    if ser ~= one then one = false end
    local k = perhost[host]
    if not k then
      k = 0
      nh = nh + 1
      hosts[nh] = host
    end
    perhost[host] = k + 1
  else
    nb = nb + 1
    bad[nb] = i
  end
end
if #done > 0 then
  if one then
    leases_ended(one, done)
  else
    local byser, calls = {}, {}
    for j = 1, nd do
      local ser = done_sers[j]
      local g = byser[ser]
      if not g then
        g = {}
        byser[ser] = g
        calls[#calls + 1] = ser
      end
      g[#g + 1] = done[j]
    end
    for k = 1, #calls do leases_ended(calls[k], byser[calls[k]]) end
  end
  local robots_done = {}  -- hosts whose robots request this was: not pending any more
  if robots_of(done_hosts[1]) ~= nil or HAS_RB then  -- (no host is robots-pending: nothing to look at)
    for j = 1, #done do
      local host = done_hosts[j]
      if robots_of(host) and robots_settled(host, done[j]) then robots_done[#robots_done + 1] = host end
    end
  end
  if redis.call('EXISTS', K_ATT) == 1 then bulk('HDEL', K_ATT, done) end
  local states = hmget(K_H, hosts)
  local gone, keep, ng, nk = {}, {}, 0, 0
  local CAP0 = uniform(K_PCAP, DEF_CAP)
  -- a state that is a small count of leases out alone (mostly): read without tonumber (strtod, ~0.5k)
  local COUNT = {['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6, ['7'] = 7, ['8'] = 8,
    ['9'] = 9, ['10'] = 10, ['11'] = 11, ['12'] = 12, ['13'] = 13, ['14'] = 14, ['15'] = 15, ['16'] = 16,
    ['17'] = 17, ['18'] = 18, ['19'] = 19, ['20'] = 20, ['21'] = 21, ['22'] = 22, ['23'] = 23, ['24'] = 24,
    ['25'] = 25, ['26'] = 26, ['27'] = 27, ['28'] = 28, ['29'] = 29, ['30'] = 30, ['31'] = 31, ['32'] = 32}
  for i = 1, nh do
    local host = hosts[i]
    local v = states[i]
    local inf, ra = COUNT[v], 0
    if not inf then
      inf = tonumber(v)
      if not inf then inf, ra = unpack_state(v) end
    end
    local now_inf = inf - perhost[host]
    if now_inf <= 0 and ra <= NOW then
      ng = ng + 1
      gone[ng] = host
    else
      keep[nk + 1] = host
      if ra == 0 then keep[nk + 2] = ISTR[now_inf] or istr(now_inf) else keep[nk + 2] = state_str(now_inf, ra) end
      nk = nk + 2
    end
    local cap = CAP0 or cap_of(host)
    if inf >= cap and now_inf < cap then place(host, head_of(host), now_inf, ra) end  -- its cap held it back
  end
  if #gone > 0 then bulk('HDEL', K_H, gone) end
  if #keep > 0 then
    keep[#keep + 1], keep[#keep + 2] = PIN_FIELD, PIN
    bulk('HSET', K_H, keep)
  end
  for _, host in ipairs(robots_done) do schedule(host) end  -- its pages may go now
  if MODE == 'ack' then redis.call('HINCRBY', K_C, 'acked', #done)
  else redis.call('HINCRBY', K_C, 'failures', #done) end
end
return bad
