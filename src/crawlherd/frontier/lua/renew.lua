-- RENEW (after prelude.lua). ARGV[5] liveness; [6] the tokens of the leases one holder still holds,
-- separated by spaces.
-- Each valid lease now expires LIVENESS from now, never after its deadline (the '@' part of its token,
-- set by LEASE). A lease that expired but was not taken back yet is renewed as well: nobody else holds it.
-- Returns the tokens that are no longer valid leases (settled, or expired and taken back: the holder has
-- lost them).
local LIVE = tonumber(ARGV[5])
local tokens, ids, infos = leases_in_arg(6)
local lost, lexp = {}, {}
for i, token in ipairs(tokens) do
  local info = infos[i]
  local deadline = tonumber(string.match(token, '@([^@]+)$') or '')
  if info and deadline and string.sub(info, 1, #token + 1) == token..'\t' then
    lexp[#lexp + 1] = math.min(NOW + LIVE, deadline)
    lexp[#lexp + 1] = ids[i]
  else
    lost[#lost + 1] = token
  end
end
if #lexp > 0 then bulk('ZADD', K_LEXP, lexp) end
return lost
