"""The Lua scripts of the ``redis://`` frontier. Every multi-step operation is one script, so it is
atomic: no other worker sees (or acts on) a half-done state.

Key layout under the prefix ``P`` (``P:`` + name); ``id`` is a request's number (``P:seq``)::

    req      HASH  id -> "<prio>\\t<host>\\t<json record>"   every request queued, delayed or leased
    q:<host> ZSET  id scored -prio*2^34 + seq                 a host's queue (priority, then FIFO)
    ready    ZSET  host scored by its head's score            hosts that may be fetched now
    timers   ZSET  host scored by ready_at                    hosts with work, waiting for their delay
    delayed  ZSET  id scored by not-before                    requests waiting for a time
    age      ZSET  id scored by enqueued-at                   queued + delayed (oldest_queued_age)
    lease    HASH  id -> "<token>\\t<prio>\\t<host>"            leases out
    lexp     ZSET  id scored by expires-at                    lease expiry
    att      HASH  id -> attempts already made (after retry)
    hready   HASH  host -> ready_at;  hinf HASH host -> leases out
    pdelay / pcap  HASH host -> per-host policy overrides
    hosts    SET   hosts that have (or had) queued requests, for stats
    c        HASH  counters: queued enqueued dup acked retries failures expired dfu bad
    cfg      HASH  layout version, dupefilter kind and its parameters
    df:<n>   SET   exact dupefilter bucket n: fingerprint >> bits, intset-encoded
    bloom    HASH  Bloom layers (m, k, capacity, count per layer); bloom:<i> STRING bit array
    bad      HASH  id -> "<reason>\\t<payload>"   corrupt or foreign entries moved aside

Times come from the caller's clock (``ARGV``), so every process must share one notion of time (the
system clock) -- and tests can drive a FakeClock.
"""

from __future__ import annotations

__all__ = [
    "ACK",
    "BLOCK_HOST",
    "BURY",
    "ENQUEUE",
    "INIT",
    "LEASE",
    "PEEK",
    "POLICY",
    "RETRY",
    "STATS",
]

# ARGV[1] prefix, ARGV[2] now, ARGV[3] default delay, ARGV[4] default in-flight cap; script args follow.
_PRELUDE = r"""
local P = ARGV[1]
local NOW = tonumber(ARGV[2])
local DEF_DELAY = tonumber(ARGV[3])
local DEF_CAP = tonumber(ARGV[4])
local K_REQ, K_READY, K_TIMERS = P..':req', P..':ready', P..':timers'
local K_DELAYED, K_AGE, K_LEASE, K_LEXP = P..':delayed', P..':age', P..':lease', P..':lexp'
local K_ATT, K_HREADY, K_HINF = P..':att', P..':hready', P..':hinf'
local K_PDELAY, K_PCAP, K_HOSTS, K_C, K_SEQ = P..':pdelay', P..':pcap', P..':hosts', P..':c', P..':seq'
local K_BAD, K_CFG = P..':bad', P..':cfg'
local SHIFT = 17179869184

-- The frontier's time never goes back: a worker whose clock reading is older than one already used
-- (it was read before another worker's call ran) acts at the newest time seen.
local HW = tonumber(redis.call('GET', P..':now') or '0')
if HW > NOW then NOW = HW else redis.call('SET', P..':now', ARGV[2]) end

local function qkey(host) return P..':q:'..host end

local CAPS, DELAYS = {}, {}  -- policy lookups, memoised for this call
-- most frontiers have no per-host policy at all: then there is nothing to look up
local HAS_PCAP, HAS_PDELAY = nil, nil

local function cap_of(host)
  local c = CAPS[host]
  if c == nil then
    if HAS_PCAP == nil then HAS_PCAP = redis.call('EXISTS', K_PCAP) == 1 end
    c = DEF_CAP
    if HAS_PCAP then c = tonumber(redis.call('HGET', K_PCAP, host) or DEF_CAP) end
    CAPS[host] = c
  end
  return c
end

local function delay_of(host)
  local d = DELAYS[host]
  if d == nil then
    if HAS_PDELAY == nil then HAS_PDELAY = redis.call('EXISTS', K_PDELAY) == 1 end
    d = DEF_DELAY
    if HAS_PDELAY then d = tonumber(redis.call('HGET', K_PDELAY, host) or DEF_DELAY) end
    DELAYS[host] = d
  end
  return d
end

-- Commands taking many arguments, called in slices (Lua's unpack has a limit).
local function bulk(cmd, key, args)
  for i = 1, #args, 4000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 3999, #args)))
  end
end

local function parse(payload)
  if not payload then return nil end
  local prio, host = string.match(payload, '^(-?%d+)\t([^\t]+)\t')
  if not prio then return nil end
  return tonumber(prio), host
end

-- Put host where it belongs: ready (may be fetched now), timers (later) or neither.
local function schedule(host)
  local head = redis.call('ZRANGE', qkey(host), 0, 0, 'WITHSCORES')
  if #head == 0 then
    redis.call('ZREM', K_READY, host)
    redis.call('ZREM', K_TIMERS, host)
    return
  end
  local inf = tonumber(redis.call('HGET', K_HINF, host) or '0')
  if inf >= cap_of(host) then
    redis.call('ZREM', K_READY, host)
    redis.call('ZREM', K_TIMERS, host)
    return
  end
  local ra = tonumber(redis.call('HGET', K_HREADY, host) or '0')
  if ra > NOW then
    redis.call('ZREM', K_READY, host)
    redis.call('ZADD', K_TIMERS, ra, host)
  else
    redis.call('ZREM', K_TIMERS, host)
    redis.call('ZADD', K_READY, head[2], host)
  end
end

local function push(id, prio, host)
  local seq = redis.call('INCR', K_SEQ)
  redis.call('ZADD', qkey(host), -prio * SHIFT + seq, id)
  redis.call('SADD', K_HOSTS, host)
  schedule(host)
end

local function bury(id, reason)
  local payload = redis.call('HGET', K_REQ, id) or ''
  redis.call('HSET', K_BAD, id, reason..'\t'..payload)
  redis.call('HDEL', K_REQ, id)
  redis.call('HDEL', K_ATT, id)
  redis.call('ZREM', K_AGE, id)
  redis.call('HINCRBY', K_C, 'bad', 1)
end

-- Expired leases back to their queue, due delayed requests into theirs, due hosts into ready.
local function refresh()
  local expired = redis.call('ZRANGEBYSCORE', K_LEXP, '-inf', NOW, 'LIMIT', 0, 1000)
  for _, id in ipairs(expired) do
    local info = redis.call('HGET', K_LEASE, id)
    redis.call('ZREM', K_LEXP, id)
    redis.call('HDEL', K_LEASE, id)
    if info then
      local prio, host = string.match(info, '^[^\t]*\t(-?%d+)\t(.*)$')
      redis.call('HINCRBY', K_HINF, host, -1)
      redis.call('HINCRBY', K_C, 'expired', 1)
      redis.call('HINCRBY', K_C, 'queued', 1)
      redis.call('ZADD', K_AGE, NOW, id)
      push(id, tonumber(prio), host)
    end
  end
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', NOW, 'LIMIT', 0, 1000)
  for _, id in ipairs(due) do
    redis.call('ZREM', K_DELAYED, id)
    local prio, host = parse(redis.call('HGET', K_REQ, id))
    if prio then
      push(id, prio, host)
    else
      redis.call('HINCRBY', K_C, 'queued', -1)
      bury(id, 'unreadable entry header')
    end
  end
  local hosts = redis.call('ZRANGEBYSCORE', K_TIMERS, '-inf', NOW, 'LIMIT', 0, 1000)
  for _, host in ipairs(hosts) do
    redis.call('ZREM', K_TIMERS, host)
    schedule(host)
  end
end

-- Check a lease token; returns id, prio, host or nil.
local function lease_of(token)
  local id = string.match(token, '^(%d+):')
  if not id then return nil end
  local info = redis.call('HGET', K_LEASE, id)
  if not info then return nil end
  local tok, prio, host = string.match(info, '^([^\t]*)\t(-?%d+)\t(.*)$')
  if tok ~= token then return nil end
  redis.call('HDEL', K_LEASE, id)
  redis.call('ZREM', K_LEXP, id)
  redis.call('HINCRBY', K_HINF, host, -1)
  return id, tonumber(prio), host
end

-- After leases of host were settled: where it goes now, or forget it when idle.
local function after_settle(host)
  local head = redis.call('ZRANGE', qkey(host), 0, 0, 'WITHSCORES')
  local inf = tonumber(redis.call('HGET', K_HINF, host) or '0')
  local ra = tonumber(redis.call('HGET', K_HREADY, host) or '0')
  if #head == 0 then
    redis.call('ZREM', K_READY, host)
    redis.call('ZREM', K_TIMERS, host)
    if inf <= 0 and ra <= NOW then
      redis.call('HDEL', K_HINF, host)
      redis.call('HDEL', K_HREADY, host)
      redis.call('SREM', K_HOSTS, host)
    end
  elseif inf >= cap_of(host) then
    redis.call('ZREM', K_READY, host)
    redis.call('ZREM', K_TIMERS, host)
  elseif ra > NOW then
    redis.call('ZREM', K_READY, host)
    redis.call('ZADD', K_TIMERS, ra, host)
  else
    redis.call('ZREM', K_TIMERS, host)
    redis.call('ZADD', K_READY, head[2], host)
  end
end

-- HMGET in slices; returns one value (or false) per field.
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, 4000 do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 3999, #fields)))
    for _, v in ipairs(part) do out[#out + 1] = v end
  end
  return out
end
"""

# ARGV[5] layout version, [6] dupefilter kind, [7] exact bucket bits, [8] bloom capacity,
# [9] bloom error rate. Returns the stored kind and bits (a frontier keeps the filter it was made with).
INIT = r"""
local P = ARGV[1]
local K_CFG = P..':cfg'
local layout = redis.call('HGET', K_CFG, 'layout')
if layout and layout ~= ARGV[5] then
  return {'layout', layout}
end
if not layout then
  redis.call('HSET', K_CFG, 'layout', ARGV[5], 'kind', ARGV[6], 'bits', ARGV[7])
  if ARGV[6] == 'bloom' then
    local cap = tonumber(ARGV[8])
    local err = tonumber(ARGV[9])
    local m = math.ceil(-cap * math.log(err / 2) / (math.log(2) ^ 2))
    if m < 64 then m = 64 end
    local k = math.floor(m / cap * math.log(2) + 0.5)
    if k < 1 then k = 1 end
    redis.call('HSET', P..':bloom', 'n', 1, 'err', ARGV[9], 'm1', m, 'k1', k, 'cap1', cap, 'cnt1', 0)
  end
end
return {'ok', redis.call('HGET', K_CFG, 'kind'), redis.call('HGET', K_CFG, 'bits')}
"""

# ARGV[5] max_size (0 unbounded), [6] dupefilter kind, [7] "allow" when an unusable filter may be
# bypassed, then one value per request: "<df_a> <df_b> <not_before or ''>\n<payload>".
# Exact filter: df_a = bucket, df_b = fingerprint >> bits. Bloom: df_a, df_b = the two hash halves.
# Returns {status, queued, processed, message}: status 'ok', 'full' (stopped at processed+1) or
# 'dferr' (the filter could not be used and the policy is fail).
ENQUEUE = (
    _PRELUDE
    + r"""
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
    local r = redis.pcall('SADD', P..':df:'..a, b)
    if type(r) == 'table' and r.err then return nil, r.err end
    return r
  end
  local ok, r = pcall(bloom_add, tonumber(a), tonumber(b))
  if not ok then return nil, tostring(r) end
  return r
end

local function seen_has(a, b)
  if DF == 'exact' then
    local r = redis.pcall('SISMEMBER', P..':df:'..a, b)
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
local nitems = #ARGV - 7
local base = redis.call('INCRBY', K_SEQ, nitems) - nitems
local reqs, ages, delayed, byhost = {}, {}, {}, {}
for i = 8, #ARGV do
  local a, b, nb, payload = string.match(ARGV[i], '^(%d+) (%d+) ([^\n]*)\n(.*)$')
  local prio, host = parse(payload)
  if not prio then return redis.error_reply('malformed enqueue argument '..(i - 7)) end
  local go = true
  if MAX > 0 and queued >= MAX then
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
    local new, err = seen_add(a, b)
    if new == nil then
      if not ALLOW then status, message = 'dferr', err break end
      n_dfu = n_dfu + 1
      new = 1
    end
    if new == 0 then
      n_dup = n_dup + 1
    else
      local id = base + processed + 1
      reqs[#reqs + 1] = id
      reqs[#reqs + 1] = payload
      ages[#ages + 1] = NOW
      ages[#ages + 1] = id
      queued = queued + 1
      n_new = n_new + 1
      if nb ~= '' and tonumber(nb) > NOW then
        delayed[#delayed + 1] = tonumber(nb)
        delayed[#delayed + 1] = id
      else
        local q = byhost[host]
        if not q then q = {} byhost[host] = q end
        q[#q + 1] = -prio * SHIFT + id
        q[#q + 1] = id
      end
    end
  end
  processed = processed + 1
end
if n_new > 0 then
  bulk('HSET', K_REQ, reqs)
  bulk('ZADD', K_AGE, ages)
  if #delayed > 0 then bulk('ZADD', K_DELAYED, delayed) end
  local hosts = {}
  for host, q in pairs(byhost) do
    bulk('ZADD', qkey(host), q)
    hosts[#hosts + 1] = host
  end
  if #hosts > 0 then bulk('SADD', K_HOSTS, hosts) end
  for _, host in ipairs(hosts) do schedule(host) end
  redis.call('HINCRBY', K_C, 'queued', n_new)
  redis.call('HINCRBY', K_C, 'enqueued', n_new)
end
if n_dup > 0 then redis.call('HINCRBY', K_C, 'dup', n_dup) end
if n_dfu > 0 then redis.call('HINCRBY', K_C, 'dfu', n_dfu) end
return {status, n_new, processed, message}
"""
)

# ARGV[5] limit, [6] lease timeout. Returns the time the leases were made at ('%.17g'), then
# token, payload, attempt for each lease; ids found unreadable are moved aside.
LEASE = (
    _PRELUDE
    + r"""
local LIMIT = tonumber(ARGV[5])
local EXPIRES = NOW + tonumber(ARGV[6])
refresh()
local out = {string.format('%.17g', NOW)}
-- host state read once, kept here while the batch is picked, written back at the end
local INF, RA, RA_SET = {}, {}, {}
local picked = {}
while #picked < LIMIT do
  local top = redis.call('ZRANGE', K_READY, 0, 0)
  if #top == 0 then break end
  local host = top[1]
  local q = qkey(host)
  local popped = redis.call('ZPOPMIN', q)
  if #popped == 0 then
    redis.call('ZREM', K_READY, host)
  else
    local prio = -math.floor(tonumber(popped[2]) / SHIFT)
    picked[#picked + 1] = {popped[1], prio, host}
    local inf = INF[host]
    if inf == nil then inf = tonumber(redis.call('HGET', K_HINF, host) or '0') end
    inf = inf + 1
    INF[host] = inf
    local ra = RA[host]
    if ra == nil then ra = tonumber(redis.call('HGET', K_HREADY, host) or '0') end
    local d = delay_of(host)
    if d > 0 then
      ra = NOW + d
      RA_SET[host] = true
    end
    RA[host] = ra
    if inf >= cap_of(host) then
      redis.call('ZREM', K_READY, host)
    elseif ra > NOW then
      redis.call('ZREM', K_READY, host)
      if redis.call('EXISTS', q) == 1 then redis.call('ZADD', K_TIMERS, ra, host) end
    else
      local head = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
      if #head == 0 then redis.call('ZREM', K_READY, host) else redis.call('ZADD', K_READY, head[2], host) end
    end
  end
end
if #picked == 0 then return out end
local infs, ras = {}, {}
for host, v in pairs(INF) do
  infs[#infs + 1] = host
  infs[#infs + 1] = v
end
for host in pairs(RA_SET) do
  ras[#ras + 1] = host
  ras[#ras + 1] = string.format('%.17g', RA[host])
end
bulk('HSET', K_HINF, infs)
if #ras > 0 then bulk('HSET', K_HREADY, ras) end
local ids = {}
for i, p in ipairs(picked) do ids[i] = p[1] end
bulk('ZREM', K_AGE, ids)
redis.call('HINCRBY', K_C, 'queued', -#picked)
local payloads = hmget(K_REQ, ids)
local atts = nil
if redis.call('EXISTS', K_ATT) == 1 then atts = hmget(K_ATT, ids) end
local serial = redis.call('INCR', P..':lseq')
local leases, lexp = {}, {}
for i, p in ipairs(picked) do
  local id, prio, host = p[1], p[2], p[3]
  local payload = payloads[i]
  if not parse(payload) then
    bury(id, 'unreadable entry header')
    redis.call('HINCRBY', K_HINF, host, -1)
    after_settle(host)
  else
    local token = id..':'..serial..'.'..i
    leases[#leases + 1] = id
    leases[#leases + 1] = token..'\t'..prio..'\t'..host
    lexp[#lexp + 1] = EXPIRES
    lexp[#lexp + 1] = id
    local att = 1
    if atts and atts[i] then att = tonumber(atts[i]) + 1 end
    out[#out + 1] = token
    out[#out + 1] = payload
    out[#out + 1] = att
  end
end
if #leases > 0 then
  bulk('HSET', K_LEASE, leases)
  bulk('ZADD', K_LEXP, lexp)
end
return out
"""
)

# ARGV[5] mode: 'ack' | 'fail'; tokens follow. Returns the tokens that were not valid leases.
ACK = (
    _PRELUDE
    + r"""
local MODE = ARGV[5]
local tokens, ids = {}, {}
for i = 6, #ARGV do
  tokens[#tokens + 1] = ARGV[i]
  ids[#ids + 1] = string.match(ARGV[i], '^(%d+):') or '0'
end
local infos = hmget(K_LEASE, ids)
local bad, done, perhost, settled = {}, {}, {}, {}
for i, token in ipairs(tokens) do
  local info = infos[i]
  local tok, host
  if info then tok, host = string.match(info, '^([^\t]*)\t%-?%d+\t(.*)$') end
  if info and tok == token and not settled[ids[i]] then
    settled[ids[i]] = true  -- the same token twice in one call is settled once
    done[#done + 1] = ids[i]
    perhost[host] = (perhost[host] or 0) + 1
  else
    bad[#bad + 1] = token
  end
end
if #done > 0 then
  bulk('HDEL', K_LEASE, done)
  bulk('ZREM', K_LEXP, done)
  bulk('HDEL', K_REQ, done)
  if redis.call('EXISTS', K_ATT) == 1 then bulk('HDEL', K_ATT, done) end
  for host, k in pairs(perhost) do
    redis.call('HINCRBY', K_HINF, host, -k)
    after_settle(host)
  end
  if MODE == 'ack' then redis.call('HINCRBY', K_C, 'acked', #done)
  else redis.call('HINCRBY', K_C, 'failures', #done) end
end
return bad
"""
)


# ARGV[5] token, [6] delay, [7] attempt. Returns 1, or 0 when the lease is not valid.
RETRY = (
    _PRELUDE
    + r"""
local id, prio, host = lease_of(ARGV[5])
if not id then return 0 end
local delay = tonumber(ARGV[6])
redis.call('HSET', K_ATT, id, ARGV[7])
redis.call('HINCRBY', K_C, 'retries', 1)
redis.call('HINCRBY', K_C, 'queued', 1)
redis.call('ZADD', K_AGE, NOW, id)
if delay > 0 then
  redis.call('ZADD', K_DELAYED, NOW + delay, id)
  after_settle(host)
else
  push(id, prio, host)
end
return 1
"""
)

# ARGV[5] token, [6] reason. Moves a leased entry that could not be decoded aside.
BURY = (
    _PRELUDE
    + r"""
local id, prio, host = lease_of(ARGV[5])
if not id then return 0 end
bury(id, ARGV[6])
after_settle(host)
return 1
"""
)

# ARGV[5] host, [6] until.
BLOCK_HOST = (
    _PRELUDE
    + r"""
local host, untilt = ARGV[5], tonumber(ARGV[6])
local ra = tonumber(redis.call('HGET', K_HREADY, host) or '0')
if untilt > ra then redis.call('HSET', K_HREADY, host, ARGV[6]) end
schedule(host)
return 1
"""
)

# ARGV[5] host, [6] delay ('' keep), [7] cap ('' keep).
POLICY = (
    _PRELUDE
    + r"""
local host = ARGV[5]
if ARGV[6] ~= '' then redis.call('HSET', K_PDELAY, host, ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', K_PCAP, host, ARGV[7]) end
schedule(host)
return 1
"""
)

# Returns queued, in flight, and the next time something may become ready ('' none).
PEEK = r"""
local P = ARGV[1]
local queued = redis.call('HGET', P..':c', 'queued') or '0'
local inflight = redis.call('ZCARD', P..':lexp')
local wake = nil
for _, key in ipairs({P..':timers', P..':delayed', P..':lexp'}) do
  local head = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #head > 0 then
    local t = tonumber(head[2])
    if wake == nil or t < wake then wake = t end
  end
end
local w = ''
if wake then w = string.format('%.17g', wake) end
return {queued, inflight, w}
"""

# Returns counters (flat field/value list), in flight, oldest enqueued-at ('' none), host depths.
STATS = r"""
local P = ARGV[1]
local counters = redis.call('HGETALL', P..':c')
local inflight = redis.call('ZCARD', P..':lexp')
local oldest = redis.call('ZRANGE', P..':age', 0, 0, 'WITHSCORES')
local o = ''
if #oldest > 0 then o = oldest[2] end
local depth = {}
for _, host in ipairs(redis.call('SMEMBERS', P..':hosts')) do
  local n = redis.call('ZCARD', P..':q:'..host)
  if n > 0 then depth[host] = n end
end
for _, id in ipairs(redis.call('ZRANGE', P..':delayed', 0, 9999)) do
  local payload = redis.call('HGET', P..':req', id)
  if payload then
    local host = string.match(payload, '^-?%d+\t([^\t]+)\t')
    if host then depth[host] = (depth[host] or 0) + 1 end
  end
end
local flat = {}
for host, n in pairs(depth) do
  flat[#flat + 1] = host
  flat[#flat + 1] = n
end
return {counters, inflight, o, flat}
"""
