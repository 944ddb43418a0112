-- ACK (after prelude.lua). ARGV[5] mode: 'ack' | 'fail'; [6] the tokens, separated by spaces. Returns the
-- tokens that were not valid leases.
local MODE = ARGV[5]
local tokens, sers, lhosts = leases_in_arg(6)
local bad, done, done_hosts, perhost, hosts, settled = {}, {}, {}, {}, {}, {}
local byser, calls = {}, {}
for i, token in ipairs(tokens) do
  local host = lhosts[i]
  if host and not settled[token] then
    settled[token] = true  -- the same token twice in one call is settled once
    done[#done + 1] = token
    done_hosts[#done] = host
    local ser = sers[i]
    local g = byser[ser]
    if not g then
      g = {}
      byser[ser] = g
      calls[#calls + 1] = ser
    end
    g[#g + 1] = token
    local k = perhost[host]
    if not k then
      k = 0
      hosts[#hosts + 1] = host
    end
    perhost[host] = k + 1
  else
    bad[#bad + 1] = token
  end
end
if #done > 0 then
  for _, ser in ipairs(calls) do leases_ended(ser, byser[ser]) end
  local robots_done = {}  -- hosts whose robots request this was: not pending any more
  for j, token in ipairs(done) do
    local host = done_hosts[j]
    if robots_of(host) and robots_settled(host, token_parts(token)) then robots_done[#robots_done + 1] = host end
  end
  if redis.call('EXISTS', K_ATT) == 1 then
    local ids = {}
    for j, token in ipairs(done) do ids[j] = token_parts(token) end
    bulk('HDEL', K_ATT, ids)
  end
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
