-- KEYS: dead, stream ; ARGV: id or '', limit -> moved
local entries
if ARGV[1] ~= '' then
  entries = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
else
  entries = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', tonumber(ARGV[2]))
end
for _, e in ipairs(entries) do
  local f, args = e[2], {}
  for i = 1, #f, 2 do
    if f[i] == 'k' or f[i] == 'b' or f[i] == 'h' then args[#args + 1] = f[i]; args[#args + 1] = f[i + 1] end
  end
  redis.call('XADD', KEYS[2], '*', unpack(args))
  redis.call('XDEL', KEYS[1], e[1])
end
return #entries
