-- RETRY (after prelude.lua). ARGV[5] token, [6] delay, [7] attempt. Returns 1, or 0 when the lease is not
-- valid.
local id, prio, host, member = lease_of(ARGV[5])
if not id then return 0 end
local delay = tonumber(ARGV[6])
redis.call('HSET', K_ATT, id, ARGV[7])
redis.call('HINCRBY', K_C, 'retries', 1)
redis.call('HINCRBY', K_C, 'queued', 1)
local _, _, body = split(member)
local b = new_batch(1)
if delay > 0 then
  redis.call('ZADD', K_DELAYED, NOW + delay, prio..'\t'..host..'\t'..id..'\t'..b..'\t'..(body or member))
  after_settle(host)
else
  push(id, b, body or member, prio, host)
end
return 1
