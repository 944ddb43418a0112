-- ENQUEUE (after prelude.lua). ARGV[5] how many may be queued in this shard at most (-1 unbounded),
-- [6] dupefilter kind, [7] "allow" when an unusable filter may be bypassed, [8] where the requests'
-- numbers come from: 'own' (this shard's P:seq: one Redis) or 'seq' (a counter the shards share, so that
-- FIFO holds across shards), taken by the client before the call; [9] how many requests, [10] the lowest
-- number among them, the batch they were numbered in (their age batch), [11] the highest; [12] the
-- requests' first five strings each, MessagePack strings one after another: one argument for all (each
-- argument costs the client more than its bytes), decoded in C by cmsgpack (a Lua pattern over each
-- request, struct.unpack or a JSON decoder cost more):
--   df_a, df_b, not_before ('-': none, else "<not_before> <priority>"), score, host
-- and [12 + j] the member of request j: an argument of its own, made a Lua string once (Redis's Lua hashes
-- each byte of each string it makes: inside [12] it was hashed twice, as the argument and unpacked).
-- the member as gq holds it ("<host>\t<score>\t<id>\t<batch>\t<body>", see prelude.lua) and its score, both
-- as stored: nothing of them is built here.
-- Exact filter: df_a = the key of the fingerprint's bucket, df_b = fingerprint >> bits. Bloom: df_a, df_b =
-- the two hash halves.
-- Returns {status, queued, processed, message, flags}: status 'ok', 'full' (stopped at processed+1) or
-- 'dferr' (the filter could not be used and the policy is fail); flags, one a request processed: '1'
-- queued, '0' a duplicate.
local MAX = tonumber(ARGV[5])
local DF = ARGV[6]
local ALLOW = ARGV[7] == 'allow'
local K_BLOOM = P..':bloom'

local function bloom_layers()
  local n = tonumber(redis.call('HGET', K_BLOOM, 'n'))
  if not n then return error('the Bloom filter configuration is missing') end
  return n
end

local function bloom_has(h1, h2)
  local n = bloom_layers()
  for i = 1, n do
    local m = tonumber(redis.call('HGET', K_BLOOM, 'm'..i))
    local k = tonumber(redis.call('HGET', K_BLOOM, 'k'..i))
    local key = K_BLOOM..':'..i
    local all = true
    for j = 0, k - 1 do
      if redis.call('GETBIT', key, (h1 + j * h2) % m) == 0 then all = false break end
    end
    if all then return true end
  end
  return false
end

local function bloom_add(h1, h2)
  if bloom_has(h1, h2) then return 0 end
  local n = bloom_layers()
  local cap = tonumber(redis.call('HGET', K_BLOOM, 'cap'..n))
  if tonumber(redis.call('HGET', K_BLOOM, 'cnt'..n)) >= cap then
    -- a new layer twice as large with half the error rate: the total stays under error_rate
    n = n + 1
    cap = cap * 2
    local err = tonumber(redis.call('HGET', K_BLOOM, 'err')) / (2 ^ n)
    local m = math.ceil(-cap * math.log(err) / (math.log(2) ^ 2))
    local k = math.floor(m / cap * math.log(2) + 0.5)
    if k < 1 then k = 1 end
    redis.call('HSET', K_BLOOM, 'n', n, 'm'..n, m, 'k'..n, k, 'cap'..n, cap, 'cnt'..n, 0)
  end
  local m = tonumber(redis.call('HGET', K_BLOOM, 'm'..n))
  local k = tonumber(redis.call('HGET', K_BLOOM, 'k'..n))
  local key = K_BLOOM..':'..n
  for j = 0, k - 1 do
    redis.call('SETBIT', key, (h1 + j * h2) % m, 1)
  end
  redis.call('HINCRBY', K_BLOOM, 'cnt'..n, 1)
  return 1
end

-- 1 new, 0 seen, or nil + message when the filter cannot be used (e.g. a foreign key in its place).
local function seen_add(a, b)
  if DF == 'exact' then
    local r = redis.pcall('SADD', a, b)
    if type(r) == 'table' and r.err then return nil, r.err end
    return r
  end
  local ok, r = pcall(bloom_add, tonumber(a), tonumber(b))
  if not ok then return nil, tostring(r) end
  return r
end

local function seen_has(a, b)
  if DF == 'exact' then
    local r = redis.pcall('SISMEMBER', a, b)
    if type(r) == 'table' and r.err then return nil, r.err end
    return r == 1
  end
  local ok, r = pcall(bloom_has, tonumber(a), tonumber(b))
  if not ok then return nil, tostring(r) end
  return r
end

local queued = tonumber(redis.call('HGET', K_C, 'queued') or '0')
local n_new, n_dup, n_dfu, processed = 0, 0, 0, 0
local status, message = 'ok', ''
local SHARED = ARGV[8] == 'seq'
local nitems = tonumber(ARGV[9])
local LOW, HIGH = tonumber(ARGV[10]), tonumber(ARGV[11])
-- the strings come one after another, not in a MessagePack array: cmsgpack returns them as values, put in
-- a table of their size at once (an array's table is grown as it is filled: rehashed a dozen times); a C
-- function returns at most 8,000 values (LUAI_MAXCSTACK): the client sends 1,000 requests at most
local ITEMS = {pcall(cmsgpack.unpack, ARGV[12] or '')}
if not (ITEMS[1] == true and nitems and LOW and HIGH and #ITEMS == 5 * nitems + 1 and #ARGV == 12 + nitems) then
  return redis.error_reply('malformed enqueue arguments')
end
local shift = 0
if SHARED and nitems > 0 then
  -- numbers this shard has used already (the shared counter lost writes in a failover): move past them,
  -- an id must stay unique in its shard
  local top = tonumber(redis.call('GET', K_SEQ) or '0')
  if LOW <= top then shift = top - LOW + 1 end
end
local batch = istr(LOW + shift)
-- A member and score moved past this shard's numbers (see shift).
local function renumbered(host, member, score)
  local id, b, body = split(string.sub(member, #host + #score + 3))
  if not id then return member, score end  -- (never: the client wrote it)
  local s = string.format('%d', tonumber(score) + shift)
  return host..'\t'..s..'\t'..istr(id + shift)..'\t'..istr(b + shift)..'\t'..body, s
end
-- where each host's requests go, decided before they are read (nothing done here changes it): gq when the
-- host could give them now and has nothing in its queue (no delay, below its cap, no robots.txt pending,
-- not ready: an eligible host with a queue is ready), else its queue. The loose ones are put in gq's ZADD
-- as they are read (no table a host, no copy).
local hosts, where, HELD = {}, {}, {}  -- HELD: host -> true when not loose (mostly none)
for k = 6, 5 * nitems + 1, 5 do
  local host = ITEMS[k]
  if not where[host] then
    hosts[#hosts + 1] = host
    where[host] = #hosts
  end
end
local states, RB, inready = {}, {}, {}
local CAP0, DELAY0 = false, false
if #hosts > 0 then
  states = hmget(K_H, hosts)
  CAP0, DELAY0 = uniform(K_PCAP, DEF_CAP), uniform(K_PDELAY, DEF_DELAY)
  RB = robots_states(hosts)
  for i = 1, #hosts, 4000 do
    local part = redis.call('ZMSCORE', K_READY, unpack(hosts, i, math.min(i + 3999, #hosts)))
    for j = 1, #part do inready[i + j - 1] = part[j] end
  end
  for i = 1, #hosts do
    local host = hosts[i]
    local inf, ra = 0, 0  -- (mostly no state: no call)
    if states[i] then inf, ra = unpack_state(states[i]) end
    if RB[i] or inready[i] or inf >= (CAP0 or cap_of(host)) or ra > NOW or (DELAY0 or delay_of(host)) > 0 then
      HELD[host] = true
    end
  end
end
local EXACT = DF == 'exact'
local flags = {}
local delayed, byhost, qhosts, loose, nl = {}, {}, {}, {}, 0
local mi = 12
local argv, rpcall = ARGV, redis.pcall  -- (globals: a table lookup each, in the loop)
for k = 2, 5 * nitems + 1, 5 do  -- (ITEMS[1]: pcall's true)
  local a, b, nb, score, host = ITEMS[k], ITEMS[k + 1], ITEMS[k + 2], ITEMS[k + 3], ITEMS[k + 4]
  mi = mi + 1
  local member = argv[mi]
  local go, flag = true, '0'
  if MAX >= 0 and queued >= MAX then
    local seen, err = seen_has(a, b)
    if seen == nil and not ALLOW then status, message = 'dferr', err break end
    if seen then
      n_dup = n_dup + 1
      go = false
    else
      status = 'full'
      break
    end
  end
  if go then
    local new, err
    if EXACT then  -- (seen_add, inline: a call a request)
      new = rpcall('SADD', a, b)
      if new ~= 1 and new ~= 0 then new, err = nil, new.err end
    else
      new, err = seen_add(a, b)
    end
    if new == nil then
      if not ALLOW then status, message = 'dferr', err break end
      n_dfu = n_dfu + 1
      new = 1
    end
    if new == 0 then
      n_dup = n_dup + 1
    else
      if shift > 0 then member, score = renumbered(host, member, score) end
      queued = queued + 1
      n_new = n_new + 1
      flag = '1'
      local not_before, prio = nil, nil
      if nb ~= '-' then not_before, prio = string.match(nb, '^(%S+) (%S+)$') end
      if not_before and tonumber(not_before) > NOW then
        delayed[#delayed + 1] = tonumber(not_before)
        delayed[#delayed + 1] = prio..'\t'..host..'\t'..string.sub(member, #host + #score + 3)
      elseif not HELD[host] then
        loose[nl + 1], loose[nl + 2] = score, member
        nl = nl + 2
      else
        local q = byhost[host]
        if not q then
          q = {}
          byhost[host] = q
          qhosts[#qhosts + 1] = host
        end
        q[#q + 1] = score
        q[#q + 1] = member
      end
    end
  end
  processed = processed + 1
  flags[processed] = flag
end
if n_new > 0 then
  redis.call('ZADD', K_AGE, NOW, batch)
  redis.call('HSET', K_AGEC, batch, n_new, PIN_FIELD, PIN)
  if #delayed > 0 then bulk('ZADD', K_DELAYED, delayed) end
  -- the requests of hosts that are not loose to their queues, and the host where it belongs: one with
  -- nothing out and no delay running (no state) is ready at its head, which the new requests may have
  -- improved (ZADD LT); one at its cap stays out; one waiting stays waiting
  if #qhosts > 0 then
    local ready, timers = {}, {}
    for k = 1, #qhosts do
      local host = qhosts[k]
      local i = where[host]
      local inf, ra = unpack_state(states[i])
      local q = byhost[host]
      local best = math.huge  -- the member as its host's queue holds it: without the host and score
      for j = 2, #q, 2 do
        local s = q[j - 1]
        q[j] = string.sub(q[j], #host + #s + 3)
        local score = tonumber(s)
        if score < best then best = score end
      end
      bulk('ZADD', qkey(host), q)
      if RB[i] then
        schedule(host)  -- robots-pending: placed by its robots request, not by these
      elseif inf < cap_of(host) then
        if ra > NOW then
          timers[#timers + 1] = ra
          timers[#timers + 1] = host
        else
          ready[#ready + 1] = best
          ready[#ready + 1] = host
        end
      end
    end
    if #ready > 0 then bulk('ZADD', K_READY, ready, 'LT') end
    if #timers > 0 then bulk('ZADD', K_TIMERS, timers) end
  end
  if nl > 0 then bulk('ZADD', K_GQ, loose) end
  redis.call('HINCRBY', K_C, 'queued', n_new)
  redis.call('HINCRBY', K_C, 'enqueued', n_new)
end
-- this shard's own numbers (re-queues after a retry or an expiry, age batches) come after every number it
-- was given
if SHARED and n_new > 0 then
  local top = tonumber(redis.call('GET', K_SEQ) or '0')
  if HIGH + shift > top then redis.call('SET', K_SEQ, string.format('%d', HIGH + shift)) end
end
if n_dup > 0 then redis.call('HINCRBY', K_C, 'dup', n_dup) end
if n_dfu > 0 then redis.call('HINCRBY', K_C, 'dfu', n_dfu) end
return {status, n_new, processed, message, table.concat(flags)}
