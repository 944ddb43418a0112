-- ACK (after prelude.lua). ARGV[5] mode: 'ack' | 'fail'; [6] the tokens, separated by spaces. Returns the
-- tokens that were not valid leases.
local MODE = ARGV[5]
local tokens, ids, infos, sers = leases_in_arg(6)
local bad, done, perhost, hosts, settled, robots_done = {}, {}, {}, {}, {}, {}
local byser, calls = {}, {}
for i, token in ipairs(tokens) do
  local info = infos[i]
  local tok, host
  if info then tok, host = string.match(info, '^([^\t]*)\t%-?%d+\t([^\t]*)\t') end
  if info and tok == token and not settled[ids[i]] then
    settled[ids[i]] = true  -- the same token twice in one call is settled once
    done[#done + 1] = ids[i]
    local ser = sers[i]
    if not byser[ser] then
      byser[ser] = {}
      calls[#calls + 1] = ser
    end
    local g = byser[ser]
    g[#g + 1] = ids[i]
    if not perhost[host] then
      perhost[host] = 0
      hosts[#hosts + 1] = host
    end
    perhost[host] = perhost[host] + 1
    if robots_settled(host, ids[i]) then robots_done[#robots_done + 1] = host end
  else
    bad[#bad + 1] = token
  end
end
if #done > 0 then
  for _, ser in ipairs(calls) do
    bulk('HDEL', lease_key(ser), byser[ser])
    leases_ended(ser, byser[ser])
  end
  if redis.call('EXISTS', K_ATT) == 1 then bulk('HDEL', K_ATT, done) end
  local states = hmget(K_H, hosts)
  local gone, keep = {}, {}
  for i, host in ipairs(hosts) do
    local inf, ra = unpack_state(states[i])
    local now_inf = inf - perhost[host]
    if now_inf <= 0 and ra <= NOW then
      gone[#gone + 1] = host
    else
      keep[#keep + 1] = host
      keep[#keep + 1] = state_str(now_inf, ra)
    end
    local cap = cap_of(host)
    if inf >= cap and now_inf < cap then place(host, head_of(host), now_inf, ra) end  -- its cap held it back
  end
  if #gone > 0 then bulk('HDEL', K_H, gone) end
  if #keep > 0 then
    keep[#keep + 1], keep[#keep + 2] = PIN_FIELD, PIN
    bulk('HSET', K_H, keep)
  end
  for _, host in ipairs(robots_done) do schedule(host) end  -- its pages may go now
  if MODE == 'ack' then redis.call('HINCRBY', K_C, 'acked', #done)
  else redis.call('HINCRBY', K_C, 'failures', #done) end
end
return bad
