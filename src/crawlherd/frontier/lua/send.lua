-- SEND (after prelude.lua). ARGV[5] margin, then one host per send asked ([6], [7], ...; a host may come
-- more than once). The fleet's send gate: a request to host may leave when the host's delay (its policy,
-- as for leases) plus margin has passed since the last one any process sent, and the host's hold
-- (Retry-After, set by BLOCK_HOST) is over. Returns, for each send asked, in order, '0' (it is stamped
-- now) or the seconds to wait before asking again: the sends asked together are judged one after the
-- other, as if asked one by one now. A host without a delay or a hold is neither read nor written beyond
-- its policy. The stamps and holds are keys that expire once they can matter no more, so that they
-- never pile up.
local margin = tonumber(ARGV[5])
local out = {}
for i = 6, #ARGV do
  local host = ARGV[i]
  local gap = delay_of(host)
  local k_sent, k_hold = P..':sent:'..host, P..':hold:'..host
  local at = tonumber(redis.call('GET', k_hold) or '0')
  if gap > 0 then
    local last = redis.call('GET', k_sent)
    if last then at = math.max(at, tonumber(last) + gap + margin) end
  end
  if NOW < at then
    out[#out + 1] = fmt(at - NOW)
  else
    if gap > 0 then
      redis.call('SET', k_sent, fmt(NOW), 'PX', math.ceil((gap + margin) * 1000) + 1000)
    end
    out[#out + 1] = '0'
  end
end
return out
