-- take(): settle entry ARGV[2] of the stream KEYS[1] for group ARGV[1] -- XACK, refused when the
-- entry was settled already -- and delete it. Returns its fields as a flat list without 'n', and its
-- earlier deliveries n; nil when the entry was not pending.
local function take()
  if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return nil end
  local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
  redis.call('XDEL', KEYS[1], ARGV[2])
  local fields, n = {}, 0
  if #e > 0 then
    local f = e[1][2]
    for i = 1, #f, 2 do
      if f[i] == 'n' then n = tonumber(f[i + 1]) else fields[#fields + 1] = f[i]; fields[#fields + 1] = f[i + 1] end
    end
  end
  return fields, n
end
