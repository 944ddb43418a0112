-- ANSWER (after prelude.lua). ARGV[5] the send gate (owner id), [6] 'answer' or 'release', then
-- "<time> <host>" ([7], [8], ...). The requests owner sent to these hosts (given their slots by SEND,
-- send.lua) were answered (or failed) at these times: the host's delay runs from then, and other
-- gates' sends wait for it no more. 'release': a
-- stamped send that never left (its caller was cancelled): the host is no longer held by it, its stamp
-- stays. A host owner holds nothing at (its hold expired, or never stamped) is left as it is. Returns,
-- for each host in order, '1' when owner held it, else '0'.
local owner, mode = ARGV[5], ARGV[6]
local out = {}
for i = 7, #ARGV do
  local at, host = string.match(ARGV[i], '^(%S+) (.*)$')
  at = math.min(tonumber(at), NOW)
  local held = redis.call('HDEL', P..':out:'..host, owner) == 1
  if held and mode == 'answer' then
    local k_sent = P..':sent:'..host
    if at > tonumber(redis.call('GET', k_sent) or '0') then
      redis.call('SET', k_sent, fmt(at), 'PX', math.ceil(delay_of(host) * 1000) + 1000)
    end
  end
  out[#out + 1] = held and '1' or '0'
end
return out
