-- LEASE (after prelude.lua). ARGV[5] limit, [6] lease timeout. Returns the time the leases were made at
-- ('%.17g'), then token, payload, attempt for each lease; ids found unreadable are moved aside.
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
