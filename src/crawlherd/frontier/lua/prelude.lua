-- The prelude of the redis:// frontier's scripts (every one but INIT, PEEK and STATS): the keys, the
-- time, per-host policy and the steps the scripts share. Every multi-step operation is one script, so it
-- is atomic: no other worker sees (or acts on) a half-done state.
--
-- ARGV[1] prefix P, ARGV[2] now, ARGV[3] default delay, ARGV[4] default in-flight cap; the script's own
-- arguments follow. Times come from the caller's clock, so every process must share one notion of time
-- (the system clock) -- and tests can drive a FakeClock.
--
-- Key layout under the prefix P (P: + name); id is a request's number (P:seq):
--   req      HASH  id -> "<prio>\t<host>\t<json record>"    every request queued, delayed or leased
--   q:<host> ZSET  id scored -prio*2^34 + seq                 a host's queue (priority, then FIFO)
--   ready    ZSET  host scored by its head's score            hosts that may be fetched now
--   timers   ZSET  host scored by ready_at                    hosts with work, waiting for their delay
--   delayed  ZSET  id scored by not-before                    requests waiting for a time
--   age      ZSET  id scored by enqueued-at                   queued + delayed (oldest_queued_age)
--   lease    HASH  id -> "<token>\t<prio>\t<host>"             leases out
--   lexp     ZSET  id scored by expires-at                    lease expiry
--   att      HASH  id -> attempts already made (after retry)
--   hready   HASH  host -> ready_at;  hinf HASH host -> leases out
--   pdelay / pcap  HASH host -> per-host policy overrides
--   hosts    SET   hosts that have (or had) queued requests, for stats
--   c        HASH  counters: queued enqueued dup acked retries failures expired dfu bad
--   cfg      HASH  layout version, dupefilter kind and its parameters
--   df:<n>   SET   exact dupefilter bucket n: fingerprint >> bits, intset-encoded
--   bloom    HASH  Bloom layers (m, k, capacity, count per layer); bloom:<i> STRING bit array
--   bad      HASH  id -> "<reason>\t<payload>"   corrupt or foreign entries moved aside
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

-- A per-host policy value: the host's override in the hash key, else the default; memoised for this
-- call. Most frontiers have no per-host policy at all: then there is nothing to look up.
local HAS = {}
local function override(memo, key, default, host)
  local v = memo[host]
  if v == nil then
    if HAS[key] == nil then HAS[key] = redis.call('EXISTS', key) == 1 end
    v = default
    if HAS[key] then v = tonumber(redis.call('HGET', key, host) or default) end
    memo[host] = v
  end
  return v
end

local CAPS, DELAYS = {}, {}
local function cap_of(host) return override(CAPS, K_PCAP, DEF_CAP, host) end
local function delay_of(host) return override(DELAYS, K_PDELAY, DEF_DELAY, host) end

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

-- A host's queue head ({} when empty), leases out and ready time.
local function host_state(host)
  return redis.call('ZRANGE', qkey(host), 0, 0, 'WITHSCORES'),
    tonumber(redis.call('HGET', K_HINF, host) or '0'),
    tonumber(redis.call('HGET', K_HREADY, host) or '0')
end

-- Put host where it belongs: ready (may be fetched now), timers (later) or neither (nothing queued, or
-- at its in-flight cap: settling a lease places it again).
local function place(host, head, inf, ra)
  if #head == 0 or inf >= cap_of(host) then
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

local function schedule(host)
  place(host, host_state(host))
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
  local head, inf, ra = host_state(host)
  place(host, head, inf, ra)
  if #head == 0 and inf <= 0 and ra <= NOW then
    redis.call('HDEL', K_HINF, host)
    redis.call('HDEL', K_HREADY, host)
    redis.call('SREM', K_HOSTS, host)
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
