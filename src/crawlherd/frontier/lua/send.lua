-- SEND (after prelude.lua). ARGV[5] the asking send gate (its owner id), [6] hold, then one host per
-- send asked ([7], [8], ...; a host may come more than once). The fleet's send clock: a request to host
-- may leave once
--   - the host's delay (its policy, as for leases) has passed since the last request any gate sent
--     there -- or since its answer, when that came later (ANSWER, answer.lua) --,
--   - no other gate's request to host is still unanswered: one sent at t holds the host until its
--     answer, and at most until t + delay + hold (an answer that never comes: a cancelled request,
--     a process gone),
--   - and the host's Retry-After hold (BLOCK_HOST) is over.
-- Why the answer: the server saw a request before it answered it, so a request sent delay after that
-- answer reaches the server at least delay after it, whatever happened between a gate's stamp and its
-- request reaching the server (the event loop, the socket write) -- without a margin on every delay.
-- Returns, for each send asked, in order: 'S' (it may leave now, stamped: its answer is awaited), '0'
-- (it may leave now; the host has no delay: nothing stamped), or the seconds to wait before asking
-- again. Sends asked together are judged one after the other, as if asked one by one now. A host
-- without a delay is neither read nor written beyond its policy and hold.
-- Keys (they expire once they can matter no more): sent:<host> STRING the time the host's delay runs
-- from; out:<host> HASH owner -> when its unanswered request was sent; hold:<host> (block_host.lua).
local owner, hold = ARGV[5], tonumber(ARGV[6])
local POLL = 0.02  -- an unanswered request past its delay: ask again this often for its answer
local out = {}
for i = 7, #ARGV do
  local host = ARGV[i]
  local gap = delay_of(host)
  local at = tonumber(redis.call('GET', P..':hold:'..host) or '0')
  local k_sent, k_out = P..':sent:'..host, P..':out:'..host
  if gap > 0 then
    local last = redis.call('GET', k_sent)
    if last then at = math.max(at, tonumber(last) + gap) end
    local outs = redis.call('HGETALL', k_out)
    for j = 1, #outs, 2 do
      if outs[j] ~= owner then
        local t = tonumber(outs[j + 1])
        if t + gap + hold <= NOW then
          redis.call('HDEL', k_out, outs[j])  -- its answer never came: it holds the host no more
        else
          at = math.max(at, math.min(math.max(t + gap, NOW + POLL), t + gap + hold))
        end
      end
    end
  end
  if NOW < at then
    out[#out + 1] = fmt(at - NOW)
  elseif gap > 0 then
    local ttl = math.ceil((gap + hold) * 1000) + 1000
    redis.call('SET', k_sent, fmt(NOW), 'PX', ttl)
    redis.call('HSET', k_out, owner, fmt(NOW))
    redis.call('PEXPIRE', k_out, ttl)
    out[#out + 1] = 'S'
  else
    out[#out + 1] = '0'
  end
end
return out
