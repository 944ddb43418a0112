-- KEYS: stream ; ARGV: group, id, consumer -> back at the end of the stream with n + 1 (take.lua first)
local fields, n = take()
if not fields then return 0 end
if #fields == 0 then return 1 end
fields[#fields + 1] = 'n'; fields[#fields + 1] = tostring(n + 1)
redis.call('XADD', KEYS[1], '*', unpack(fields))
return 1
