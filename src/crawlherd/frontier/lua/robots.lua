-- ROBOTS (after prelude.lua). ARGV[5] host, [6] priority, [7] body. Queues the host's robots.txt request
-- and makes the host robots-pending (see prelude.lua): it is handed out first, then nothing else of the
-- host until its lease is settled. Returns 1, or 0 when a robots request of this host was queued before.
-- Not refused when the frontier is full: it is what lets the host's queued pages go.
local host, prio, body = ARGV[5], tonumber(ARGV[6]), ARGV[7]
if redis.call('SADD', K_RBSEEN, host) == 0 then return 0 end
local id = redis.call('INCR', K_SEQ)
local b = new_batch(1)
redis.call('HSET', K_RB, host, 'q\t'..fmt(-prio * SHIFT + id)..'\t'..id..'\t'..b..'\t'..body)
HAS_RB = true
redis.call('HINCRBY', K_C, 'queued', 1)
redis.call('HINCRBY', K_C, 'enqueued', 1)
schedule(host)
return 1
