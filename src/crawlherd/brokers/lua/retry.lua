-- KEYS: stream, zset, hash ; ARGV: group, id, consumer, uid, delay_ms, has_body, body (now_ms.lua, take.lua first)
local fields, n = take()
if not fields then return 0 end
if #fields == 0 then return 1 end
local m = {}
for i = 1, #fields, 2 do m[fields[i]] = fields[i + 1] end
if ARGV[6] == '1' then m['b'] = ARGV[7] end
local delay = tonumber(ARGV[5])
if delay > 0 then
  local u = ARGV[4]
  redis.call('HSET', KEYS[3], u .. ':k', m['k'], u .. ':b', m['b'])
  if m['h'] then redis.call('HSET', KEYS[3], u .. ':h', m['h']) end
  redis.call('ZADD', KEYS[2], now + delay, u)
else
  local args = {'k', m['k'], 'b', m['b']}
  if m['h'] then args[#args + 1] = 'h'; args[#args + 1] = m['h'] end
  redis.call('XADD', KEYS[1], '*', unpack(args))
end
return 1
