-- KEYS: stream ; ARGV: group, id, consumer -> 1 (the claim is extended: idle time reset), or 0 when
-- the entry is no longer pending for this consumer (settled, or claimed by another one). One script,
-- so that no other consumer can claim the entry between the check and the XCLAIM.
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #pending == 0 or pending[1][2] ~= ARGV[3] then return 0 end
-- JUSTID: the claim does not count as a delivery
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'JUSTID')
return 1
