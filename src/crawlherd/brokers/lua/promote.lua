-- KEYS: zset, hash, stream ; ARGV: limit -> {moved, ms until the next one is due or -1} (now_ms.lua first)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, uid in ipairs(due) do
  local v = redis.call('HMGET', KEYS[2], uid .. ':k', uid .. ':b', uid .. ':h', uid .. ':n')
  if v[1] then
    local args = {'k', v[1], 'b', v[2]}
    if v[3] then args[#args + 1] = 'h'; args[#args + 1] = v[3] end
    if v[4] then args[#args + 1] = 'n'; args[#args + 1] = v[4] end
    redis.call('XADD', KEYS[3], '*', unpack(args))
  end
  redis.call('HDEL', KEYS[2], uid .. ':k', uid .. ':b', uid .. ':h', uid .. ':n')
  redis.call('ZREM', KEYS[1], uid)
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt == 0 then return {#due, -1} end
return {#due, math.max(0, tonumber(nxt[2]) - now)}
