-- SEND (after prelude.lua). ARGV[5] the asking send gate (its owner id), [6] hold, then one host per
-- send asked ([7], [8], ...; a host may come more than once). The fleet's send clock: a request to host
-- takes the host's next slot, the first time when
--   - the host's delay (its policy, as for leases) has passed since the last request any gate sent
--     there -- or since its answer, when that came later (ANSWER, answer.lua) --,
--   - no other gate's request to host is still unanswered: one of slot t holds the host until its
--     answer, and at most until t + delay + hold (an answer that never comes: a cancelled request,
--     a process gone); the asking gate's own one not reported answered is taken as answered now once
--     its slot has passed (a redirect's next hop, a page after the robots.txt it needed: they follow
--     its answer), but holds like another's while its slot has not come: it has not left yet (a
--     second page slot of the gate's process that asked before the first's slot came back), and two
--     requests in flight at once may reach the server in either order, whatever their slots,
--   - and the host's Retry-After hold (BLOCK_HOST) is over.
-- Why the answer: the server saw a request before it answered it, so a request sent delay after that
-- answer reaches the server at least delay after it, whatever happened between a gate's stamp and its
-- request reaching the server (the event loop, the socket write) -- without a margin on every delay.
-- Returns, for each send asked, in order: 'S<time>' (its slot is taken: it leaves at that time on the
-- caller's clock, and its answer is awaited), '0' (it may leave now; the host has no delay: nothing stamped),
-- or the seconds to wait before asking again (a Retry-After hold on a host without a delay, or a
-- request unanswered). Sends asked together are judged one after the other, as if asked one by one
-- now: a gate's second send to a host is held by its first, whose slot is now. A host without a delay
-- is neither read nor written beyond its policy and hold.
-- Keys (they expire once they can matter no more): sent:<host> STRING the time the host's delay runs
-- from; out:<host> HASH owner -> the slot of its unanswered request; hold:<host> (block_host.lua).
local owner, hold = ARGV[5], tonumber(ARGV[6])
local POLL = 0.02  -- a request unanswered past its delay: ask again this often
local out = {}
for i = 7, #ARGV do
  local host = ARGV[i]
  local gap = delay_of(host)
  local at = tonumber(redis.call('GET', P..':hold:'..host) or '0')
  local k_sent, k_out = P..':sent:'..host, P..':out:'..host
  local again = nil  -- held by a request unanswered: when to ask again
  if gap > 0 then
    local last = tonumber(redis.call('GET', k_sent) or '0')
    local outs = redis.call('HGETALL', k_out)
    for j = 1, #outs, 2 do
      local t = tonumber(outs[j + 1])
      if outs[j] == owner and t < NOW then
        -- the gate's own request not reported answered, its slot passed (a redirect's next hop, a
        -- page after the robots.txt it needed): answered by now, so the delay runs from now
        redis.call('HDEL', k_out, owner)
        if NOW > last then
          last = NOW
          redis.call('SET', k_sent, fmt(NOW), 'PX', math.ceil((gap + hold) * 1000) + 1000)
        end
      elseif t + gap + hold <= NOW then
        redis.call('HDEL', k_out, outs[j])  -- its answer never came: it holds the host no more
      else
        local t_again = math.min(math.max(t + gap, NOW + POLL), t + gap + hold)
        if again == nil or t_again > again then again = t_again end
      end
    end
    at = math.max(at, last + gap)
  end
  if again then
    out[#out + 1] = fmt(math.max(again, at) - NOW)
  elseif gap > 0 then
    local t = math.max(at, NOW)  -- the send's slot, taken now
    local ttl = math.ceil((t - NOW + gap + hold) * 1000) + 1000
    redis.call('SET', k_sent, fmt(t), 'PX', ttl)
    redis.call('HSET', k_out, owner, fmt(t))
    redis.call('PEXPIRE', k_out, ttl)
    out[#out + 1] = 'S'..fmt(t)
  elseif NOW < at then
    out[#out + 1] = fmt(at - NOW)
  else
    out[#out + 1] = '0'
  end
end
return out
