-- ANSWER (after prelude.lua). ARGV[5] the send gate (owner id), [6] 'answer' or 'release', then
-- "<time> <slot> <host>" ([7], [8], ...). The requests owner sent to these hosts at these slots (given
-- by SEND, send.lua) were answered (or failed) at these times: the host's delay runs from then, and
-- other gates' sends wait for it no more. The slot names the request: an answer recorded after the
-- owner's next request there took its slot (the two calls race) leaves that one's hold alone, else
-- another gate could go delay after its slot while it is late to leave. Slot '-': the owner's
-- request whatever its slot (a 'release'). 'release': a
-- stamped send that never left (its caller was cancelled): the host is no longer held by it, its stamp
-- stays. A host owner holds nothing at (its hold expired, or never stamped) is left as it is. Returns,
-- for each host in order, '1' when owner held it, else '0'.
local owner, mode = ARGV[5], ARGV[6]
local out = {}
for i = 7, #ARGV do
  local at, slot, host = string.match(ARGV[i], '^(%S+) (%S+) (.*)$')
  at = math.min(tonumber(at), NOW)
  local k_out = P..':out:'..host
  local cur = redis.call('HGET', k_out, owner)
  local held = cur and (slot == '-' or cur == slot)
  if held then redis.call('HDEL', k_out, owner) end
  if held and mode == 'answer' then
    local k_sent = P..':sent:'..host
    if at > tonumber(redis.call('GET', k_sent) or '0') then
      redis.call('SET', k_sent, fmt(at), 'PX', math.ceil(delay_of(host) * 1000) + 1000)
    end
  end
  out[#out + 1] = held and '1' or '0'
end
return out
