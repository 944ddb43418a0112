-- STATS. ARGV[1] prefix. Returns counters (flat field/value list), in flight, oldest enqueued-at ('' none),
-- host depths.
local P = ARGV[1]
local counters = redis.call('HGETALL', P..':c')
local inflight = tonumber(redis.call('HGET', P..':c', 'out') or '0')
local oldest = redis.call('ZRANGE', P..':age', 0, 0, 'WITHSCORES')
local o = ''
if #oldest > 0 then o = oldest[2] end
-- a host with queued requests is ready, waiting (timers) or has leases out (h)
local depth, seen = {}, {}
local function count(host)
  if seen[host] then return end
  seen[host] = true
  local n = redis.call('ZCARD', P..':q:'..host)
  if n > 0 then depth[host] = n end
end
for _, host in ipairs(redis.call('ZRANGE', P..':ready', 0, -1)) do count(host) end
for _, host in ipairs(redis.call('ZRANGE', P..':timers', 0, -1)) do count(host) end
for _, host in ipairs(redis.call('HKEYS', P..':h')) do
  if host ~= '\t' then count(host) end  -- not the pin (prelude.lua)
end
for _, entry in ipairs(redis.call('ZRANGE', P..':delayed', 0, 9999)) do
  local host = string.match(entry, '^-?%d+\t([^\t]+)\t')
  if host then depth[host] = (depth[host] or 0) + 1 end
end
-- the loose requests (gq), by host: the best 10,000 counted (as delayed; a heartbeat reads them)
for _, m in ipairs(redis.call('ZRANGE', P..':gq', 0, 9999)) do
  local host = string.match(m, '^([^\t]*)\t')
  if host then depth[host] = (depth[host] or 0) + 1 end
end
-- robots requests queued (robots-pending hosts, rb)
local rb = redis.call('HGETALL', P..':rb')
for i = 1, #rb, 2 do
  if string.sub(rb[i + 1], 1, 2) == 'q\t' then depth[rb[i]] = (depth[rb[i]] or 0) + 1 end
end
local flat = {}
for host, n in pairs(depth) do
  flat[#flat + 1] = host
  flat[#flat + 1] = n
end
return {counters, inflight, o, flat}
