-- The prelude of the redis:// frontier's scripts (every one but INIT, PEEK and STATS): the keys, the
-- time, per-host policy and the steps the scripts share. Every multi-step operation is one script, so it
-- is atomic: no other worker sees (or acts on) a half-done state.
--
-- ARGV[1] prefix P, ARGV[2] now, ARGV[3] default delay, ARGV[4] default in-flight cap; the script's own
-- arguments follow. Times come from the caller's clock, so every process must share one notion of time
-- (the system clock) -- and tests can drive a FakeClock.
--
-- Key layout (version 6) under the prefix P (P: + name): the prefix of one shard (the frontier's prefix on
-- one Redis; a hash tag on a cluster, see frontier/redis/_shards.py). A request is one packed member,
-- "<id>\t<batch>\t<body>": id its number (P:seq), batch the enqueue batch it counts in for
-- oldest_queued_age, body the client's encoding of the request (opaque here). No per-request hash:
-- the member is the request, wherever it is.
--   gq       ZSET  "<host>\t<score>\t<member>" scored <score> = -prio*2^34 + seq   the loose requests: of
--                  hosts that could give them when they were queued (no delay, below their cap, no robots.txt
--                  pending, nothing in their queue), one queue across those hosts, read from its best
--                  (pick.lua) without its scores: each member carries its own (Redis formats a score it
--                  replies with sprintf, the dearest part of reading gq; layout 5 had "<host>\t<member>");
--                  a request whose host may not give it when it is read there moves to its host's queue
--   q:<host> ZSET  member scored -prio*2^34 + seq             a host's queue (priority, then FIFO)
--   ready    ZSET  host scored by its head's score            hosts whose queue may be fetched now
--   timers   ZSET  host scored by ready_at                    hosts with work, waiting for their delay
--   delayed  ZSET  "<prio>\t<host>\t<member>" by not-before   requests waiting for a time
--   age      ZSET  batch scored by its enqueued-at;  agec HASH batch -> its requests still queued
--   l:<serial> HASH id -> host   the leases out of one LEASE call (serial P:lseq); a lease's token is
--                  "<id>:<serial>.<n>@<deadline>" (n: its place in the call), made by the client from the
--                  parts LEASE returns: a settle finds its lease by id and serial alone (a lease taken back
--                  and leased again is in another call); and PIN_FIELD (see below), as agec: a call's
--                  hundreds of leases read and deleted by field
--   lb:<serial> LIST  what that call's leases hold: "<host>\t<score>\t<member>" a lease (as gq holds it),
--                  pushed once by LEASE (no string joined in Lua), read back only when a lease is given back
--                  (RETRY, BURY) or expires; deleted with the call's last lease (layout 5 had it as one string
--                  of "<id>\n<score>\n<host>\t<member>\n" lines, joined by table.concat; layout 4 as the
--                  l:<serial> field of its id, with the token: ACK read it back whole)
--   lexp     ZSET  serial scored by expires-at                lease expiry, one entry per LEASE call: the
--                  deadline, or sooner while its holder does not renew it (RENEW); "<serial>:<id>": a lease
--                  of that call its holder stopped renewing while it renews the others (its own expiry)
--   ldet     SET   the "<serial>:<id>" entries of lexp
--   att      HASH  id -> attempts already made (after retry)
--   h        HASH  host -> "<leases out> <ready_at>", or "<leases out>" when ready_at is 0: only hosts with
--                  leases out or a delay running;
--                  and PIN_FIELD (see below), as agec
--   pdelay / pcap  HASH host -> per-host policy overrides
--   c        HASH  counters: queued enqueued dup acked retries failures expired dfu bad; out (leases out)
--   cfg      HASH  layout version, dupefilter kind and its parameters
--   df:<n>   SET   exact dupefilter bucket n: fingerprint >> bits, intset-encoded
--   bloom    HASH  Bloom layers (m, k, capacity, count per layer); bloom:<i> STRING bit array
--   bad      HASH  id -> "<reason>\t<payload>"   corrupt or foreign entries moved aside
--   rb       HASH  host -> "q\t<score>\t<member>" | "out\t<id>"   robots-pending hosts (see below)
--   rbseen   SET   hosts whose robots request was ever queued (enqueue_robots: once per host)
--   seq, lseq, now  STRING  request and age batch numbers (one counter: an ENQUEUE's batch is the lowest of
--                  its numbers, which the client took), lease serials; the newest time seen (layout 4 had a
--                  batch counter of its own, bseq)
--   sent:<host>, hold:<host>, out:<host>  the send clock and Retry-After hold (send.lua; expire by themselves)
local P = ARGV[1]
local NOW = tonumber(ARGV[2])
local DEF_DELAY = tonumber(ARGV[3])
local DEF_CAP = tonumber(ARGV[4])
local K_READY, K_TIMERS, K_DELAYED = P..':ready', P..':timers', P..':delayed'
local K_AGE, K_AGEC, K_LEXP, K_LDET = P..':age', P..':agec', P..':lexp', P..':ldet'
local K_ATT, K_H, K_GQ = P..':att', P..':h', P..':gq'
local K_PDELAY, K_PCAP, K_C, K_SEQ = P..':pdelay', P..':pcap', P..':c', P..':seq'
local K_BAD, K_CFG = P..':bad', P..':cfg'
local SHIFT = 17179869184
-- h and agec hold a field per host with leases out and per enqueue batch still queued: hundreds, read and
-- written hundreds at a time. Redis keeps a hash of up to hash-max-listpack-entries fields (128 to 512) as a
-- listpack, where every field read or written scans the hash: a lease of 500 spent milliseconds there. A
-- field whose value is longer than hash-max-listpack-value (64) makes the hash a hash table for as long as
-- it exists: written with their bulk writes, never deleted (a tab is in no host name nor batch number).
local PIN_FIELD, PIN = '\t', string.rep('-', 256)

-- The frontier's time never goes back: a worker whose clock reading is older than one already used
-- (it was read before another worker's call ran) acts at the newest time seen.
local HW = tonumber(redis.call('GET', P..':now') or '0')
if HW > NOW then NOW = HW else redis.call('SET', P..':now', ARGV[2]) end

local function qkey(host) return P..':q:'..host end
local function fmt(x) return string.format('%.17g', x) end
-- Small integers as strings, each made once a call (a number concatenated or passed to redis.call is
-- formatted every time, by sprintf: a cost per request where it is done per request).
local ISTR = {}
local function istr(n)
  local s = ISTR[n]
  if not s then
    s = string.format('%d', n)
    ISTR[n] = s
  end
  return s
end
-- a host's packed state (see unpack_state); most hosts of a crawl without delay have ready_at 0: then the
-- state is its leases out alone
local function state_str(inf, ra)
  if ra == 0 then return istr(inf) end
  return istr(inf)..' '..fmt(ra)
end

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
-- (without overrides, the default at once: no memo filled a host at a time, hundreds of hosts a call)
local function cap_of(host)
  if HAS[K_PCAP] == false then return DEF_CAP end
  return override(CAPS, K_PCAP, DEF_CAP, host)
end
local function delay_of(host)
  if HAS[K_PDELAY] == false then return DEF_DELAY end
  return override(DELAYS, K_PDELAY, DEF_DELAY, host)
end
-- The default when no host has an override of key, else false: a loop over hundreds of hosts reads
-- `CAP0 or cap_of(host)`, not a Lua call a host
local function uniform(key, default)
  if HAS[key] == nil then HAS[key] = redis.call('EXISTS', key) == 1 end
  if HAS[key] then return false end
  return default
end

-- Commands taking many arguments, called in slices (Lua's unpack has a limit); opt: a flag after key.
local function bulk(cmd, key, args, opt)
  for i = 1, #args, 4000 do
    if opt then
      redis.call(cmd, key, opt, unpack(args, i, math.min(i + 3999, #args)))
    else
      redis.call(cmd, key, unpack(args, i, math.min(i + 3999, #args)))
    end
  end
end

-- HMGET in slices; returns one value (or false) per field.
local function hmget(key, fields)
  local out = {}
  for i = 1, #fields, 4000 do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 3999, #fields)))
    if i == 1 then out = part else
      local n = #out
      for j = 1, #part do out[n + j] = part[j] end
    end
  end
  return out
end

-- The leases of one LEASE call (see the key layout): the live ones (id -> host) and what they hold (the
-- call's lines, "<host>\t<score>\t<member>" each).
local function lease_key(serial) return P..':l:'..serial end
local function lease_lines(serial) return P..':lb:'..serial end
-- A lease token's id and LEASE call serial (nil: not a token).
local function token_parts(token) return string.match(token, '^(%d+):(%d+)%.') end

-- The hosts of leases (ids[i] of LEASE call sers[i]; false where it is not a live lease): one HMGET per
-- LEASE call (usually one).
local function lease_hosts(sers, ids)
  local hosts, groups, order = {}, {}, {}
  local n = #sers
  -- mostly one call: one HMGET of all, no grouping
  local one = sers[1]
  for k = 2, n do
    if sers[k] ~= one then one = nil break end
  end
  if one and n > 0 then return hmget(lease_key(one), ids) end
  for k = 1, n do
    local ser = sers[k]
    hosts[k] = false
    if ser then
      local g = groups[ser]
      if not g then
        g = {}
        groups[ser] = g
        order[#order + 1] = ser
      end
      g[#g + 1] = k
    end
  end
  for _, ser in ipairs(order) do
    local g, fields = groups[ser], {}
    for j, k in ipairs(g) do fields[j] = ids[k] end
    local got = hmget(lease_key(ser), fields)
    for j, k in ipairs(g) do hosts[k] = got[j] end
  end
  return hosts
end

-- The lease tokens in ARGV[i], separated by spaces (one argument for all): the tokens, their ids and LEASE
-- calls' serials (false: not a token) and their hosts (false where the token is not a live lease).
local function leases_in_arg(i)
  local tokens, ids, sers, n = {}, {}, {}, 0
  for token in string.gmatch(ARGV[i] or '', '%S+') do
    n = n + 1
    tokens[n] = token
    local id, ser = token_parts(token)
    ids[n], sers[n] = id or false, ser or false
  end
  return tokens, ids, sers, lease_hosts(sers, ids)
end

-- Leases ended (settled, given back): the ids of LEASE call ser, deleted from its live leases here. The
-- call's lines and expiry entry go with its last lease; a lease's own entry (see RENEW) with it.
local function leases_ended(ser, ids)
  local key = lease_key(ser)
  -- ids are live and distinct: mostly all of the call's leases (its pin besides, see lease.lua), deleted
  -- at once (HDEL of hundreds of fields of a hash table costs more than the rest of ACK)
  local all = redis.call('HLEN', key) - 1 == #ids
  if not all then
    bulk('HDEL', key, ids)
    all = redis.call('HLEN', key) <= 1  -- only its pin left, or nothing
  end
  if all then
    redis.call('DEL', key, lease_lines(ser))
    redis.call('ZREM', K_LEXP, ser)
  end
  if redis.call('EXISTS', K_LDET) == 1 then
    local own = {}
    for j, id in ipairs(ids) do own[j] = ser..':'..id end
    bulk('ZREM', K_LEXP, own)
    bulk('SREM', K_LDET, own)
  end
  redis.call('HINCRBY', K_C, 'out', -#ids)
end

-- The lines of LEASE call ser held by the leases in want (their ids): id -> {prio, host, member, score}, and
-- those ids in the order of the lines (the order LEASE handed them out in).
local function lease_records(ser, want)
  local out, order, set, left = {}, {}, {}, #want
  local lines = redis.call('LRANGE', lease_lines(ser), 0, -1)
  for _, id in ipairs(want) do set[id] = true end
  for j = 1, #lines do
    local host, score, member, id = string.match(lines[j], '^([^\t]*)\t([^\t]*)\t((%d+)\t.*)$')
    if id and set[id] then
      local n = tonumber(score)
      out[id] = {-math.floor(n / SHIFT), host, member, n}
      order[#order + 1] = id
      left = left - 1
      if left == 0 then break end
    end
  end
  return out, order
end

-- A host's packed state: "<leases out> <ready time>", or "<leases out>" (ready time 0).
local function unpack_state(v)
  if not v then return 0, 0 end
  local n = tonumber(v)
  if n then return n, 0 end
  local inf, ra = string.match(v, '^(%-?%d+) (.*)$')
  return tonumber(inf), tonumber(ra)
end
local function state_of(host) return unpack_state(redis.call('HGET', K_H, host)) end
local function set_state(host, inf, ra)
  if inf <= 0 and ra <= NOW then redis.call('HDEL', K_H, host)
  else redis.call('HSET', K_H, host, state_str(inf, ra)) end
end

-- Robots-pending hosts (ROBOTS, robots.lua). A host in rb hands out its robots request alone, whatever
-- the priorities: rb holds it ("q", with its score and member) until it is leased, then "out" with its id
-- until the lease is settled by ACK (which ends the pending state). A retry or an expired lease goes
-- back through push(), which sees the "out" id and queues it in rb again. Nothing here costs a call
-- while no host is pending (rb does not exist).
local K_RB, K_RBSEEN = P..':rb', P..':rbseen'
local HAS_RB = nil
local function robots_of(host)
  if HAS_RB == nil then HAS_RB = redis.call('EXISTS', K_RB) == 1 end
  if not HAS_RB then return nil end
  return redis.call('HGET', K_RB, host) or nil
end
-- The rb values of hosts (false where not pending); {} when no host is pending.
local function robots_states(hosts)
  if redis.call('EXISTS', K_RB) == 0 then return {} end
  return hmget(K_RB, hosts)
end
-- After the lease id of host was settled: if it was the host's robots request, the host is no longer
-- pending. Returns true when it was.
local function robots_settled(host, id)
  local rb = robots_of(host)
  if not rb or rb ~= 'out\t'..id then return false end  -- (no string made while no host is pending)
  redis.call('HDEL', K_RB, host)
  return true
end

-- The score of a host's queue head, or nil when it is empty (a robots-pending host: its robots
-- request's score, nil while that is leased).
local function head_of(host)
  local rb = robots_of(host)
  if rb then return string.match(rb, '^q\t([^\t]+)\t') end
  local head = redis.call('ZRANGE', qkey(host), 0, 0, 'WITHSCORES')
  if #head == 0 then return nil end
  return head[2]
end

-- Put host where it belongs: ready (may be fetched now), timers (later) or neither (nothing queued, or
-- at its in-flight cap: settling a lease places it again).
local function place(host, head, inf, ra)
  if head == nil or inf >= cap_of(host) then
    redis.call('ZREM', K_READY, host)
    redis.call('ZREM', K_TIMERS, host)
  elseif ra > NOW then
    redis.call('ZREM', K_READY, host)
    redis.call('ZADD', K_TIMERS, ra, host)
  else
    redis.call('ZREM', K_TIMERS, host)
    redis.call('ZADD', K_READY, head, host)
  end
end

local function schedule(host)
  local inf, ra = state_of(host)
  place(host, head_of(host), inf, ra)
end

-- A member's id, batch and body (nil when the header cannot be read).
local function split(member)
  local _, e, id, b = string.find(member, '^(%d+)\t(%d+)\t')
  if not e then return nil end
  return id, b, string.sub(member, e + 1)
end

-- A new age batch of n requests enqueued now; returns its number.
local function new_batch(n)
  local b = redis.call('INCR', K_SEQ)  -- (one counter for numbers and batches: ENQUEUE's batch is a number)
  redis.call('ZADD', K_AGE, NOW, b)
  redis.call('HSET', K_AGEC, b, n)
  return b
end

-- Requests of batches left the queue: counts = {batch -> how many}. A lease takes from many batches:
-- one HMGET and one HSET for all of them, not an HINCRBY each.
local function batches_done(counts)
  local bs = {}
  for b in pairs(counts) do bs[#bs + 1] = b end
  if #bs == 0 then return end
  local left = hmget(K_AGEC, bs)
  local keep, gone = {}, {}
  for i, b in ipairs(bs) do
    local n = tonumber(left[i] or '0') - counts[b]
    if n > 0 then
      keep[#keep + 1] = b
      keep[#keep + 1] = string.format('%d', n)  -- (a number is formatted by Redis with '%.17g': dearer)
    else
      gone[#gone + 1] = b
    end
  end
  if #keep > 0 then bulk('HSET', K_AGEC, keep) end
  if #gone > 0 then
    bulk('HDEL', K_AGEC, gone)
    bulk('ZREM', K_AGE, gone)
  end
end

-- Back into the host's queue (after a retry or a delay), behind its equals; with score (an expired
-- lease's), at that place.
local function push(id, b, body, prio, host, score)
  score = score or -prio * SHIFT + redis.call('INCR', K_SEQ)
  if robots_of(host) == 'out\t'..id then  -- the host's robots request: back first, in rb
    redis.call('HSET', K_RB, host, 'q\t'..fmt(score)..'\t'..id..'\t'..b..'\t'..body)
  else
    redis.call('ZADD', qkey(host), score, id..'\t'..b..'\t'..body)
  end
  schedule(host)
end

local function bury(id, reason, payload)
  redis.call('HSET', K_BAD, id, reason..'\t'..payload)
  redis.call('HDEL', K_ATT, id)
  redis.call('HINCRBY', K_C, 'bad', 1)
end

-- An expired lease (id, and its record: {prio, host, member, score}) back to its queue with the score it
-- had (its place among equals: a cluster's shards number their requests from one counter, which a shard's
-- script cannot reach), in batch (a new age batch, made when nil); returns the batch.
local function take_back(id, rec, batch)
  local prio, host, member = rec[1], rec[2], rec[3]
  local inf, ra = state_of(host)
  set_state(host, inf - 1, ra)
  redis.call('HINCRBY', K_C, 'expired', 1)
  redis.call('HINCRBY', K_C, 'queued', 1)
  local _, _, body = split(member)
  if not batch then batch = new_batch(0) end
  redis.call('HINCRBY', K_AGEC, batch, 1)
  push(id, batch, body or member, prio, host, rec[4])
  return batch
end

-- The expired entries of lexp: a LEASE call's (all its leases still out) or one lease's.
local function expire(entries)
  local batch = nil
  for _, e in ipairs(entries) do
    redis.call('ZREM', K_LEXP, e)
    local ser, one = string.match(e, '^(%d+):(%d+)$')
    local ids, hosts = {}, {}
    if ser then
      redis.call('SREM', K_LDET, e)
      local host = redis.call('HGET', lease_key(ser), one)
      if host then ids[1], hosts[1] = one, host end
    else
      ser = e
      local all = redis.call('HGETALL', lease_key(ser))
      for j = 1, #all, 2 do
        if all[j] ~= PIN_FIELD then ids[#ids + 1], hosts[#hosts + 1] = all[j], all[j + 1] end
      end
    end
    if #ids > 0 then
      local recs, order = lease_records(ser, ids)
      leases_ended(ser, ids)
      -- back in the order they were handed out (FIFO among equals), not the lease hash's
      for _, id in ipairs(order) do batch = take_back(id, recs[id], batch) end
      for j, id in ipairs(ids) do
        if not recs[id] then  -- its line is missing (never, but the host's room is given back)
          local inf, ra = state_of(hosts[j])
          set_state(hosts[j], inf - 1, ra)
        end
      end
    end
  end
end

-- Expired leases back to their queue, due delayed requests into theirs, due hosts into ready.
local function refresh()
  expire(redis.call('ZRANGEBYSCORE', K_LEXP, '-inf', NOW, 'LIMIT', 0, 1000))
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', NOW, 'LIMIT', 0, 1000)
  for _, entry in ipairs(due) do
    redis.call('ZREM', K_DELAYED, entry)
    local prio, host, member = string.match(entry, '^(-?%d+)\t([^\t]+)\t(.*)$')
    local id, b, body = nil, nil, nil
    if member then id, b, body = split(member) end
    if id then
      push(id, b, body, tonumber(prio), host)
    else
      redis.call('HINCRBY', K_C, 'queued', -1)
      bury(redis.call('INCR', K_SEQ), 'unreadable entry header', entry)
    end
  end
  local hosts = redis.call('ZRANGEBYSCORE', K_TIMERS, '-inf', NOW, 'LIMIT', 0, 1000)
  for _, host in ipairs(hosts) do
    redis.call('ZREM', K_TIMERS, host)
    schedule(host)
  end
end

-- Check a lease token and end the lease; returns id, prio, host, member or nil.
local function lease_of(token)
  local id, ser = token_parts(token)
  if not id then return nil end
  local host = redis.call('HGET', lease_key(ser), id)
  if not host then return nil end
  local rec = lease_records(ser, {id})[id]
  leases_ended(ser, {id})
  local inf, ra = state_of(host)
  set_state(host, inf - 1, ra)
  if not rec then return nil end  -- its line is missing (never)
  return id, rec[1], host, rec[3]
end

-- After leases of host were settled: where it goes now.
local function after_settle(host)
  schedule(host)
end
