-- RENEW (after prelude.lua). ARGV[5] liveness; [6] the tokens of the leases one holder still holds,
-- separated by spaces.
-- Each valid lease now expires LIVENESS from now, never after its deadline (the '@' part of its token,
-- set by LEASE). A lease that expired but was not taken back yet is renewed as well: nobody else holds it.
-- The expiry is one entry per LEASE call: a lease of the call that is not renewed with the others (its
-- holder gave it back, or tried to) keeps the expiry it had, as an entry of its own ("<serial>:<id>").
-- Returns the tokens that are no longer valid leases (settled, or expired and taken back: the holder has
-- lost them).
local LIVE = tonumber(ARGV[5])
local tokens, ids, sers, lhosts = leases_in_arg(6)
local lost, until_, renewed, calls = {}, {}, {}, {}
for i, token in ipairs(tokens) do
  local deadline = tonumber(string.match(token, '@([^@]+)$') or '')
  if lhosts[i] and deadline then
    local ser = sers[i]
    if not renewed[ser] then
      renewed[ser] = {}
      calls[#calls + 1] = ser
      until_[ser] = math.min(NOW + LIVE, deadline)
    end
    renewed[ser][ids[i]] = true
  else
    lost[#lost + 1] = token
  end
end
local DET = redis.call('EXISTS', K_LDET) == 1
for _, ser in ipairs(calls) do
  local key, mine = lease_key(ser), renewed[ser]
  local n = 0
  for _ in pairs(mine) do n = n + 1 end
  if n < redis.call('HLEN', key) - 1 then  -- (its pin, see lease.lua)
    -- leases of the call not renewed now keep the call's expiry so far (or their own, earlier one)
    local was = redis.call('ZSCORE', K_LEXP, ser)
    local own = {}
    for _, id in ipairs(redis.call('HKEYS', key)) do
      if not mine[id] and id ~= PIN_FIELD then
        own[#own + 1] = was
        own[#own + 1] = ser..':'..id
      end
    end
    if was and #own > 0 then
      bulk('ZADD', K_LEXP, own, 'NX')
      local names = {}
      for j = 2, #own, 2 do names[#names + 1] = own[j] end
      bulk('SADD', K_LDET, names)
      DET = true
    end
  end
  if DET then
    -- renewed again (held again after a settle failed): no expiry of its own any more
    local names = {}
    for id in pairs(mine) do names[#names + 1] = ser..':'..id end
    bulk('ZREM', K_LEXP, names)
    bulk('SREM', K_LDET, names)
  end
  redis.call('ZADD', K_LEXP, until_[ser], ser)
end
return lost
