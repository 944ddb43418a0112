-- KEYS: stream, dead ; ARGV: group, id, consumer, reason (now_ms.lua, take.lua first)
local fields, n = take()
if not fields then return 0 end
if #fields == 0 then return 1 end
fields[#fields + 1] = 'r'; fields[#fields + 1] = ARGV[4]
fields[#fields + 1] = 't'; fields[#fields + 1] = tostring(now)
redis.call('XADD', KEYS[2], '*', unpack(fields))
return 1
