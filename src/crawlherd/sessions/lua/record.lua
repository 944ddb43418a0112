-- KEYS[1]: the website's health hash; KEYS[2]: the set of websites.
-- ARGV: site, proxy label, outcome (ok|blocked|error), now, tiers, cool_off, escalate_after, descend_after.
-- The steps of crawlherd.sessions.base.apply_outcome, atomically.
local h, label, outcome = KEYS[1], ARGV[2], ARGV[3]
local now, tiers, cool = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local up, down = tonumber(ARGV[7]), tonumber(ARGV[8])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HINCRBY', h, 'r|' .. label, 1)
local tier = tonumber(redis.call('HGET', h, 'tier') or '0')
if outcome == 'ok' then
  redis.call('HINCRBY', h, 'o|' .. label, 1)
  redis.call('HSET', h, 'bir', 0)
  local oks = redis.call('HINCRBY', h, 'sir', 1)
  if oks >= down and tier > 0 then
    redis.call('HSET', h, 'tier', tier - 1, 'sir', 0)
  end
elseif outcome == 'blocked' then
  redis.call('HINCRBY', h, 'b|' .. label, 1)
  local rest = tonumber(redis.call('HGET', h, 'u|' .. label) or '0')
  if now + cool > rest then redis.call('HSET', h, 'u|' .. label, tostring(now + cool)) end
  redis.call('HSET', h, 'sir', 0)
  local blocks = redis.call('HINCRBY', h, 'bir', 1)
  if blocks >= up and tier < tiers - 1 then
    redis.call('HSET', h, 'tier', tier + 1, 'bir', 0)
  end
end
return redis.call('HGETALL', h)
