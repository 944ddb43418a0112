-- ACK (after prelude.lua). ARGV[5] mode: 'ack' | 'fail'; tokens follow. Returns the tokens that were not
-- valid leases.
local MODE = ARGV[5]
local tokens, ids = {}, {}
for i = 6, #ARGV do
  tokens[#tokens + 1] = ARGV[i]
  ids[#ids + 1] = string.match(ARGV[i], '^(%d+):') or '0'
end
local infos = hmget(K_LEASE, ids)
local bad, done, perhost, settled = {}, {}, {}, {}
for i, token in ipairs(tokens) do
  local info = infos[i]
  local tok, host
  if info then tok, host = string.match(info, '^([^\t]*)\t%-?%d+\t(.*)$') end
  if info and tok == token and not settled[ids[i]] then
    settled[ids[i]] = true  -- the same token twice in one call is settled once
    done[#done + 1] = ids[i]
    perhost[host] = (perhost[host] or 0) + 1
  else
    bad[#bad + 1] = token
  end
end
if #done > 0 then
  bulk('HDEL', K_LEASE, done)
  bulk('ZREM', K_LEXP, done)
  bulk('HDEL', K_REQ, done)
  if redis.call('EXISTS', K_ATT) == 1 then bulk('HDEL', K_ATT, done) end
  for host, k in pairs(perhost) do
    redis.call('HINCRBY', K_HINF, host, -k)
    after_settle(host)
  end
  if MODE == 'ack' then redis.call('HINCRBY', K_C, 'acked', #done)
  else redis.call('HINCRBY', K_C, 'failures', #done) end
end
return bad
