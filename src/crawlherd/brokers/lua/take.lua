-- held(): is entry ARGV[2] of the stream KEYS[1] pending in group ARGV[1] for consumer ARGV[3]? (A
-- consumer that hung past claim_idle lost it to another one, and must not settle it: fencing.)
local function held()
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
  return #p > 0 and p[1][2] == ARGV[3]
end
-- take(): settle entry ARGV[2] of the stream KEYS[1] for group ARGV[1] by its consumer ARGV[3] -- XACK,
-- refused when the entry was settled already or is another consumer's now -- and delete it. Returns its
-- fields as a flat list without 'n', and its earlier deliveries n; nil when the entry was not held.
local function take()
  if not held() then return nil end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
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
