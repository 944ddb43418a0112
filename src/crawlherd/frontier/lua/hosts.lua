-- HOSTS. ARGV[1] prefix, [2] now, [3] default delay, [4] default in-flight cap. Read only.
-- Returns, for every host with something queued, leases out, a delay running or a back-off (P:blocked,
-- written by block_host.lua): host, queued, in flight, cap, delay, ready_at, blocked-until ('' none).
local P = ARGV[1]
local NOW = tonumber(ARGV[2])
local DEF_DELAY, DEF_CAP = ARGV[3], ARGV[4]
local K_H = P..':h'
local hosts, order, delayed = {}, {}, {}
local function add(host)
  if not hosts[host] then
    hosts[host] = true
    order[#order + 1] = host
  end
end
for _, host in ipairs(redis.call('ZRANGE', P..':ready', 0, -1)) do add(host) end
for _, host in ipairs(redis.call('ZRANGE', P..':timers', 0, -1)) do add(host) end
for _, host in ipairs(redis.call('HKEYS', K_H)) do
  if host ~= '\t' then add(host) end  -- not the pin (prelude.lua)
end
for _, host in ipairs(redis.call('ZRANGEBYSCORE', P..':blocked', '('..ARGV[2], '+inf')) do add(host) end
for _, entry in ipairs(redis.call('ZRANGE', P..':delayed', 0, 9999)) do
  local host = string.match(entry, '^-?%d+\t([^\t]+)\t')
  if host then
    add(host)
    delayed[host] = (delayed[host] or 0) + 1
  end
end
-- the loose requests (gq) count as queued, by host: the best 10,000 counted, as delayed
for _, m in ipairs(redis.call('ZRANGE', P..':gq', 0, 9999)) do
  local host = string.match(m, '^([^\t]*)\t')
  if host then
    add(host)
    delayed[host] = (delayed[host] or 0) + 1
  end
end
local out = {}
for _, host in ipairs(order) do
  local queued = redis.call('ZCARD', P..':q:'..host) + (delayed[host] or 0)
  local inf, ra = 0, '0'
  local v = redis.call('HGET', K_H, host)
  if v then  -- "<leases out> <ready_at>", or "<leases out>" (ready_at 0)
    local i, r = string.match(v, '^(%-?%d+) (.*)$')
    if i then inf, ra = tonumber(i), r else inf = tonumber(v) end
  end
  local blk = redis.call('ZSCORE', P..':blocked', host) or ''
  if queued > 0 or inf > 0 or tonumber(ra) > NOW or (blk ~= '' and tonumber(blk) > NOW) then
    out[#out + 1] = host
    out[#out + 1] = queued
    out[#out + 1] = inf
    out[#out + 1] = redis.call('HGET', P..':pcap', host) or DEF_CAP
    out[#out + 1] = redis.call('HGET', P..':pdelay', host) or DEF_DELAY
    out[#out + 1] = ra
    out[#out + 1] = blk
  end
end
return out
