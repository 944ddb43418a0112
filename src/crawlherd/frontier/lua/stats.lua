-- STATS. ARGV[1] prefix. Returns counters (flat field/value list), in flight, oldest enqueued-at ('' none),
-- host depths.
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
